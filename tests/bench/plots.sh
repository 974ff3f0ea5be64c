#!/usr/bin/env bash
# make bench-plots: the benchmark figures as SVG in bench-plots/ (OUT):
# RDMA WRITE bandwidth against message size (2 B to 8 MiB, softrnic perf
# write-bw -a) with the xsk port's raw frame rate as its ceiling, the
# latency CDF of softrnic perf write-lat (2 B) against sockperf's UDP
# ping-pong, both on one veth pair (MTU 9000), and the QP-scaling curve of
# softrnic bench scale with GCCache and with the blocking baseline. Needs
# root and sockperf. The data stay in OUT/data.
set -eu
cd "$(dirname "$0")/../.."
. tests/lib/vethpair.sh
BIN=$(realpath "${SOFTRNIC:-bin/softrnic}")
OUT=${OUT:-bench-plots}
[ "$(id -u)" = 0 ] || { echo "bench-plots: needs root (network namespaces)" >&2; exit 2; }
. tests/lib/need.sh
need bench-plots sockperf sockperf
D=$OUT/data
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

echo "== bandwidth: softrnic perf write-bw -a" >&2
perf write-bw -a -n 200 --report_gbits --json | awk '/"bytes"/ {gsub(/,/,""); b=$2} /"bw_average"/ {gsub(/,/,""); print b, $2}' >"$D/bw.txt"
echo "== bandwidth: the xsk port's raw frames" >&2
"$BIN" bench frames -s 64,256,1024,4096 -m xsk -d 1s | awk '$2=="xsk" && $1 ~ /^[0-9]+$/ {print $1, $5}' >"$D/raw.txt"
echo "== latency: softrnic perf write-lat" >&2
perf write-lat -n 20000 --latency-log "$(realpath "$D")/lat-softrnic.txt" >/dev/null
echo "== latency: sockperf ping-pong" >&2
ip netns exec $A sockperf server -i 10.54.0.1 -p 11111 >/dev/null 2>&1 &
pids+=($!)
sleep 0.3
ip netns exec $B sockperf ping-pong -i 10.54.0.1 -p 11111 -t 3 -m 14 --full-log "$D/sockperf.csv" >/dev/null 2>&1
kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true
pids=()
awk -F', *' '$1 ~ /^[0-9]+$/ && NF >= 4 {print $4}' "$D/sockperf.csv" >"$D/lat-udp.txt"
echo "== QP scaling: softrnic bench scale" >&2
"$BIN" bench scale -d 500ms | awk '($1=="GCCache" || $1=="baseline") && $2 ~ /^[0-9]+$/ {print $1, $2, $4}' >"$D/scale.txt"
go run ./tests/bench/plots -data "$D" -out "$OUT"
echo "bench-plots: $(ls "$OUT"/*.svg | tr '\n' ' ')"
