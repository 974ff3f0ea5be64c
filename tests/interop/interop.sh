#!/usr/bin/env bash
# make interop: softrnic against the Linux kernel's Soft-RoCE (rdma_rxe) and
# the real perftest binaries, in a VM (../shared/tools/rxe-vm).
#
# For every cell of the matrix it runs softrnic perf on the host side of the
# VM's tap and perftest in the guest, in both directions (softrnic server
# with a perftest client, and a perftest server with a softrnic client),
# reads rxe's hw_counters before and after, and prints a pass/fail table. A
# cell passes when both sides exit 0 and report figures, and none of rxe's
# repair counters (out_of_seq_request, duplicate_request,
# completer_retry_err, retry_exceeded_err, rcvd_seq_err) moved, but for
# a duplicate_request or two that softrnic's own timer explains (its
# --counters show the probe or timeout: the guest stalled past the probe's
# floor; see explained_dups), which the row notes. A cell
# whose first run fails (most often by retransmission alone,
# duplicate_request or completer_retry_err: one side sent again what the
# other had, during one of the emulated VM's stalls) runs once more and
# must then pass; its row shows what the first run did, the summary how
# many ran twice, and the failed rows are listed again at the end.
#
# Environment: RXEVM (the rxe-vm.sh script), SOFTRNIC (the binary),
# ITERS (iterations per cell, default 100; ITERS_HUGE for the 8 MiB and
# -a cells, default 5), POLL (softrnic perf -poll,
# default sleep), INTEROP_QUICK=1 (one cell per
# MTU), INTEROP_ONLY (an extended regular expression: run only the cells
# whose name, e.g. "write-bw udp mtu1500 65536", matches it; REPEAT times
# each, default 1), INTEROP_LOG (directory for every side's output).
set -u
cd "$(dirname "$0")/../.."
# Debian's binaries the C cells run on lib/ (installed when missing, as root).
. tests/lib/need.sh
need interop ib_write_bw perftest ibv_rc_pingpong ibverbs-utils rping rdmacm-utils
T=${RXEVM:-../shared/tools/rxe-vm/rxe-vm.sh}
BIN=$(realpath "${SOFTRNIC:-bin/softrnic}")
ITERS=${ITERS:-100}
# The emulated rxe runs in a VM on the same cores: softrnic's engines sleep
# when idle (POLL, softrnic perf -poll; default sleep), so that a polling
# tool does not take the time the VM needs (rxe's ACKs would come late and
# softrnic would probe).
POLL=${POLL:-sleep}
# Latency cells run fewer iterations. rxe (kernel 6.1) arms its
# retransmission timer when it sends and none is pending, and re-arms it on
# an ACK only while more is outstanding; in a ping-pong nothing is
# outstanding after each ACK, so the timer armed by the run's first WRITE
# fires every 67 ms (timeout 14), and when a message happens to be in
# flight at that instant rxe retransmits it, however fresh (a capture of a
# 300-iteration write_lat: retransmissions 134.0, 269.3 and 338.5 ms after
# the first WRITE, of WRITEs sent 0.81, 0.10 and 1.22 ms before;
# completer_retry_err +3). A run that ends within the first 67 ms shows the
# link itself: 10 iterations, as the reference captures of two rxe peers
# ran (a round trip takes 1 to 3 ms under emulation; 20 iterations once
# took too long).
ITERS_LAT=${ITERS_LAT:-10}
# The same timer, re-armed only by an ACK that finds more outstanding, can
# go stale in a stream too when every ACK catches rxe's slow (emulated)
# requester up; 64 KiB cells run 20 messages (tens of milliseconds here)
# to keep that exposure small. Every cell still moves real data both ways.
ITERS_BIG=${ITERS_BIG:-20}
ITERS_HUGE=${ITERS_HUGE:-5}
# rdma-core's pingpong programs: a ping-pong, like the latency cells.
ITERS_PP=${ITERS_PP:-10}
# librdmacm's rping: pings per run.
ITERS_RP=${ITERS_RP:-10}
LOG=${INTEROP_LOG:-/tmp/softrnic-interop}
NS=rxevm HOSTIF=rxetap0 HOSTIP=10.77.0.1 GUESTIP=10.77.0.2
WATCHED="out_of_seq_request duplicate_request completer_retry_err retry_exceeded_err rcvd_seq_err"
mkdir -p "$LOG"
rm -f "$LOG"/*.log

[ -x "$T" ] || { echo "interop: $T not found: the rxe VM tool lives in ../shared/tools/rxe-vm" >&2; exit 2; }
[ -x "$BIN" ] || { echo "interop: $BIN not built (make build)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "interop: needs root (network namespaces, AF_XDP, qemu)" >&2; exit 2; }

started=0
cleanup() {
	[ $started = 1 ] && "$T" stop >/dev/null 2>&1
	started=0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$T" setup >"$LOG/setup.log" 2>&1 || { echo "interop: rxe-vm setup failed (see $LOG/setup.log)" >&2; exit 2; }

# counters prints rxe's hw_counters as name=value lines.
counters() {
	"$T" exec -t 20 'cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do echo "$f=$(cat $f)"; done'
}

# moved compares two counter dumps and prints "name+delta" for every
# watched counter that went up.
moved() {
	local out=""
	for c in $WATCHED; do
		local a b
		a=$(sed -n "s/^$c=//p" <<<"$1")
		b=$(sed -n "s/^$c=//p" <<<"$2")
		if [ -n "$a" ] && [ -n "$b" ] && [ "$b" != "$a" ]; then
			out="$out $c+$((b - a))"
		fi
	done
	echo "${out# }"
}

# figure pulls the first number of a result row's figure column: BW
# average for bandwidth tests, t_typical for latency tests.
figure() {
	local file=$1 test=$2
	case $test in
	*bw) awk '/BW average/ {getline; print $4; exit}' "$file" ;;
	*) awk '/t_typical/ {getline; print $5; exit} /tps average/ {getline; print $3; exit}' "$file" ;;
	esac
}

# run_pair DIR TAG PEER WAIT GUEST-COMMAND SOFTRNIC-ARGS...: one run in
# direction DIR (softrnic-server: softrnic serves and the guest's command
# connects to HOSTIP; otherwise the guest's command serves, WAIT seconds
# before softrnic connects to GUESTIP). It sets the caller's slog and plog
# (each side's output, in $LOG/TAG.softrnic.log and $LOG/TAG.PEER.log),
# t0 (when it began), src and prc (softrnic's and the guest command's
# exit statuses) and mv (the watched rxe counters that moved).
# WAIT "cm": the servers listen through the connection manager (no TCP
# port to watch): two seconds each way.
run_pair() {
	local dir=$1 tag=${2//[^A-Za-z0-9_.-]/} peer=$3 wait=$4 guest=$5
	shift 5
	slog="$LOG/$tag.softrnic.log" plog="$LOG/$tag.$peer.log"
	local before after
	before=$(counters)
	t0=$SECONDS
	if [ "$dir" = softrnic-server ]; then
		timeout 120 ip netns exec $NS "$BIN" "$@" >"$slog" 2>&1 &
		local spid=$!
		if [ "$wait" = cm ]; then
			sleep 2 # a CM listener opens no TCP port: give it time to start
		else
			for _ in $(seq 50); do
				ip netns exec $NS ss -ltn 2>/dev/null | grep -q ':18515 ' && break
				sleep 0.1
			done
		fi
		"$T" exec -t 110 "timeout 100 $guest $HOSTIP" >"$plog" 2>&1
		prc=$?
		wait $spid
		src=$?
	else
		local id
		id=$("$T" bg "timeout 100 $guest")
		if [ "$wait" = cm ]; then sleep 2; else sleep "$wait"; fi
		timeout 120 ip netns exec $NS "$BIN" "$@" $GUESTIP >"$slog" 2>&1
		src=$?
		"$T" wait "$id" >"$plog" 2>&1
		prc=$?
	fi
	after=$(counters)
	mv=$(moved "$before" "$after")
}

# skipped says whether INTEROP_ONLY leaves out the cell NAME.
skipped() {
	[ -n "${INTEROP_ONLY:-}" ] && ! grep -Eq -- "$INTEROP_ONLY" <<<"$1"
}

# timer_fired prints how often softrnic's own retransmission timers ran
# out in the run whose output (perf --counters) is in FILE: its early
# probes and its local ACK timeouts.
timer_fired() {
	awk '$2 == "early_retransmits" || $2 == "local_ack_timeout" {n += $3} END {print n + 0}' "$1"
}

# explained_dups takes the counters that moved in a run and softrnic's
# log: it drops duplicate_request+K when softrnic's own timer fired in
# that run, at most twice, and K is at most 4 (a probe sends one request
# again; a timeout the requests in flight). That is a stall of the
# emulated guest longer than the probe's floor, repaired as designed;
# a duplicate that no timer of softrnic's explains, or a timer that fires
# again and again, still fails the run.
explained_dups() {
	local mv=$1 log=$2 fired
	fired=$(timer_fired "$log")
	if [ "$fired" -ge 1 ] && [ "$fired" -le 2 ] && grep -Eq '(^| )duplicate_request\+[1-4]( |$)' <<<"$mv"; then
		sed -E 's/(^| )duplicate_request\+[0-9]+//; s/^ +//' <<<"$mv"
		return
	fi
	echo "$mv"
}

# beyond_stalls drops from a list of counters that moved the two a
# ping-pong shows when the emulated guest stalls (see ppcell):
# completer_retry_err (rxe's own timer ran out) and duplicate_request
# (softrnic's probe or timer did, rxe's ACK late by tens of
# milliseconds). Both are repairs, and the cells check the data.
beyond_stalls() {
	sed -E 's/(^| )(completer_retry_err|duplicate_request)\+[0-9]+//g; s/^ +//' <<<"$1"
}

rows=()
fails=0 reruns=0

# record adds the row of the run a cell function has just judged (its
# locals name, dir, verdict, src, prc, sf, pf, t0, mv and note) and
# prints it.
record() {
	[ "$verdict" = FAIL ] && fails=$((fails + 1))
	rows+=("$(printf '%-44s %-16s %-5s %3s %3s %12s %12s %4ss  %s' "$name" "$dir" "$verdict" "$src" "$prc" "${sf:--}" "${pf:--}" $((SECONDS - t0)) "${mv:-none}$note$first")")
	echo "${rows[-1]}"
}

# again says, after a cell's first run failed, to run it once more (the
# caller's loop continues): the guest is emulated on the cores softrnic
# shares, and a stall of seconds there fails a run that nothing on either
# side got wrong (a timeout, a late REP, retransmissions). It keeps what
# the first run did in first, which the row shows; a second failure
# fails the cell, and reruns are counted in the summary.
again() {
	[ "$verdict" = FAIL ] && [ "$attempt" = 1 ] || return 1
	first=" (second run; the first: sr $src pt $prc${mv:+, $mv})"
	reruns=$((reruns + 1))
	echo "interop: $name $dir: the first run failed (sr $src pt $prc${mv:+, $mv}): once more" >&2
}
# cell TEST IO MTU SIZE [EXTRA perftest flags...]
cell() {
	local test=$1 io=$2 mtu=$3 size=$4
	shift 4
	local extra="$*"
	local pt="ib_${test//-/_}"
	local sz=""
	[ "$size" != - ] && sz="-s $size"
	local name="$test $io mtu$mtu ${size/-/8} ${extra}"
	if skipped "$name"; then
		return
	fi
	local rep
	for rep in $(seq "${REPEAT:-1}"); do
	local n=$ITERS
	case $test in *lat) n=$ITERS_LAT ;; esac
	[ "$size" = 65536 ] && n=$ITERS_BIG
	# 8 MiB READs, and -a's every size up to them: a few of each (the
	# emulated rxe moves tens of MB/s).
	case "$size $extra " in 8388608*|*" -a "*) n=$ITERS_HUGE ;; esac
	# -b: both sides stream at once and the emulated rxe, busy sending,
	# ACKs late; a short run keeps softrnic's probes (a duplicate at rxe)
	# out of it, as for the 64 KiB cells.
	case " $extra " in *" -b "*) n=$ITERS_BIG ;; esac
	local iters="-n $n"
	case " $extra " in *" -D "*) iters="" ;; esac # -D: a duration instead
	local wait=0
	case " $extra " in *" -R "*) wait=cm ;; esac # -R: the servers listen through the CM
	for dir in "softrnic-server" "perftest-server"; do
		local attempt note="" first=""
		for attempt in 1 2; do
		local slog plog t0 src prc mv
		# shellcheck disable=SC2086 # the flags split into words
		run_pair $dir "${test}_${io}_${mtu}_${size}_${extra// /}_${dir}" perftest $wait "$pt -d rxe0 -x 1 -F $sz $iters $extra" \
			perf "$test" -d $HOSTIF --io "$io" -poll "$POLL" --counters $sz $iters $extra
		local sf pf verdict=pass
		note=""
		sf=$(figure "$slog" "$test")
		pf=$(figure "$plog" "$test")
		if [ $src != 0 ] || [ $prc != 0 ]; then verdict=FAIL; fi
		# The passive side of READ/atomic latency prints no table, as perftest.
		case "$test,$dir" in
		read-lat,softrnic-server | atomic-lat,softrnic-server) [ -z "$sf" ] && sf="(server)" ;;
		read-lat,perftest-server | atomic-lat,perftest-server) [ -z "$pf" ] && pf="(server)" ;;
		esac
		if [ -z "$sf" ] || [ -z "$pf" ]; then verdict=FAIL; fi
		# A -D run is judged by both sides' exit status and figures; its
		# rxe counters are shown, not judged. It ends as perftest ends it
		# (each side stops at its own deadline with messages in flight
		# and tears its QP down, so the peer retries what it had out:
		# rxe's completer_retry_err with an rxe client), and seconds of
		# traffic meet the emulated guest's stalls: rxe drops frames
		# (out_of_seq_request, repaired by go-back-N) and its ping-pong
		# timer fires (completer_retry_err, duplicate_request; see
		# ITERS_LAT), which the fixed-count cells keep clear of.
		case " $extra " in
		*" -D "*) ;;
		*)
			local left
			left=$(explained_dups "$mv" "$slog")
			[ -n "$left" ] && verdict=FAIL
			[ "$left" != "$mv" ] && [ $verdict = pass ] && note=" (softrnic's timer fired $(timer_fired "$slog")x while the emulated guest stalled)"
			;;
		esac
		# READs longer than the tap holds (1000 frames) with softrnic
		# answering: the emulated guest drains its tap at a few MB/s,
		# slower than any responder sends, so the first such READ
		# overruns the tap and rxe asks again from the first response it
		# lost (completer_retry_err). softrnic's responder takes the rate
		# that got through from that retry (datapath/readpace.go) and the
		# rest go at it: up to four such retries pass the cell, more fail
		# it, as does any other counter.
		case "$test $size $extra " in
		"read-bw 8388608 "* | "read-bw - -a "*)
			if [ $verdict = FAIL ] && [ $dir = softrnic-server ] && [ $src = 0 ] && [ $prc = 0 ] && [ -n "$sf" ] && [ -n "$pf" ] &&
				grep -Eq '^completer_retry_err\+[1-4]$' <<<"$mv"; then
				verdict=pass note=" (the emulated guest's tap overrun: rxe asked again)"
			fi
			;;
		esac
		# A first run that failed (one whose only flaw is retransmission
		# among them: duplicate_request, softrnic probed or timed out while
		# the emulated rxe stalled, its ACKs late by more than the probe's
		# 20 ms floor, or completer_retry_err, rxe's own timer ran out while
		# softrnic's ACK waited behind the VM's stall) runs once more.
		again && continue
		break
		done
		record
	done
	done
}

# ppcell KIND [FLAGS...]: softrnic pingpong against rdma-core's
# ibv_KIND_pingpong, both directions, the same flags on both sides (the C
# program with -g 1, the guest's RoCEv2 IPv4 GID). A run passes when both
# exit 0, both print their usec/iter line (with -c the C server found the
# client's marks), and no watched rxe counter but completer_retry_err and
# duplicate_request moved (beyond_stalls): retransmissions on either side
# while the emulated guest stalls (a CI run saw duplicate_request +2 to +5
# in the rc cells at 20 to 40 ms an iteration). rxe's side, for one: in a capture of `srq -c -q 4` (softrnic server,
# --pcap) softrnic ACKed each of rxe's four messages within 0.2 ms, rxe
# resent all four 2 to 4 ms later at once (in reverse QP order, as its
# per-QP timers ran out together), and rxe's own ACKs of softrnic's
# replies took 45 ms to come; rxe's duplicates were ACKed again and
# nothing was lost. The row shows it.
ppcell() {
	local kind=$1
	shift
	local extra="$*"
	local name="pingpong $kind $extra"
	if skipped "$name"; then
		return
	fi
	local prog="ibv_${kind}_pingpong -d rxe0 -g 1 -n $ITERS_PP $extra"
	for dir in "softrnic-server" "rdma-core-server"; do
		local attempt first=""
		for attempt in 1 2; do
		local note=""
		local slog plog t0 src prc mv
		# The C client gives up at once if nobody listens yet: a second
		# for the guest's server first.
		# shellcheck disable=SC2086 # the flags split into words
		run_pair $dir "pingpong_${kind}_${extra// /}_${dir}" rdma-core 1 "$prog" pingpong "$kind" -d $HOSTIF -poll "$POLL" -n "$ITERS_PP" $extra
		local sf pf verdict=pass
		note=""
		sf=$(awk '/usec\/iter/ {print $(NF-1)}' "$slog")
		pf=$(awk '/usec\/iter/ {print $(NF-1)}' "$plog")
		local bad
		bad=$(beyond_stalls "$mv")
		if [ $src != 0 ] || [ $prc != 0 ] || [ -z "$sf" ] || [ -z "$pf" ] || [ -n "$bad" ]; then verdict=FAIL; fi
		# -c: the C server prints this when the client's marks are missing.
		grep -q "invalid data" "$plog" && verdict=FAIL
		again && continue
		break
		done
		record
	done
}

# rpcell [FLAGS...]: softrnic rping against librdmacm's rping, both
# directions, connected through the connection manager (QP1, REQ/REP/RTU,
# DREQ/DREP). The guest's image has no libgcc_s.so.1, so its rping aborts
# in pthread_exit after the disconnect (status 134, "libgcc_s.so.1 must
# be installed") and its buffered stdout is lost: softrnic's side is
# judged by what it printed (every ping: the server what it READ, the
# client what came back, checked with -V) and its exit status (a server
# returns when the client disconnects), the guest's by no "mismatch" or
# error on stderr and, as a server, its "DISCONNECT EVENT" for softrnic's
# DREQ (a guest client may abort before it prints its own). No watched
# rxe counter but those of beyond_stalls may move.
rpcell() {
	local extra="$*"
	local name="rping $extra"
	if skipped "$name"; then
		return
	fi
	for dir in "softrnic-server" "rdma-core-server"; do
		local attempt first=""
		for attempt in 1 2; do
		local note=""
		local slog plog t0 src prc mv tag="rping_${extra// /}_${dir}"
		if [ $dir = softrnic-server ]; then
			# shellcheck disable=SC2086
			run_pair $dir "$tag" rdma-core cm "rping -c -v -V -C $ITERS_RP $extra -a" rping -s -v --dev $HOSTIF -poll "$POLL" $extra
		else
			# shellcheck disable=SC2086
			run_pair $dir "$tag" rdma-core cm "rping -s -v -a $GUESTIP $extra" rping -c --dev $HOSTIF -poll "$POLL" -v -V -C "$ITERS_RP" $extra -a
		fi
		local sf pf verdict=pass
		note=""
		# softrnic's pings (the server's READs, or the client's pings
		# back), and the guest's ending
		sf=$(grep -c 'ping data: rdma-ping-' "$slog")
		pf=ok
		[ $dir = rdma-core-server ] && pf=disconnected
		if { [ $pf = disconnected ] && ! grep -q 'DISCONNECT EVENT' "$plog"; } || grep -Eqi 'mismatch|error|failed' "$plog"; then pf=-; fi
		if [ $prc = 134 ] && grep -q 'libgcc_s.so.1 must be installed' "$plog"; then
			prc=0
			note=" (the guest's rping aborted at exit: no libgcc_s in its image)"
		fi
		local bad
		bad=$(beyond_stalls "$mv")
		if [ $src != 0 ] || [ $prc != 0 ] || [ "$sf" != "$ITERS_RP" ] || [ "$pf" = - ] || [ -n "$bad" ]; then verdict=FAIL; fi
		again && continue
		break
		done
		record
	done
}

# Unmodified Debian binaries on softrnic's C libraries (lib/, make libs):
# the same program on the host side of the tap (on softrnic_rxetap0, its
# NIC driven as POLL says) and in the guest (on rxe0).
LIBDIR=$(realpath lib 2>/dev/null || echo lib)
HOSTRUN=(env SOFTRNIC_NETDEV=$HOSTIF SOFTRNIC_POLL=$POLL LD_LIBRARY_PATH=$LIBDIR)

# run_cpair DIR TAG HOST-SERVER GUEST-CLIENT GUEST-SERVER HOST-CLIENT: one
# run in direction DIR (c-host-server: the host's server and the guest's
# client, which connects to HOSTIP; c-guest-server: the guest's server,
# and once it listens, the host's client, which connects to GUESTIP). Each command
# is one string; a client's ends where the server's address goes. It sets
# what run_pair sets.
run_cpair() {
	local dir=$1 tag=${2//[^A-Za-z0-9_.-]/}
	slog="$LOG/$tag.softrnic.log" plog="$LOG/$tag.rxe.log"
	local before after
	before=$(counters)
	t0=$SECONDS
	if [ "$dir" = c-host-server ]; then
		# shellcheck disable=SC2086 # the command splits into words
		timeout 120 ip netns exec $NS "${HOSTRUN[@]}" $3 >"$slog" 2>&1 &
		local spid=$!
		sleep 2
		"$T" exec -t 110 "timeout 100 $4 $HOSTIP" >"$plog" 2>&1
		prc=$?
		wait $spid
		src=$?
	else
		local id
		id=$("$T" bg "timeout 100 $5")
		# The emulated guest's server takes a while to listen, and the
		# clients of perftest 4.5 and librdmacm's tools give up at the
		# first REJ: wait until it does. mckey's receiver listens for
		# nothing: it posts its receives, then joins its group (a UD
		# datagram sent before is lost), so wait for the membership.
		case "$5" in
		mckey*) guest_joined ;;
		*) guest_listening ;;
		esac
		# shellcheck disable=SC2086
		timeout 120 ip netns exec $NS "${HOSTRUN[@]}" $6 $GUESTIP >"$slog" 2>&1
		src=$?
		"$T" wait "$id" >"$plog" 2>&1
		prc=$?
	fi
	after=$(counters)
	mv=$(moved "$before" "$after")
}

# guest_until TRIES CHECK SETTLE WHAT: runs the shell test CHECK in the
# guest every half second, TRIES times at most, until it holds, then
# waits SETTLE seconds more; says so on stderr if it never held.
guest_until() {
	local i
	for i in $(seq "$1"); do
		if "$T" exec -t 10 "$2" >/dev/null 2>&1; then
			sleep "$3"
			return 0
		fi
		sleep 0.5
	done
	echo "interop: $4 in the guest after $(($1 / 2)) s" >&2
}

# guest_listening waits until a server in the guest listens: a TCP socket
# on perftest's and pingpong's port 18515, or an rdma_cm id (rdma res),
# then a moment for it to get to its accept.
guest_listening() {
	sleep 1
	guest_until 30 "grep -q ':4853 00000000:0000 0A' /proc/net/tcp || rdma res show cm_id | grep -q 'state LISTEN'" 0.5 "no server listens"
}

# guest_joined waits until the guest's eth0 is a member of mckey's
# group, 239.7.7.7 (/proc/net/igmp, in hex, low byte first), then 3 s
# more: the kernel joins the group before librdmacm attaches the QP, on
# the join's event, which the emulated guest takes seconds to get.
guest_joined() {
	guest_until 60 "grep -q 070707EF /proc/net/igmp" 3 "mckey joined no group"
}

# ccell KIND NAME HOST-SERVER GUEST-CLIENT GUEST-SERVER HOST-CLIENT: both
# directions of one program (KIND perftest: both sides must print a
# figure; mckey: both ends done; other: the exit statuses and, for rping,
# every ping). A run
# passes when both exit 0 and no watched rxe counter but those of
# beyond_stalls moved. The guest's rping aborts at exit (no libgcc_s in
# its image, see rpcell): judged by its stderr and the host's side.
ccell() {
	local kind=$1 name="C $2"
	if skipped "$name"; then
		return
	fi
	for dir in c-host-server c-guest-server; do
		local attempt first=""
		for attempt in 1 2; do
		local note="" slog plog t0 src prc mv
		run_cpair $dir "c_${2// /_}_${dir}" "$3" "$4" "$5" "$6"
		local sf=ok pf=ok verdict=pass
		case $kind in
		perftest)
			local test=${2%% *}
			sf=$(figure "$slog" "${test#ib_}")
			pf=$(figure "$plog" "${test#ib_}")
			case "$test" in ib_read_lat | ib_atomic_lat)
				[ $dir = c-host-server ] && [ -z "$sf" ] && sf="(server)"
				[ $dir = c-guest-server ] && [ -z "$pf" ] && pf="(server)" ;;
			esac
			;;
		pingpong)
			sf=$(awk '/usec\/iter/ {print $(NF-1)}' "$slog")
			pf=$(awk '/usec\/iter/ {print $(NF-1)}' "$plog")
			grep -q "invalid data" "$slog" "$plog" && verdict=FAIL
			;;
		mckey)
			# Both ends say so once the receiver has taken every message.
			sf=$(grep -c 'data transfers complete' "$slog")
			pf=$(grep -c 'data transfers complete' "$plog")
			[ "$sf" = 1 ] && [ "$pf" = 1 ] || verdict=FAIL
			;;
		rping)
			sf=$(grep -c 'ping data: rdma-ping-' "$slog")
			[ "$sf" = "$ITERS_RP" ] || verdict=FAIL
			if [ $prc = 134 ] && grep -q 'libgcc_s.so.1 must be installed' "$plog"; then
				prc=0
				note=" (the guest's rping aborted at exit: no libgcc_s in its image)"
			fi
			grep -Eqi 'mismatch|error|failed' "$plog" && pf=-
			;;
		esac
		local bad
		bad=$(beyond_stalls "$mv")
		if [ $src != 0 ] || [ $prc != 0 ] || [ -z "$sf" ] || [ -z "$pf" ] || [ "$pf" = - ] || [ -n "$bad" ]; then verdict=FAIL; fi
		again && continue
		break
		done
		record
	done
}

# ptcell TEST SIZE ITERS [FLAGS...]: a perftest binary on both sides.
ptcell() {
	local test=$1 size=$2 n=$3
	shift 3
	local extra="$*" sz=""
	[ "$size" != - ] && sz="-s $size"
	local args="-x 1 -F $sz -n $n $extra"
	ccell perftest "$test ${size/-/8} $extra" "$test -d softrnic_$HOSTIF $args" "$test -d rxe0 $args" "$test -d rxe0 $args" "$test -d softrnic_$HOSTIF $args"
}

boot() {
	local mtu=$1
	cleanup
	"$T" stop >/dev/null 2>&1 # an instance left running by an earlier run
	echo "== booting the rxe VM, MTU $mtu"
	"$T" start --mtu "$mtu" >"$LOG/start-$mtu.log" 2>&1 || { echo "interop: VM start failed (see $LOG/start-$mtu.log)" >&2; exit 2; }
	started=1
}

start=$SECONDS
printf '%-44s %-16s %-5s %3s %3s %12s %12s %5s  %s\n' "cell (test io netdev-MTU size)" "direction" "" "sr" "pt" "softrnic" "perftest" "time" "rxe counters moved"
for mtu in 1500 9000; do
	boot $mtu
	if [ "${INTEROP_QUICK:-0}" = 1 ]; then
		cell write-bw xsk $mtu 65536
		continue
	fi
	for t in send-bw write-bw read-bw; do
		cell $t xsk $mtu 2
		cell $t xsk $mtu 65536
	done
	# READs longer than the port can take in at once: the requester asks
	# for them in pieces that fit its receive ring
	cell read-bw xsk $mtu 8388608
	cell read-bw xsk $mtu - -a
	cell atomic-bw xsk $mtu - -A CMP_AND_SWAP
	cell atomic-bw xsk $mtu - -A FETCH_AND_ADD
	for t in write-lat send-lat read-lat; do
		cell $t xsk $mtu 2
	done
	if [ $mtu = 1500 ]; then
		cell write-bw udp $mtu 65536
		cell read-bw udp $mtu 65536
		# beyond the matrix: several QPs
		cell write-bw xsk $mtu 65536 -q 2
		cell send-bw xsk $mtu 65536 -q 2
		# bidirectional: both sides send, both print the sum
		cell write-bw xsk $mtu 4096 -b
		cell send-bw xsk $mtu 4096 -b
		cell read-bw xsk $mtu 4096 -b
		# -D: a duration instead of iterations (each side measures its own)
		cell send-bw xsk $mtu 4096 -D 3
		cell write-lat xsk $mtu 2 -D 2
		# perftest's other connection types: UC (send and write tests)
		# and UD (send tests, a message at most the path MTU)
		cell send-bw xsk $mtu 4096 -c UC
		cell write-bw xsk $mtu 65536 -c UC
		cell write-lat xsk $mtu 2 -c UC
		cell send-bw xsk $mtu 1024 -c UD
		cell send-lat xsk $mtu 2 -c UD
		# rdma-core's example programs (UD: at most the port's MTU, 1024)
		ppcell rc -c
		ppcell uc -c
		ppcell ud -s 1024
		ppcell srq -c -q 4
		# librdmacm's rping, through the connection manager
		rpcell
		rpcell -S 1000
		# perftest -R: the exchange and the test's QPs connected through
		# the connection manager (rdma_cm on the guest's side)
		cell write-bw xsk $mtu 65536 -R
		cell send-bw xsk $mtu 65536 -R
		cell read-bw xsk $mtu 65536 -R
		cell write-lat xsk $mtu 2 -R
		# Debian's own binaries on softrnic's libibverbs and librdmacm
		if [ -f "$LIBDIR/libibverbs.so.1" ] && [ -f "$LIBDIR/librdmacm.so.1" ]; then
			for R in "" "-R"; do
				ptcell ib_write_bw 65536 "$ITERS_BIG" $R
				ptcell ib_read_bw 65536 "$ITERS_BIG" $R
				ptcell ib_send_bw 65536 "$ITERS_BIG" $R
				ptcell ib_atomic_bw - "$ITERS" $R
				ptcell ib_write_lat 2 "$ITERS_LAT" $R
				ptcell ib_send_lat 2 "$ITERS_LAT" $R
				ptcell ib_read_lat 2 "$ITERS_LAT" $R
			done
			ptcell ib_send_bw 4096 "$ITERS" -c UC
			ptcell ib_write_bw 65536 "$ITERS_BIG" -c UC
			ptcell ib_send_bw 1024 "$ITERS" -c UD
			ptcell ib_send_lat 2 "$ITERS_LAT" -c UD
			for k in rc uc srq; do
				ccell pingpong "ibv_${k}_pingpong -c" "ibv_${k}_pingpong -d softrnic_$HOSTIF -g 1 -n $ITERS_PP -c" \
					"ibv_${k}_pingpong -d rxe0 -g 1 -n $ITERS_PP -c" "ibv_${k}_pingpong -d rxe0 -g 1 -n $ITERS_PP -c" \
					"ibv_${k}_pingpong -d softrnic_$HOSTIF -g 1 -n $ITERS_PP -c"
			done
			ccell pingpong "ibv_ud_pingpong -s 1024" "ibv_ud_pingpong -d softrnic_$HOSTIF -g 1 -n $ITERS_PP -s 1024" \
				"ibv_ud_pingpong -d rxe0 -g 1 -n $ITERS_PP -s 1024" "ibv_ud_pingpong -d rxe0 -g 1 -n $ITERS_PP -s 1024" \
				"ibv_ud_pingpong -d softrnic_$HOSTIF -g 1 -n $ITERS_PP -s 1024"
			ccell rping "rping" "rping -s -v -a $HOSTIP -C $ITERS_RP" "rping -c -v -C $ITERS_RP -a" \
				"rping -s -v -a $GUESTIP -C $ITERS_RP" "rping -c -v -C $ITERS_RP -a"
			ccell other "ucmatose" "ucmatose" "ucmatose -s" "ucmatose" "ucmatose -s"
			ccell other "udaddy" "udaddy" "udaddy -s" "udaddy" "udaddy -s"
			ccell other "rdma_server/rdma_client" "rdma_server" "rdma_client -s" "rdma_server" "rdma_client -s"
			# UD multicast: the server end receives what the client end
			# sends to the group (the client's last argument, the other
			# end's address, is not mckey's and it leaves it alone).
			ccell mckey "mckey" "mckey -m 239.7.7.7 -b $HOSTIP -C 20" "mckey -m 239.7.7.7 -b $GUESTIP -C 20 -s" \
				"mckey -m 239.7.7.7 -b $GUESTIP -C 20" "mckey -m 239.7.7.7 -b $HOSTIP -C 20 -s"
		else
			echo "interop: no lib/libibverbs.so.1 and lib/librdmacm.so.1 (make libs): the C programs' cells are left out" >&2
			rows+=("C programs on softrnic's libraries: not built (make libs)")
			fails=$((fails + 1))
		fi
	else
		ppcell rc -s 8192 -m 4096
		ppcell ud -s 4096
	fi
done
cleanup
echo
# The failed rows once more, last, where a CI log's tail shows them.
if [ $fails != 0 ]; then
	echo "interop: failed:"
	for r in "${rows[@]}"; do
		case "$r" in *" FAIL "* | "C programs"*) echo "  $r" ;; esac
	done
fi
echo "interop: ${#rows[@]} runs, $fails failed, $reruns run twice after a first failure, $((SECONDS - start)) s; logs in $LOG"
echo "(sr/pt: exit status of softrnic and of perftest or rdma-core's program; figures: BW average MB/s, t_typical us, or pingpong usec/iter)"
[ $fails = 0 ]
