#!/usr/bin/env bash
# make perf-veth: softrnic perf between two softrnic NICs in two network
# namespaces joined by a veth pair (MTU 9000, so IB MTU 4096), xsk port:
# write-bw (64 KiB, Gbit/s) and write-lat (2 bytes), server and client
# output side by side. Needs root. TESTS, ITERS and MTU override; a test
# given as TEST:FLAGS runs with those flags too, e.g.
# TESTS="write-bw write-bw:-R" COUNTERS=1 compares the CM-connected run
# (-R) with the plain one, each side's counters (retransmissions among
# them) printed at the end. HOG=1 runs a busy loop on every core
# meanwhile (the engines and the tests then share the CPU with it): a
# veth loses nothing, so every packet the counters show retransmitted
# (retransmitted_pkts) was sent again for nothing.
set -eu
cd "$(dirname "$0")/../.."
. tests/lib/vethpair.sh
BIN=$(realpath "${SOFTRNIC:-bin/softrnic}")
TESTS=${TESTS:-"write-bw write-lat"}
MTU=${MTU:-9000}
A=srnperf-a-$$ B=srnperf-b-$$
[ "$(id -u)" = 0 ] || { echo "perf-veth: needs root" >&2; exit 2; }
spid="" hogs=""
cleanup() {
	set +e
	[ -n "$spid" ] && kill "$spid" 2>/dev/null
	for h in $hogs; do kill "$h" 2>/dev/null; done
	vethpair_del $A $B
	rm -f /tmp/perf-veth-server.$$
}
trap cleanup EXIT
vethpair $A $B "$MTU" 10.49.0
sleep 0.5
if [ "${HOG:-0}" = 1 ]; then
	for _ in $(seq "$(nproc)"); do
		sh -c 'while :; do :; done' &
		hogs="$hogs $!"
	done
	echo "== a busy loop on each of $(nproc) cores:$hogs"
fi
for spec in $TESTS; do
	t=${spec%%:*} extra=""
	[ "$spec" != "$t" ] && extra=${spec#*:}
	args=""
	case $t in *bw) args="--report_gbits -n ${ITERS:-5000}" ;; *) args="-n ${ITERS:-5000}" ;; esac
	args="$args $extra"
	[ "${COUNTERS:-0}" = 1 ] && args="$args --counters"
	echo "== softrnic perf $t $args (server in $A, client in $B, veth MTU $MTU)"
	ip netns exec $A "$BIN" perf "$t" -d veth0 $args >/tmp/perf-veth-server.$$ 2>&1 &
	spid=$!
	case " $extra " in
	*" -R "*) sleep 2 ;; # a CM listener opens no TCP port
	*) for _ in $(seq 50); do ip netns exec $A ss -ltn | grep -q ':18515 ' && break; sleep 0.1; done ;;
	esac
	ip netns exec $B "$BIN" perf "$t" -d veth0 $args 10.49.0.1
	wait "$spid"
	spid=""
	echo "-- server:"
	tail -3 /tmp/perf-veth-server.$$
	rm -f /tmp/perf-veth-server.$$
done
