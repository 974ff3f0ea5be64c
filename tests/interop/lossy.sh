#!/usr/bin/env bash
# make interop-loss: softrnic against the kernel's rdma_rxe (in the rxe-vm
# VM) through a bridge that drops a share of RoCEv2 frames at random, both
# ways, as the reference captures in ../shared/testdata/rxe were made
# (nftables on the bridge's forward hook: udp dport 4791, numgen random).
#
# The VM's tap and a veth pair are bridged inside the VM's netns; softrnic
# runs on the veth (XDP and AF_XDP as on any netdev), so every frame
# either side sends crosses the lossy bridge. Each case runs RUNS times
# (default 3) with a time limit: a run passes when both sides exit 0
# within it, and the table shows how long each took and how many frames
# the bridge dropped.
#
# Environment: LOSS (percent, default 5), RUNS, MTU (default 1500),
# TESTS (the perftest tests, default "write-bw send-bw read-bw"), SIZE
# and ITERS (their message size and count, default 4096 and 200),
# CASES (a regular expression over the case names below), RXEVM,
# SOFTRNIC, LIMIT (seconds a run may take, default 100); DEBUG=1 runs
# softrnic perf with --counters and --pcap, and softrnic rping with
# -pcap (one capture a run, in the log directory, INTEROP_LOG).
set -u
cd "$(dirname "$0")/../.."
T=${RXEVM:-../shared/tools/rxe-vm/rxe-vm.sh}
BIN=$(realpath "${SOFTRNIC:-bin/softrnic}")
LOSS=${LOSS:-5} RUNS=${RUNS:-3} MTU=${MTU:-1500} LIMIT=${LIMIT:-100}
SIZE=${SIZE:-4096} ITERS=${ITERS:-200} TESTS=${TESTS:-write-bw send-bw read-bw}
LOG=${INTEROP_LOG:-/tmp/softrnic-interop-loss}
NS=rxevm HOSTIP=10.77.0.1 GUESTIP=10.77.0.2 IF=srn0
mkdir -p "$LOG"
rm -f "$LOG"/*.log

[ -x "$T" ] || { echo "interop-loss: $T not found" >&2; exit 2; }
[ -x "$BIN" ] || { echo "interop-loss: $BIN not built (make build)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "interop-loss: needs root" >&2; exit 2; }
if ! command -v nft >/dev/null; then
	{ apt-get install -y nftables || { apt-get update && apt-get install -y nftables; }; } >"$LOG/apt.log" 2>&1 ||
		{ echo "interop-loss: cannot install nftables (see $LOG/apt.log)" >&2; exit 2; }
fi

started=0
cleanup() {
	ip netns exec $NS nft delete table bridge srnloss 2>/dev/null
	[ $started = 1 ] && "$T" stop >/dev/null 2>&1
	started=0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$T" setup >"$LOG/setup.log" 2>&1 || { echo "interop-loss: rxe-vm setup failed (see $LOG/setup.log)" >&2; exit 2; }
"$T" start --mtu "$MTU" >"$LOG/start.log" 2>&1 || { echo "interop-loss: VM start failed (see $LOG/start.log)" >&2; exit 2; }
started=1

# The bridge: the tap gives its address to the veth softrnic runs on.
n() { ip netns exec $NS "$@"; }
n ip addr flush dev rxetap0
n ip link add br0 type bridge
n ip link set br0 mtu "$MTU" up
n ip link set rxetap0 master br0
n ip link add $IF mtu "$MTU" type veth peer name srnb mtu "$MTU"
n ip link set srnb master br0
n ip link set srnb up
n ip link set $IF up
n ip addr add $HOSTIP/24 dev $IF
n sysctl -qw net.bridge.bridge-nf-call-iptables=0 2>/dev/null
# Only the veth answers ARP for its address: by default the bridge, in the
# same namespace, answers too (first, with its own MAC), and the guest's
# frames then go up the bridge's stack to softrnic's kernel UDP socket
# (kernel_rx_frames) instead of through the veth's XDP program.
n sysctl -qw net.ipv4.conf.all.arp_ignore=1
"$T" exec -t 20 "ip neigh flush dev eth0" >/dev/null 2>&1
# The guest learns the veth's MAC before the first run.
"$T" exec -t 20 "ping -c 3 -W 2 $HOSTIP" >"$LOG/ping.log" 2>&1 ||
	{ echo "interop-loss: the guest does not reach $HOSTIP through the bridge (see $LOG/ping.log)" >&2; exit 2; }
n nft -f - <<EOF || { echo "interop-loss: nft failed" >&2; exit 2; }
table bridge srnloss {
	chain lossy {
		type filter hook forward priority 0;
		udp dport 4791 numgen random mod 100 < $LOSS counter drop
	}
}
EOF
dropped() { n nft list table bridge srnloss | sed -n 's/.*counter packets \([0-9]*\).*/\1/p'; }

echo "interop-loss: $LOSS % of RoCEv2 frames dropped each way, MTU $MTU, $RUNS runs a case, $LIMIT s each"
printf '%-44s %-16s %8s %3s %6s %8s\n' "case" "direction" "sr" "rxe" "time" "dropped"
fails=0 total=0
declare -A times # "name|direction" -> each run's seconds

