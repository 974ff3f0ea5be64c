#!/usr/bin/env bash
# make bench-plots: the benchmark figures as SVG in bench-plots/ (OUT),
# each curve the median of ROUNDS rounds (default 3) with bars from the
# smallest to the largest value, every reference measured in the same
# rounds on the same veth pair (MTU 9000):
#   bandwidth.svg    softrnic perf write-bw -a (2 B to 8 MiB) beside
#                    iperf3 TCP and UDP (-l size) and the xsk port's raw
#                    frame rate (softrnic bench frames)
#   latency-cdf.svg  softrnic perf write-lat (2 B) beside sockperf's UDP
#                    ping-pong, sleeping and busy-polling (14 B)
#   qp-scaling.svg   softrnic bench scale with GCCache and the blocking
#                    baseline (in-memory port)
# Needs root, sockperf and iperf3. The data stay in OUT/data; SECS (1) is
# each iperf3 and frames cell's length.
set -eu
cd "$(dirname "$0")/../.."
. tests/lib/vethpair.sh
BIN=$(realpath "${SOFTRNIC:-bin/softrnic}")
OUT=${OUT:-bench-plots}
ROUNDS=${ROUNDS:-3} SECS=${SECS:-1}
[ "$(id -u)" = 0 ] || { echo "bench-plots: needs root (network namespaces)" >&2; exit 2; }
. tests/lib/need.sh
need bench-plots sockperf sockperf
need bench-plots iperf3 iperf3
D=$OUT/data
rm -rf "$D"
mkdir -p "$D"
A=srnplot-a-$$ B=srnplot-b-$$
pids=()
cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	vethpair_del $A $B
}
trap cleanup EXIT
vethpair $A $B 9000 10.54.0
sleep 0.5

perf() { # TEST ARGS...: server in A, client in B; the client's output on stdout
	local t=$1
	shift
	ip netns exec $A "$BIN" perf "$t" -d veth0 "$@" >/dev/null 2>&1 &
	local spid=$!
	pids+=($spid)
	for _ in $(seq 100); do ip netns exec $A ss -ltn | grep -q ':18515 ' && break; sleep 0.05; done
	ip netns exec $B "$BIN" perf "$t" -d veth0 "$@" 10.54.0.1
	wait $spid
	pids=()
}

# sockperf TAG FLAGS...: a ping-pong of SECS*3 seconds, server and client
# alike in FLAGS; the latencies (us) of round r in lat-TAG.r.txt.
sockperf_lat() {
	local tag=$1
	shift
	ip netns exec $A sockperf server -i 10.54.0.1 -p 11111 "$@" >/dev/null 2>&1 &
	pids+=($!)
	sleep 0.3
	ip netns exec $B sockperf ping-pong -i 10.54.0.1 -p 11111 -t $((SECS * 3)) -m 14 "$@" --full-log "$D/sockperf.csv" >/dev/null 2>&1
	kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null || true
	pids=()
	awk -F', *' '$1 ~ /^[0-9]+$/ && NF >= 4 {print $4}' "$D/sockperf.csv" >"$D/lat-$tag.$r.txt"
}

# iperf3_bw FILE FLAGS...: iperf3 for each size of SIZES, the receiver's
# Gbit/s appended to FILE as "round size Gbit/s".
iperf3_bw() {
	local file=$1 size
	shift
	ip netns exec $A iperf3 -s -p 5201 >/dev/null 2>&1 &
	pids+=($!)
	sleep 0.3
	for size in $SIZES; do
		ip netns exec $B iperf3 -c 10.54.0.1 -p 5201 -t "$SECS" -f g -l "$size" "$@" 2>/dev/null |
			awk -v r="$r" -v s="$size" '/receiver/ {for (i = 1; i <= NF; i++) if ($i == "Gbits/sec") print r, s, $(i-1)}' >>"$D/$file"
	done
	kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null || true
	pids=()
}

for r in $(seq "$ROUNDS"); do
	echo "== round $r of $ROUNDS: softrnic perf write-bw -a" >&2
	perf write-bw -a -n 200 --report_gbits --json |
		awk -v r="$r" '/"bytes"/ {gsub(/,/,""); b=$2} /"bw_average"/ {gsub(/,/,""); print r, b, $2}' >>"$D/bw.txt"
	echo "== round $r: iperf3 TCP and UDP" >&2
	SIZES="64 256 1024 4096 16384 65536 262144 1048576 8388608" iperf3_bw tcp.txt
	SIZES="64 256 1024 4096 8192" iperf3_bw udp.txt -u -b 0
	echo "== round $r: the xsk port's raw frames" >&2
	"$BIN" bench frames -s 64,256,1024,4096 -m xsk -d "${SECS}s" |
		awk -v r="$r" '$2=="xsk" && $1 ~ /^[0-9]+$/ {print r, $1, $5}' >>"$D/raw.txt"
	echo "== round $r: softrnic perf write-lat, sockperf sleeping and busy-polling" >&2
	perf write-lat -n 20000 --latency-log "$(realpath "$D")/lat-softrnic.$r.txt" >/dev/null
	sockperf_lat udp
	sockperf_lat udp-busy --nonblocked --timeout 0
	echo "== round $r: softrnic bench scale" >&2
	"$BIN" bench scale -d 500ms |
		awk -v r="$r" '($1=="GCCache" || $1=="baseline") && $2 ~ /^[0-9]+$/ {print r, $1, $2, $4}' >>"$D/scale.txt"
done
go run ./tests/bench/plots -data "$D" -out "$OUT"
echo "bench-plots: $(ls "$OUT"/*.svg | tr '\n' ' ')"
