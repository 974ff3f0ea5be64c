#!/usr/bin/env bash
# make bench-rxe: softrnic beside the kernel's Soft-RoCE (rdma_rxe) inside
# one VM (../shared/tools/rxe-vm), under the same emulation, and the
# ratios.
#
# In the guest (Debian's 6.1 kernel under qemu TCG, 2 vCPUs): perftest's
# ib_write_bw (64 KiB) and ib_write_lat (2 bytes) between rxe0 and itself,
# then softrnic perf write-bw and write-lat between two softrnic NICs in
# two network namespaces joined by a veth pair (xsk ports, MTU 9000), and
# the same Debian ib_write_bw and ib_write_lat binaries again, unmodified,
# on softrnic's C libraries (lib/, LD_LIBRARY_PATH) between those two
# NICs: the same sizes and iterations, one after the other, ROUNDS times,
# medians.
# rxe runs in the guest's one namespace: rxe 6.1 opens its UDP socket in
# the initial namespace only, so two rxe devices cannot face each other
# across namespaces there; rxe0 to rxe0 takes rxe's loopback (no wire),
# which favours rxe. Everything runs emulated, 10-100x slower than
# native: only the ratios mean something, not the figures.
#
# Environment: RXEVM (rxe-vm.sh), SOFTRNIC (the binary), ROUNDS (default
# 3), BWN (write-bw iterations, 200), LATN (write-lat iterations, 200),
# POLL (how softrnic's NICs are driven, softrnic perf -poll and
# SOFTRNIC_POLL; default sleep).
set -eu
cd "$(dirname "$0")/../.."
T=${RXEVM:-../shared/tools/rxe-vm/rxe-vm.sh}
BIN=$(realpath "${SOFTRNIC:-bin/softrnic}")
ROUNDS=${ROUNDS:-3}
BWN=${BWN:-200}
LATN=${LATN:-200}
POLL=${POLL:-sleep}
[ "$(id -u)" = 0 ] || { echo "bench-rxe: needs root" >&2; exit 2; }
[ -x "$T" ] || { echo "bench-rxe: no rxe VM tool at $T (set RXEVM)" >&2; exit 2; }
OUT=$(mktemp -d /tmp/bench-rxe.XXXXXX)
started=""
cleanup() {
	set +e
	[ -n "$started" ] && "$T" stop >/dev/null 2>&1
	rm -rf "$OUT"
}
trap cleanup EXIT

"$T" setup >"$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log" >&2; exit 1; }
if ! "$T" status 2>/dev/null | grep -q '^running'; then
	"$T" start >"$OUT/start.log" 2>&1 || { cat "$OUT/start.log" >&2; exit 1; }
	started=1