# run NAME DIR GUEST-COMMAND SOFTRNIC-ARGS...: as interop's run_pair (DIR
# softrnic-server: softrnic listens, the guest's command connects to
# HOSTIP; rxe-server: the guest's command listens, softrnic connects to
# GUESTIP two seconds later).
run() {
	local name=$1 dir=$2 guest=$3
	shift 3
	local r
	for r in $(seq "$RUNS"); do
		local tag="${name// /_}_${dir}_$r" d0 t0=$SECONDS src prc
		tag=${tag//[^A-Za-z0-9_.-]/}
		d0=$(dropped)
		local args=("$@")
		if [ "${DEBUG:-0}" = 1 ]; then
			# After the subcommand: the peer's address may end the line.
			case $1 in
			perf) args=("$1" --counters --pcap "$LOG/$tag.pcapng" "${@:2}") ;;
			rping) args=("$1" -pcap "$LOG/$tag.pcapng" "${@:2}") ;;
			esac
		fi
		if [ "$dir" = softrnic-server ]; then
			timeout "$LIMIT" ip netns exec $NS "$BIN" "${args[@]}" >"$LOG/$tag.softrnic.log" 2>&1 &
			local spid=$!
			sleep 2
			"$T" exec -t $((LIMIT + 10)) "timeout $LIMIT $guest $HOSTIP" >"$LOG/$tag.rxe.log" 2>&1
			prc=$?
			wait $spid
			src=$?
		else
			local id
			id=$("$T" bg "timeout $LIMIT $guest")
			sleep 2
			timeout "$LIMIT" ip netns exec $NS "$BIN" "${args[@]}" $GUESTIP >"$LOG/$tag.softrnic.log" 2>&1
			src=$?
			"$T" wait "$id" >"$LOG/$tag.rxe.log" 2>&1
			prc=$?
		fi
		total=$((total + 1))
		local v=""
		# The guest's rping aborts at exit (no libgcc_s in its image; see
		# interop.sh's rpcell): judged by its stderr and softrnic's pings.
		if [ $prc = 134 ] && grep -q 'libgcc_s.so.1 must be installed' "$LOG/$tag.rxe.log"; then
			prc=0
			grep -Eqi 'mismatch|error|failed' "$LOG/$tag.rxe.log" && prc=1
		fi
		case $name in rping*)
			[ "$(grep -c 'ping data: rdma-ping-' "$LOG/$tag.softrnic.log")" = "$C" ] || src="$src/pings" ;;
		esac
		if [ "$src" != 0 ] || [ $prc != 0 ]; then v=FAIL; fails=$((fails + 1)); fi
		local took=$((SECONDS - t0))
		[ -n "$v" ] && took=$LIMIT # a failed run counts as the whole limit
		times["$name|$dir"]+=" $took"
		printf '%-44s %-16s %8s %3s %5ss %8s %s\n' "$name #$r" "$dir" "$src" "$prc" $((SECONDS - t0)) $(($(dropped) - d0)) "$v"
	done
}

skipped() { [ -n "${CASES:-}" ] && ! grep -Eq -- "$CASES" <<<"$1"; }

C=50
if ! skipped "rping -C $C"; then
	run "rping -C $C" softrnic-server "rping -c -v -V -C $C -a" rping -s -v --dev $IF -C $C
	run "rping -C $C" rxe-server "rping -s -v -V -a $GUESTIP -C $C" rping -c -v -V --dev $IF -C $C -a
fi
# Each perftest case with the connection manager (-R) and, beside it, the
# same run with perftest's own exchange: #26's goal is that -R with
# softrnic as the server takes at most twice as long.
for t in $TESTS; do
	for cm in -R ""; do
		name="$t -s $SIZE -n $ITERS${cm:+ $cm}"
		skipped "$name" && continue
		pt="ib_${t//-/_} -d rxe0 -x 1 -F -s $SIZE -n $ITERS $cm"
		run "$name" softrnic-server "$pt" perf $t -d $IF -s "$SIZE" -n "$ITERS" $cm
		run "$name" rxe-server "$pt" perf $t -d $IF -s "$SIZE" -n "$ITERS" $cm
	done
done

# median of the times given
median() { tr ' ' '\n' <<<"$*" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "")}'; }
echo
echo "goal (#26): softrnic as the server, -R within 2x the run without it (median seconds)"
for t in $TESTS; do
	with=${times["$t -s $SIZE -n $ITERS -R|softrnic-server"]:-} without=${times["$t -s $SIZE -n $ITERS|softrnic-server"]:-}
	[ -n "$with" ] && [ -n "$without" ] || continue
	w=$(median $with) o=$(median $without)
	v="NOT MET"
	[ "$w" -le $((2 * (o > 0 ? o : 1))) ] && v=holds
	printf '  %-10s -R %4ss, without %4ss: %s\n' "$t" "$w" "$o" "$v"
done

echo "interop-loss: $total runs, $fails failed; logs in $LOG"
[ $fails = 0 ]
