#!/usr/bin/env bash
# make bench-capi: unmodified perftest binaries (Debian's ib_write_bw and
# ib_write_lat) on softrnic's C libraries (lib/libibverbs.so.1) beside
# softrnic's own Go tool (softrnic perf write-bw, write-lat) on one veth
# pair, in interleaved rounds; medians and the goals of #22 as ratios:
# bandwidth at least 0.9x and latency at most 1.2x the Go tool's.
#
# Both run with their NIC driven by the program's own polling (the C
# libraries' default, SOFTRNIC_POLL=app; perf -poll app), 64 KiB WRITEs
# for bandwidth and 2-byte WRITEs for latency (t_typical, perftest's
# median), MTU 9000 (IB MTU 4096), xsk port. Needs root and perftest.
#
# Environment: SOFTRNIC (the binary), ROUNDS (default 5), LATN (latency
# iterations, 20000), BWN (bandwidth iterations, 3000), PORT (xsk or udp).
set -eu
cd "$(dirname "$0")/../.."
. tests/lib/vethpair.sh
BIN=$(realpath "${SOFTRNIC:-bin/softrnic}")
LIB=$(realpath lib)
ROUNDS=${ROUNDS:-5}
LATN=${LATN:-20000}
BWN=${BWN:-3000}
PORT=${PORT:-xsk}
[ "$(id -u)" = 0 ] || { echo "bench-capi: needs root (network namespaces)" >&2; exit 2; }
. tests/lib/need.sh
need bench-capi ib_write_bw perftest
[ -f "$LIB/libibverbs.so.1" ] || { echo "bench-capi: build the libraries first (make libs)" >&2; exit 2; }
A=srncapi-a-$$ B=srncapi-b-$$
OUT=$(mktemp -d /tmp/bench-capi.XXXXXX)
pids=()
cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	vethpair_del $A $B
	rm -rf "$OUT"
}
trap cleanup EXIT
vethpair $A $B 9000 10.51.0
sleep 1

CENV=(env SOFTRNIC_NETDEV=veth0 SOFTRNIC_PORT=$PORT LD_LIBRARY_PATH=$LIB)

