#!/usr/bin/env bash
# make bench-compare: softrnic beside the kernel on one veth pair, in
# interleaved rounds, medians, and each goal of #13 and #25 as a ratio.
#
# Two network namespaces joined by a veth pair (MTU 9000, IB MTU 4096).
# Each round runs, one after the other: sockperf UDP ping-pong (14 bytes,
# the kernel's latency) sleeping in the kernel and busy-polling
# (--nonblocked --timeout 0 on both sides, like with like for softrnic's
# polling; its CPU time per iteration beside it), iperf3 TCP, the xsk
# port's raw frame rate at 4096-byte payloads and the kernel's UDP with
# GSO and GRO (softrnic bench frames, its own veth pair: 15 RoCEv2
# packets a send call, one a segment), and
# softrnic perf write-lat, send-lat and read-lat (2 bytes) and write-bw,
# read-bw and send-bw (64 KiB) between two softrnic NICs, write-bw with
# four QPs on the one-queue pair, and write-bw with one QP and with four on
# a second veth pair with two queues (two engines) a side, and write-lat
# and write-bw with both sides pinned to one core (taskset), beside the
# busy-polling ping-pong and TCP pinned the same way; then softrnic bench scale (QP scaling with each cache),
# softrnic bench hpu's scheduler and veth rows (the handler goals) and the
# allocations per work request (go test -bench RCWrite). The latency
# tests run with -poll app (the tool's polling drives its NIC, as
# perftest busy-polls) and report the CPU time per iteration, both
# processes' sum of user and system time, so the cost of polling shows.
# Needs root, sockperf and iperf3.
#
# Environment: SOFTRNIC (the binary), ROUNDS (default 3), LATN (latency
# iterations, 100000: about a second, of the order of sockperf's 2 s of
# round trips, so that both p99s are over runs of similar length, not
# softrnic's over its first 50 ms; its figures are over sockperf's
# window, after the first 400 ms, see windowed), BWN (bandwidth iterations, 3000), SECS (seconds per
# sockperf, iperf3 and frames run, 2).
set -eu
cd "$(dirname "$0")/../.."
. tests/lib/vethpair.sh
BIN=$(realpath "${SOFTRNIC:-bin/softrnic}")
export PATH="$PATH:/usr/local/go/bin"
ROUNDS=${ROUNDS:-3}
LATN=${LATN:-100000}
BWN=${BWN:-3000}
SECS=${SECS:-2}
PIN="" # a command prefix for both perf sides (taskset)
MTU=9000
[ "$(id -u)" = 0 ] || { echo "bench-compare: needs root (network namespaces)" >&2; exit 2; }
. tests/lib/need.sh
need bench-compare sockperf sockperf iperf3 iperf3
A=srncmp-a-$$ B=srncmp-b-$$
OUT=$(mktemp -d /tmp/bench-compare.XXXXXX)
pids=()
cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	vethpair_del $A $B
	rm -rf "$OUT"
}
trap cleanup EXIT
vethpair $A $B $MTU 10.50.0
# A second pair with two queues a side, for one QP against four on two engines.
ip link add veth1 netns $A numtxqueues 2 numrxqueues 2 type veth peer name veth1 netns $B numtxqueues 2 numrxqueues 2
ip -n $A link set veth1 mtu $MTU up
ip -n $B link set veth1 mtu $MTU up
ip -n $A addr add 10.50.1.1/24 dev veth1
ip -n $B addr add 10.50.1.2/24 dev veth1
sleep 0.5

# wait_port NS PORT: until something listens on TCP PORT in NS.
wait_port() {
	for _ in $(seq 100); do ip netns exec "$1" ss -ltnu | grep -q ":$2 " && return 0; sleep 0.05; done
	return 1
}

