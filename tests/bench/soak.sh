#!/usr/bin/env bash
# make soak: a long softrnic perf run between two softrnic NICs in two
# network namespaces joined by a veth pair, sampling both processes'
# resident memory (VmRSS from /proc) as it runs. By default 1,000 RC QPs
# of write-bw with 4 KiB messages for 10 minutes (perf -D), a sample
# every 10 s.
#
# It prints one row per sample (seconds, client and server RSS in MiB)
# and judges the run: after the warm-up (WARM seconds) each side's RSS
# may rise by at most TOL_MB above what it was when the warm-up ended;
# more, or either perf failing, fails the run (exit 1). Go's heap is
# collected by the runtime, so a side that allocates in steady state
# shows here as a rising RSS, and one that does not as a flat one.
#
# QPS, SECS, SIZE, TEST (write-bw, send-bw, read-bw), EVERY, WARM,
# TOL_MB, IO (xsk or udp), MTU and POLL override. Needs root.
set -eu
cd "$(dirname "$0")/../.."
. tests/lib/vethpair.sh
BIN=$(realpath "${SOFTRNIC:-bin/softrnic}")
QPS=${QPS:-1000} SECS=${SECS:-600} SIZE=${SIZE:-4096} TEST=${TEST:-write-bw}
EVERY=${EVERY:-10} WARM=${WARM:-120} TOL_MB=${TOL_MB:-8}
IO=${IO:-xsk} MTU=${MTU:-9000} POLL=${POLL:-app}
[ "$(id -u)" = 0 ] || { echo "soak: needs root" >&2; exit 2; }
[ "$WARM" -lt "$SECS" ] || { echo "soak: WARM ($WARM) must be below SECS ($SECS)" >&2; exit 2; }
A=srnsoak-a-$$ B=srnsoak-b-$$
OUT=$(mktemp -d /tmp/softrnic-soak.XXXXXX)
spid="" cpid=""
cleanup() {
	set +e
	[ -n "$cpid" ] && kill "$cpid" 2>/dev/null
	[ -n "$spid" ] && kill "$spid" 2>/dev/null
	wait 2>/dev/null
	vethpair_del $A $B
}
trap cleanup EXIT
vethpair $A $B "$MTU" 10.51.0
sleep 0.5

args="$TEST -d veth0 --io $IO -poll $POLL -q $QPS -s $SIZE -D $SECS --report_gbits --counters"
echo "== softrnic perf $args (server in $A, client in $B, veth MTU $MTU); logs in $OUT"
# shellcheck disable=SC2086 # the flags split into words
ip netns exec $A "$BIN" perf $args >"$OUT/server.log" 2>&1 &
spid=$!
for _ in $(seq 100); do ip netns exec $A ss -ltn | grep -q ':18515 ' && break; sleep 0.1; done
# shellcheck disable=SC2086
ip netns exec $B "$BIN" perf $args 10.51.0.1 >"$OUT/client.log" 2>&1 &
cpid=$!

# rss PID: VmRSS in KiB, or nothing once the process is gone.
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

printf '%8s %12s %12s\n' "seconds" "client MiB" "server MiB"
t0=$SECONDS
cbase="" sbase="" cmax=0 smax=0 cwarm=0 swarm=0
while kill -0 "$cpid" 2>/dev/null || kill -0 "$spid" 2>/dev/null; do
	c=$(rss "$cpid") s=$(rss "$spid")
	[ -z "$c" ] && [ -z "$s" ] && break
	t=$((SECONDS - t0))
	printf '%8d %12s %12s\n' "$t" "$([ -n "$c" ] && mib "$c" || echo -)" "$([ -n "$s" ] && mib "$s" || echo -)"
	if [ "$t" -ge "$WARM" ]; then
		# The first sample after the warm-up is the base; later ones
		# are judged against it. The last seconds (the run's cool-down
		# and teardown) are left out.
		if [ -z "$cbase" ]; then
			cbase=${c:-0} sbase=${s:-0}
		elif [ "$t" -le $((SECS - EVERY)) ]; then
			[ -n "$c" ] && [ "$c" -gt "$cmax" ] && cmax=$c
			[ -n "$s" ] && [ "$s" -gt "$smax" ] && smax=$s
			cwarm=1 swarm=1
		fi
	fi
	sleep "$EVERY"
done
crc=0 src=0
wait "$cpid" || crc=$?
cpid=""
wait "$spid" || src=$?
spid=""

# Each side's result row, its errors, and the counters that show the
# run's health: frames dropped at the port, retransmissions, waits.
for side in client server; do
	echo "-- $side:"
	grep -A1 '#bytes' "$OUT/$side.log" | tail -1 || true
	grep -E 'perf: |warning|port queue|^softrnic: (retransmitted_pkts|local_ack_timeout|early_retransmits|room_waits|replay_stall) ' "$OUT/$side.log" || true
done

verdict=0
if [ $crc != 0 ] || [ $src != 0 ]; then
	echo "soak: perf exited with client $crc, server $src (see $OUT)"
	verdict=1
fi
if [ "$cwarm" = 0 ] || [ -z "$cbase" ]; then
	echo "soak: too few samples after the warm-up ($WARM s) to judge"
	verdict=1
else
	tol=$((TOL_MB * 1024))
	for side in client server; do
		if [ $side = client ]; then base=$cbase top=$cmax; else base=$sbase top=$smax; fi
		rise=$((top - base))
		[ $rise -lt 0 ] && rise=0
		rate=$(awk -v r="$rise" -v s=$((SECS - EVERY - WARM)) 'BEGIN { printf "%.1f", (s > 0 ? r / s : 0) }')
		if [ $rise -gt $tol ]; then
			echo "soak: $side RSS rose $(mib $rise) MiB after the warm-up (from $(mib "$base") MiB, about $rate KiB/s): more than $TOL_MB MiB"
			verdict=1
		else
			echo "soak: $side RSS flat after the warm-up: $(mib "$base") MiB, at most $(mib "$top") MiB (+$(mib $rise) MiB, limit $TOL_MB)"
		fi
	done
fi
exit $verdict