fi
SHARE=${RXEVM_DIR:-/tmp/rxe-vm}/run/default/share
VETH=$(find "${RXEVM_DIR:-/tmp/rxe-vm}/kernel/lib/modules" -name veth.ko | head -1)
[ -n "$VETH" ] || { echo "bench-rxe: no veth.ko for the guest kernel" >&2; exit 1; }
cp "$BIN" "$SHARE/softrnic"
cp "$VETH" "$SHARE/veth.ko"
[ -f lib/libibverbs.so.1 ] || { echo "bench-rxe: no lib/libibverbs.so.1 (make libs)" >&2; exit 1; }
rm -rf "$SHARE/lib" && mkdir -p "$SHARE/lib" && cp lib/*.so* "$SHARE/lib/"
# The guest's namespaces and veth pair (iproute2 is /bin/ip there; busybox's ip has no netns).
"$T" exec -t 60 'grep -q "^veth " /proc/modules || insmod /host/veth.ko; IP=/bin/ip; mkdir -p /run/netns;
	$IP netns del srna 2>/dev/null; $IP netns del srnb 2>/dev/null;
	$IP netns add srna && $IP netns add srnb && $IP link add veth0 netns srna type veth peer name veth0 netns srnb &&
	for n in srna srnb; do $IP -n $n link set lo up && $IP -n $n link set veth0 mtu 9000 up || exit 1; done &&
	$IP -n srna addr add 10.9.0.1/24 dev veth0 && $IP -n srnb addr add 10.9.0.2/24 dev veth0' >/dev/null

# record NAME VALUE: one round's figure; one that is not a number (a run
# that printed none, or perftest's "inf") is shown with the run's output.
record() {
	echo "$2" >>"$OUT/$1"
	if ! awk -v v="$2" 'BEGIN {exit !(v ~ /^[0-9.]+$/ && v+0 > 0)}'; then
		echo "bench-rxe: $1: no figure (\"$2\") in the client's output:" >&2
		tail -8 "$OUT/client.log" >&2
	fi
}
median() { sort -g "$OUT/$1" | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# pair SERVER CLIENT: a server in the background, then its client; the
# client's output in $OUT/client.log.
pair() {
	local id
	id=$("$T" bg "timeout 150 $1")
	sleep 3
	"$T" exec -t 170 "timeout 150 $2" >"$OUT/client.log" 2>&1 || { cat "$OUT/client.log" >&2; "$T" wait "$id" >&2; exit 1; }
	"$T" wait "$id" >"$OUT/server.log" 2>&1 || { cat "$OUT/server.log" >&2; exit 1; }
}

GUEST=10.77.0.2
SR="/bin/ip netns exec"
CLIB="env SOFTRNIC_NETDEV=veth0 SOFTRNIC_POLL=$POLL LD_LIBRARY_PATH=/host/lib"
for r in $(seq "$ROUNDS"); do
	echo "== round $r of $ROUNDS" >&2
	pair "ib_write_bw -d rxe0 -x 1 -F -n $BWN --report_gbits" "ib_write_bw -d rxe0 -x 1 -F -n $BWN --report_gbits $GUEST"
	record rxe_bw "$(awk '$1=="65536" {print $4; exit}' "$OUT/client.log")"
	pair "$SR srna /host/softrnic perf write-bw -d veth0 -n $BWN --report_gbits -poll $POLL" \
		"$SR srnb /host/softrnic perf write-bw -d veth0 -n $BWN --report_gbits -poll $POLL 10.9.0.1"
	record srn_bw "$(awk '$1=="65536" {print $4; exit}' "$OUT/client.log")"
	pair "ib_write_lat -d rxe0 -x 1 -F -n $LATN" "ib_write_lat -d rxe0 -x 1 -F -n $LATN $GUEST"
	record rxe_lat "$(awk '$1=="2" && NF>=9 {print $5; exit}' "$OUT/client.log")"
	pair "$SR srna /host/softrnic perf write-lat -d veth0 -n $LATN -poll $POLL" \
		"$SR srnb /host/softrnic perf write-lat -d veth0 -n $LATN -poll $POLL 10.9.0.1"
	record srn_lat "$(awk '$1=="2" && NF>=9 {print $5; exit}' "$OUT/client.log")"
	# Debian's perftest on softrnic's libibverbs, the NIC driven as
	# softrnic perf's above (POLL).
	pair "$SR srna $CLIB ib_write_bw -d softrnic_veth0 -x 1 -F -n $BWN --report_gbits" \
		"$SR srnb $CLIB ib_write_bw -d softrnic_veth0 -x 1 -F -n $BWN --report_gbits 10.9.0.1"
	record c_bw "$(awk '$1=="65536" {print $4; exit}' "$OUT/client.log")"
	pair "$SR srna $CLIB ib_write_lat -d softrnic_veth0 -x 1 -F -n $LATN" \
		"$SR srnb $CLIB ib_write_lat -d softrnic_veth0 -x 1 -F -n $LATN 10.9.0.1"
	record c_lat "$(awk '$1=="2" && NF>=9 {print $5; exit}' "$OUT/client.log")"
done

# ratio A B: A/B, or nan where either is not a figure (none, inf).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b+0==0) print "nan"; else printf "%.2f", a/b}'; }
holds() { awk -v r="$1" -v g="$3" -v op="$2" 'BEGIN {ok = (op=="<=") ? (r<=g) : (r>=g); print (r=="nan") ? "-" : (ok ? "yes" : "no")}'; }
echo
echo "softrnic beside rdma_rxe in one emulated VM (qemu TCG, 2 vCPUs, guest kernel 6.1), medians of $ROUNDS rounds"
echo "rxe: ib_write_bw/ib_write_lat rxe0 to rxe0 (rxe's loopback); softrnic: softrnic perf, then the same Debian ib_write_bw/ib_write_lat"
echo "on softrnic's libibverbs (lib/), between two NICs over a veth pair in two namespaces"
echo "under emulation every figure is 10-100x off native: read the ratios only"
echo
printf '%-32s %12s %12s %8s %8s %6s\n' "" "softrnic" "rxe" "ratio" "goal" "holds"
r=$(ratio "$(median srn_bw)" "$(median rxe_bw)")
printf '%-32s %12s %12s %8s %8s %6s\n' "write-bw 64 KiB, Gbit/s" "$(median srn_bw)" "$(median rxe_bw)" "$r" ">=2" "$(holds "$r" ">=" 2)"
r=$(ratio "$(median srn_lat)" "$(median rxe_lat)")
printf '%-32s %12s %12s %8s %8s %6s\n' "write-lat 2 B, t_typical us" "$(median srn_lat)" "$(median rxe_lat)" "$r" "<=0.5" "$(holds "$r" "<=" 0.5)"
r=$(ratio "$(median c_bw)" "$(median rxe_bw)")
printf '%-32s %12s %12s %8s %8s %6s\n' "ib_write_bw 64 KiB, Gbit/s" "$(median c_bw)" "$(median rxe_bw)" "$r" ">=1" "$(holds "$r" ">=" 1)"
r=$(ratio "$(median c_lat)" "$(median rxe_lat)")
printf '%-32s %12s %12s %8s %8s %6s\n' "ib_write_lat 2 B, t_typical us" "$(median c_lat)" "$(median rxe_lat)" "$r" "<=1" "$(holds "$r" "<=" 1)"