# tcp NAME [PREFIX...]: one iperf3 TCP run, both sides under PREFIX (a
# taskset), its Gbit/s recorded as NAME.
tcp() {
	local name=$1
	shift
	ip netns exec $A "$@" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
	pids+=($!)
	wait_port $A 5201
	ip netns exec $B "$@" iperf3 -c 10.50.0.1 -p 5201 -t "$SECS" -f g >"$OUT/$name.log" 2>&1
	wait "${pids[@]}" 2>/dev/null || true
	pids=()
	record "$name" "$(awk '/receiver/ {for (i=1;i<=NF;i++) if ($i=="Gbits/sec") print $(i-1)}' "$OUT/$name.log")"
}

# record NAME VALUE: one round's figure.
record() { echo "$2" >>"$OUT/$1"; }

# median NAME: the median of the rounds' figures.
median() { sort -g "$OUT/$1" | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# windowed LOG DIV: the p50 and p99 of a latency run's samples (perf
# -U: one a line, in order; each an iteration's time over DIV) over
# sockperf's measured window: sockperf leaves its first 400 ms (its
# warm-up) and its last 50 ms out of its figures ("Valid Duration"), and
# so, like with like, does this. The whole run's figures, as perftest
# prints them, are shown beside.
windowed() {
	awk -v div="$2" '/^[0-9]+, [0-9.]+$/ {split($0, a, ", "); v[n] = a[2]; t += a[2] * div; ts[n++] = t}
		END {for (i = 0; i < n; i++) if (ts[i] > 400000 && ts[i] < t - 50000) print v[i]}' "$1" |
		sort -g | awk '{x[NR] = $1} END {k = int(NR * 0.99); if (k < 1) k = 1; if (NR == 0) print "nan nan"; else printf "%.2f %.2f\n", x[int((NR + 1) / 2)], x[k]}'
}

# perf TEST ARGS...: softrnic perf TEST, server in A, client in B; the
# client's output on stdout.
perf() {
	local t=$1
	shift
	local dev=veth0 server=10.50.0.1
	if [ "$t" = mq ]; then # write-bw on the two-queue pair
		t=write-bw dev=veth1 server=10.50.1.1
	fi
	ip netns exec $A $PIN "$BIN" perf "$t" -d $dev "$@" >"$OUT/server.log" 2>&1 &
	local spid=$!
	pids+=($spid)
	wait_port $A 18515 || { echo "bench-compare: softrnic perf $t server did not listen" >&2; cat "$OUT/server.log" >&2; exit 1; }
	ip netns exec $B $PIN "$BIN" perf "$t" -d $dev "$@" $server >"$OUT/client.log" 2>&1 || { cat "$OUT/client.log" >&2; exit 1; }
	wait $spid || { cat "$OUT/server.log" >&2; exit 1; }
	pids=()
}

for r in $(seq "$ROUNDS"); do
	echo "== round $r of $ROUNDS" >&2
	# The kernel's UDP ping-pong (half round trip, as perftest's latency).
	ip netns exec $A sockperf server -i 10.50.0.1 -p 11111 >/dev/null 2>&1 &
	pids+=($!)
	sleep 0.3
	ip netns exec $B sockperf ping-pong -i 10.50.0.1 -p 11111 -t "$SECS" -m 14 >"$OUT/sockperf.log" 2>&1
	kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true
	pids=()
	record udp_p50 "$(awk '/percentile 50.000/ {print $NF}' "$OUT/sockperf.log")"
	record udp_p99 "$(awk '/percentile 99.000/ {print $NF}' "$OUT/sockperf.log")"

	# The same ping-pong with both sides busy-polling their sockets; the
	# CPU time per round trip from each process's share of a core over its
	# life (user and system time over wall time), times the length of a
	# round trip in sockperf's measured window.
	t0=$(date +%s%N)
	ip netns exec $A sockperf server -i 10.50.0.1 -p 11111 --nonblocked --timeout 0 >/dev/null 2>&1 &
	spid=$!
	pids+=($spid)
	sleep 0.3
	t1=$(date +%s%N)
	ip netns exec $B bash -c "(sockperf ping-pong -i 10.50.0.1 -p 11111 -t $SECS -m 14 --nonblocked --timeout 0; times)" >"$OUT/sockperf-busy.log" 2>&1
	sticks=$(awk '{print $14 + $15}' "/proc/$spid/stat" 2>/dev/null || echo 0)
	t2=$(date +%s%N)
	kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true
	pids=()
	record busy_p50 "$(awk '/percentile 50.000/ {print $NF}' "$OUT/sockperf-busy.log")"
	record busy_p99 "$(awk '/percentile 99.000/ {print $NF}' "$OUT/sockperf-busy.log")"
	record busy_cpu "$(awk -v st="$sticks" -v hz="$(getconf CLK_TCK)" -v sw="$(((t2 - t0) / 1000))" -v cw="$(((t2 - t1) / 1000))" '
		/Valid Duration/ { for (i = 1; i <= NF; i++) { if ($i ~ /^RunTime=/) { sub(/RunTime=/, "", $i); valid = $i } if ($i ~ /^SentMessages=/) { sub(/SentMessages=/, "", $i); sub(/;/, "", $i); msgs = $i } } }
		/^[0-9]+m[0-9.]+s [0-9]+m[0-9.]+s$/ { n++; if (n == 2) { split($1, u, /[ms]/); split($2, s, /[ms]/); cli = u[1] * 60 + u[2] + s[1] * 60 + s[2] } }
		END { if (msgs > 0 && sw > 0 && cw > 0) printf "%.2f", (cli / (cw / 1e6) + st / hz / (sw / 1e6)) * valid / msgs * 1e6; else print "nan" }' "$OUT/sockperf-busy.log")"

	# The busy-polling ping-pong and TCP with both sides pinned to one
	# core, the like-with-like references of softrnic's one-core rows: two
	# spinners on one core each wait for the scheduler to give the other
	# its turn.
	ip netns exec $A taskset -c 0 sockperf server -i 10.50.0.1 -p 11111 --nonblocked --timeout 0 >/dev/null 2>&1 &
	pids+=($!)
	sleep 0.3
	ip netns exec $B taskset -c 0 sockperf ping-pong -i 10.50.0.1 -p 11111 -t "$SECS" -m 14 --nonblocked --timeout 0 >"$OUT/sockperf-pin.log" 2>&1
	kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true
	pids=()
	record pin_busy_p50 "$(awk '/percentile 50.000/ {print $NF}' "$OUT/sockperf-pin.log")"
	tcp pin_tcp_gbps taskset -c 0

	# TCP.
	tcp tcp_gbps

	# The xsk port's raw frame rate at 4096-byte payloads.
	"$BIN" bench frames -s 4096 -m xsk -d "${SECS}s" >"$OUT/frames.log" 2>&1
	record raw_gbps "$(awk '$1=="4096" && $2=="xsk" {print $5}' "$OUT/frames.log")"
	# The kernel's UDP with GSO and GRO, the same packets 15 a call.
	"$BIN" bench frames -s 4096 -m "kernel UDP GSO" -d "${SECS}s" >"$OUT/gso.log" 2>&1
	record gso_gbps "$(awk '$1=="4096" && $2=="kernel" && $4=="GSO" {print $7}' "$OUT/gso.log")"

	# softrnic's latency tests: p50 and p99 over sockperf's window (see
	# windowed), the whole run's t_typical and 99 % as perftest prints
	# them, CPU per iteration.
	for t in write-lat send-lat read-lat; do
		perf $t -n "$LATN" -poll app --cpu -U
		line=$(awk '$1=="2" && NF>=9 {print; exit}' "$OUT/client.log")
		record "${t}_all_p50" "$(echo "$line" | awk '{print $5}')"
		record "${t}_all_p99" "$(echo "$line" | awk '{print $8}')"
		div=2
		[ $t = read-lat ] && div=1
		read -r w50 w99 < <(windowed "$OUT/client.log" $div)
		record "${t}_p50" "$w50"
		record "${t}_p99" "$w99"
		c=$(awk '/CPU time:/ {print $3}' "$OUT/client.log")
		s=$(awk '/CPU time:/ {print $3}' "$OUT/server.log")
		record "${t}_cpu" "$(awk -v c="$c" -v s="$s" 'BEGIN {print c+s}')"
	done
	# softrnic's bandwidth tests: BW average, Gbit/s.
	# On each port: the xsk port (AF_XDP, copy mode on a veth) and the
	# kernel UDP port (UDP GSO and GRO: runs of frames in one call).
	for t in write-bw read-bw send-bw; do
		perf $t -n "$BWN" --report_gbits
		record "${t}_gbps" "$(awk '$1=="65536" {print $4; exit}' "$OUT/client.log")"
		perf $t -n "$BWN" --report_gbits --io udp
		record "${t}_udp_gbps" "$(awk '$1=="65536" {print $4; exit}' "$OUT/client.log")"
	done
	# Both sides pinned to one core (an oversubscribed host: the NICs'
	# and the tests' threads outnumber the cores): latency and bandwidth.
	PIN="taskset -c 0" perf write-lat -n "$LATN" -poll app
	record pin_lat_p50 "$(awk '$1=="2" && NF>=9 {print $5; exit}' "$OUT/client.log")"
	PIN="taskset -c 0" perf write-bw -n "$BWN" --report_gbits
	record pin_bw_gbps "$(awk '$1=="65536" {print $4; exit}' "$OUT/client.log")"
	# Four QPs on the one-queue pair (one engine a side).
	perf write-bw -n "$BWN" --report_gbits -q 4
	record q4one_gbps "$(awk '$1=="65536" {print $4; exit}' "$OUT/client.log")"
	# Two queues and two engines a side: one QP, then four.
	for q in 1 4; do
		perf mq -n "$BWN" --report_gbits -q $q
		record "mq${q}_gbps" "$(awk '$1=="65536" {print $4; exit}' "$OUT/client.log")"
	done
done

# QP scaling with GCCache in the live NIC (in-memory port: no veth).
echo "== softrnic bench scale" >&2
"$BIN" bench scale -d 500ms >"$OUT/scale.log" 2>&1
scale() { awk -v c="$1" -v q="$2" '$1==c && $2==q {print $4}' "$OUT/scale.log"; }
# The handler goals: the scheduler alone with an empty handler, and 64 B
# WRITEs through an empty payload handler on a veth pair beside none.
echo "== softrnic bench hpu (scheduler, veth)" >&2
"$BIN" bench hpu -apps=false -samples 2000 -n 100000 >"$OUT/hpu.log" 2>&1
hpu_mpps() { awk -v c="$1" -v h="$2" '$1==c && $2=="x" && $3==h {print $5}' "$OUT/hpu.log"; }
hpu_pps() { awk -v w="$1" 'index($0, w) {print $(NF-1); exit}' "$OUT/hpu.log"; }
# Allocations per work request over the whole path.
echo "== allocations (go test -bench RCWrite)" >&2
allocs=nan
if command -v go >/dev/null; then
	allocs=$(go test -run '^$' -bench 'RCWrite/size=65536' -benchtime 2000x ./host/verbs/ 2>/dev/null | awk '/allocs\/WR/ {for (i=1;i<=NF;i++) if ($i=="allocs/WR") print $(i-1)}')
fi

# ratio A B: A/B to two places (three under 0.1).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b+0==0) print "nan"; else printf (a/b < 0.1 ? "%.3f" : "%.2f"), a/b}'; }
# holds R OP GOAL: "yes" if R OP GOAL.
holds() { awk -v r="$1" -v g="$3" -v op="$2" 'BEGIN {ok = (op=="<=") ? (r<=g) : (r>=g); print (r=="nan") ? "-" : (ok ? "yes" : "no")}'; }

row() { printf '%-46s %10s %12s %8s %8s %6s %14s\n' "$@"; }
echo
echo "softrnic beside the kernel, one veth pair (MTU $MTU), medians of $ROUNDS interleaved rounds"
echo "references: sockperf UDP ping-pong busy-polling (half a round trip) p50 $(median busy_p50) us, p99 $(median busy_p99) us, $(median busy_cpu) us CPU a round trip;"
echo "  sleeping p50 $(median udp_p50) us, p99 $(median udp_p99) us; iperf3 TCP $(median tcp_gbps) Gbit/s;"
echo "  kernel UDP GSO/GRO (4096 B payloads, 15 a send, 4 sends a call) $(median gso_gbps) Gbit/s; xsk raw frames (4096 B payloads) $(median raw_gbps) Gbit/s"
echo
row "goal" "softrnic" "reference" "ratio" "goal" "holds" "CPU us/iter"
# write_lat and send_lat report half a round trip, as sockperf does;
# read_lat a whole one (perftest's rtt_factor: a READ is one operation
# there and back), against the ping-pong's whole round trip: twice each
# sample's half, so twice its percentiles.
for t in write-lat send-lat read-lat; do
	p50=$(median ${t}_p50) p99=$(median ${t}_p99) cpu=$(median ${t}_cpu)
	ref50=$(median busy_p50) ref99=$(median busy_p99) what="busy UDP"
	if [ $t = read-lat ]; then
		ref50=$(awk -v v="$ref50" 'BEGIN {printf "%.3f", 2*v}') ref99=$(awk -v v="$ref99" 'BEGIN {printf "%.3f", 2*v}') what="busy UDP RTT"
	fi
	r=$(ratio "$p50" "$ref50")
	row "$t 2 B typical (us) / $what p50" "$p50" "$ref50" "$r" "<=1.0" "$(holds "$r" "<=" 1.0)" "$cpu"
	r=$(ratio "$p99" "$ref99")
	row "$t 2 B p99 (us) / $what p99" "$p99" "$ref99" "$r" "<=2.0" "$(holds "$r" "<=" 2.0)" ""
done
row "busy UDP ping-pong (reference)" "-" "$(median busy_p50)" "-" "-" "-" "$(median busy_cpu)"
for t in write-lat send-lat read-lat; do
	row "$t whole run, p50 / p99 (us)" "$(median ${t}_all_p50)" "$(median ${t}_all_p99)" "-" "-" "-" ""
done
for t in write-bw read-bw send-bw; do
	g=1.5
	[ $t = write-bw ] && g=2.0
	for io in udp xsk; do
		bw=$(median ${t}_gbps)
		[ $io = udp ] && bw=$(median ${t}_udp_gbps)
		r=$(ratio "$bw" "$(median tcp_gbps)")
		row "$t 64 KiB, $io port (Gbit/s) / TCP" "$bw" "$(median tcp_gbps)" "$r" ">=$g" "$(holds "$r" ">=" $g)" ""
	done
done
bw=$(median write-bw_udp_gbps)
r=$(ratio "$bw" "$(median gso_gbps)")
row "write-bw 64 KiB, udp / kernel UDP GSO/GRO" "$bw" "$(median gso_gbps)" "$r" ">=0.5" "$(holds "$r" ">=" 0.5)" ""
bw=$(median write-bw_gbps)
r=$(ratio "$bw" "$(median raw_gbps)")
row "write-bw 64 KiB, xsk / xsk raw frames" "$bw" "$(median raw_gbps)" "$r" ">=0.9" "$(holds "$r" ">=" 0.9)" ""
r=$(ratio "$(median mq4_gbps)" "$(median mq1_gbps)")
row "4 QPs / 1 QP, 2 queues (Gbit/s)" "$(median mq4_gbps)" "$(median mq1_gbps)" "$r" ">=1.9" "$(holds "$r" ">=" 1.9)" ""
r=$(ratio "$(median q4one_gbps)" "$bw")
row "4 QPs / 1 QP, 1 queue (Gbit/s)" "$(median q4one_gbps)" "$bw" "$r" ">=1.0" "$(holds "$r" ">=" 1.0)" ""
r=$(ratio "$(scale GCCache 16384)" "$(scale GCCache 1)")
row "16K QPs / 1 QP, GCCache (Gbit/s)" "$(scale GCCache 16384)" "$(scale GCCache 1)" "$r" ">=0.8" "$(holds "$r" ">=" 0.8)" ""
r=$(ratio "$(scale GCCache 16384)" "$(scale baseline 16384)")
row "16K QPs, GCCache / baseline" "$(scale GCCache 16384)" "$(scale baseline 16384)" "$r" ">=1.5" "$(holds "$r" ">=" 1.5)" ""
for shape in "4 8" "2 1"; do
	set -- $shape
	m=$(hpu_mpps "$1" "$2")
	row "HPU scheduler $1x$2, empty handler (Mpps)" "${m:-nan}" "-" "-" ">=5" "$(holds "${m:-nan}" ">=" 5)" ""
done
h=$(hpu_pps "empty payload handler") n=$(hpu_pps "no context (placed in memory)")
r=$(ratio "${h:-0}" "${n:-0}")
row "veth 64 B WRITEs, empty handler / none" "${h:-nan}" "${n:-nan}" "$r" ">=0.9" "$(holds "$r" ">=" 0.9)" ""
row "write-lat 2 B, both on one core (us)" "$(median pin_lat_p50)" "$(median write-lat_p50)" "$(ratio "$(median pin_lat_p50)" "$(median write-lat_p50)")" "-" "-" ""
r=$(ratio "$(median pin_lat_p50)" "$(median pin_busy_p50)")
row "  / busy UDP both on one core p50 (us)" "$(median pin_lat_p50)" "$(median pin_busy_p50)" "$r" "<=1.0" "$(holds "$r" "<=" 1.0)" ""
row "write-bw 64 KiB, both on one core" "$(median pin_bw_gbps)" "$bw" "$(ratio "$(median pin_bw_gbps)" "$bw")" "-" "-" ""
r=$(ratio "$(median pin_bw_gbps)" "$(median pin_tcp_gbps)")
row "  / TCP both on one core (Gbit/s)" "$(median pin_bw_gbps)" "$(median pin_tcp_gbps)" "$r" "-" "-" ""
row "allocations per WRITE (whole path)" "$allocs" "0" "-" "0" "$(awk -v a="$allocs" 'BEGIN {print (a=="nan") ? "-" : ((a+0 < 0.05) ? "yes" : "no")}')" ""
echo
echo "against rdma_rxe: make bench-rxe (in the rxe VM); plots: make bench-plots"
echo "Like with like: softrnic perf -poll app polls, and the latency goals are against sockperf busy-polling its sockets on both sides;"
echo "the CPU column is both processes' time per iteration (sockperf's: per round trip). The sleeping ping-pong is shown for scale."
echo "write-lat and send-lat are half a round trip, as sockperf's p50 and p99; read-lat is a whole round trip (perftest's read_lat), beside twice them (busy UDP RTT)."
echo "Latency figures are over sockperf's window (its first 400 ms, its warm-up, and its last 50 ms left out: perf -U's samples);"
echo "the whole-run rows are perftest's figures over every iteration (p50 the t_typical column), warm-up included."
echo "One core: both sides pinned to core 0 (taskset). Two busy-polling sockperf processes on one core each spin until the scheduler"
echo "preempts them (milliseconds); softrnic's polling yields when it sees nothing to do (an oversubscribed host)."