# pair SERVER... -- CLIENT...: the server in A, then the client in B; the
# client's output on stdout.
pair() {
	local srv=() cli=()
	while [ "$1" != -- ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	ip netns exec $A timeout 120 "${srv[@]}" >"$OUT/srv" 2>&1 &
	local sp=$!
	pids+=($sp)
	sleep 1.5
	ip netns exec $B timeout 120 "${cli[@]}" 10.51.0.1 2>&1 || true
	wait $sp 2>/dev/null || true
}

# perftest's result line: the BW average (MB/s) is field 4; t_typical (us)
# of a latency test is field 5.
bw() { awk '$1 == "65536" && NF >= 4 { v = $4 } END { print v }'; }
lat() { awk '$1 == "2" && NF >= 6 { v = $5 } END { print v }'; }

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for r in $(seq "$ROUNDS"); do
	echo "round $r of $ROUNDS" >&2
	pair "${CENV[@]}" ib_write_bw -d softrnic_veth0 -x 1 -s 65536 -n "$BWN" -- "${CENV[@]}" ib_write_bw -d softrnic_veth0 -x 1 -s 65536 -n "$BWN" | bw >>"$OUT/c-bw"
	pair "$BIN" perf write-bw -d veth0 -io "$PORT" -s 65536 -n "$BWN" -- "$BIN" perf write-bw -d veth0 -io "$PORT" -s 65536 -n "$BWN" | bw >>"$OUT/go-bw"
	pair "${CENV[@]}" ib_write_lat -d softrnic_veth0 -x 1 -s 2 -n "$LATN" -- "${CENV[@]}" ib_write_lat -d softrnic_veth0 -x 1 -s 2 -n "$LATN" | lat >>"$OUT/c-lat"
	pair "$BIN" perf write-lat -d veth0 -io "$PORT" -s 2 -n "$LATN" -- "$BIN" perf write-lat -d veth0 -io "$PORT" -s 2 -n "$LATN" | lat >>"$OUT/go-lat"
	pair "${CENV[@]}" ib_send_lat -d softrnic_veth0 -x 1 -s 2 -n "$LATN" -- "${CENV[@]}" ib_send_lat -d softrnic_veth0 -x 1 -s 2 -n "$LATN" | lat >>"$OUT/c-slat"
	pair "$BIN" perf send-lat -d veth0 -io "$PORT" -s 2 -n "$LATN" -- "$BIN" perf send-lat -d veth0 -io "$PORT" -s 2 -n "$LATN" | lat >>"$OUT/go-slat"
done

cbw=$(median <"$OUT/c-bw") gobw=$(median <"$OUT/go-bw")
clat=$(median <"$OUT/c-lat") golat=$(median <"$OUT/go-lat")
cslat=$(median <"$OUT/c-slat") goslat=$(median <"$OUT/go-slat")
echo
echo "unmodified perftest on lib/libibverbs.so.1 beside softrnic perf, one veth pair, port $PORT, medians of $ROUNDS rounds"
printf '%-34s %14s %14s %8s %s\n' "test" "C (perftest)" "Go (perf)" "ratio" "goal"
awk -v c="$cbw" -v g="$gobw" 'BEGIN { r = (g > 0) ? c / g : 0; printf "%-34s %9.1f MB/s %9.1f MB/s %7.2fx %s\n", "WRITE 64 KiB bandwidth", c, g, r, (r >= 0.9 ? ">= 0.9x: met" : ">= 0.9x: NOT met") }'
awk -v c="$clat" -v g="$golat" 'BEGIN { r = (g > 0) ? c / g : 0; printf "%-34s %12.2f us %12.2f us %7.2fx %s\n", "WRITE 2 B latency (t_typical)", c, g, r, (r <= 1.2 ? "<= 1.2x: met" : "<= 1.2x: NOT met") }'
# send_lat polls its CQ for each message (the polling drives the NIC, as
# perf's does); write_lat spins on the buffer the peer writes, and its NIC
# is run by the NIC's own thread, woken by each frame.
awk -v c="$cslat" -v g="$goslat" 'BEGIN { r = (g > 0) ? c / g : 0; printf "%-34s %12.2f us %12.2f us %7.2fx %s\n", "SEND 2 B latency (t_typical)", c, g, r, "(for comparison)" }'
# What a verb costs, one call: the C libraries (tests/bench/c/verbs_calls.c,
# the NIC asleep so that a call is the call) beside the Go API's
# (BenchmarkCalls in host/verbs).
gcc -O2 -o "$OUT/verbs_calls" tests/bench/c/verbs_calls.c -libverbs
ip netns exec $A env SOFTRNIC_NETDEV=veth0 SOFTRNIC_PORT=$PORT SOFTRNIC_POLL=sleep LD_LIBRARY_PATH=$LIB "$OUT/verbs_calls" 10.51.0.2 >"$OUT/calls-c"
go test -run '^$' -bench 'BenchmarkCalls' -benchtime 200000x ./host/verbs >"$OUT/calls-go" 2>&1 || true
cpoll=$(awk '/^ibv_poll_cq/ {print $2}' "$OUT/calls-c") crecv=$(awk '/^ibv_post_recv/ {print $2}' "$OUT/calls-c")
gopoll=$(awk '/poll-empty/ {print $3}' "$OUT/calls-go") gorecv=$(awk '/post-recv/ {print $3}' "$OUT/calls-go")
printf '%-34s %11s ns %11s ns %7s\n' "poll an empty CQ, one call" "$cpoll" "$gopoll" ""
printf '%-34s %11s ns %11s ns %7s\n' "post one receive, one call" "$crecv" "$gorecv" ""
echo "C calls, ns each: $(tr '\n' ' ' <"$OUT/calls-c")"
echo "rounds: C bw $(tr '\n' ' ' <"$OUT/c-bw")| Go bw $(tr '\n' ' ' <"$OUT/go-bw")| C lat $(tr '\n' ' ' <"$OUT/c-lat")| Go lat $(tr '\n' ' ' <"$OUT/go-lat")"
