#!/usr/bin/env bash
# scale-cachesim.sh: the cache lines a WRITE misses when its QP is one of
# many, counted by a cache simulation instead of timed.
#
# It runs `softrnic bench scale` under valgrind's callgrind with a 4 MiB
# first-level data cache (this machine's L2) and counts only inside the
# NIC's work (NIC.Progress) and the application's posts (QP.PostSend), not
# the setup. The QP-context cache is made large enough for every QP
# (-sets 8192, 4 ways), so that no context misses: what is counted is the
# cost of cold per-QP state, the part of bench scale's fall at 4K QPs that
# is not GCCache's. Instruction and miss counts do not depend on what else
# the machine runs; a longer DUR spreads the QPs' first WRITEs, which set
# their state up, thinner.
#
#   QPS=2048 DUR=40s bash tests/bench/scale-cachesim.sh   (about 6 minutes)
#
# CGOUT=FILE keeps callgrind's output there, to see where the misses are
# (callgrind_annotate --sort=D1mr,D1mw FILE).
set -euo pipefail
cd "$(dirname "$0")/../.."
QPS="${QPS:-2048}"
DUR="${DUR:-40s}"
if ! command -v valgrind >/dev/null; then
	echo "scale-cachesim: needs valgrind (apt-get install valgrind)" >&2
	exit 2
fi
make -s build
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# Go's asynchronous preemption signals trip callgrind. No garbage
# collection runs during the count (GOGC=off: the packet path allocates
# nothing; the benchmark collects the setup's garbage before it starts).
GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --cache-sim=yes \
	--D1=4194304,16,64 --collect-atstart=no \
	'--toggle-collect=*datapath.(*NIC).Progress' \
	'--toggle-collect=*verbs.(*QP).PostSend' \
	--callgrind-out-file="$out/callgrind.out" \
	./bin/softrnic bench scale -q "$QPS" -sets 8192 -gccache-only -d "$DUR" >"$out/bench.txt" 2>"$out/valgrind.txt" || {
	echo "scale-cachesim: the run failed:" >&2
	cat "$out/bench.txt" >&2
	grep -v '^==[0-9]*== *\(at\|by\) ' "$out/valgrind.txt" | tail -20 >&2
	exit 1
}
cat "$out/bench.txt"
writes=$(awk '$1 == "GCCache" { n += $3 } END { print n }' "$out/bench.txt")
read -r rd wr < <(awk '/D1  misses:/ { gsub(/[,()]/, ""); n = 0
	for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) v[++n] = $i
	print v[2], v[3] }' "$out/valgrind.txt")
echo
echo "$QPS QPs, every context cached: $writes WRITEs (setup excluded)"
awk -v w="$writes" -v r="$rd" -v m="$wr" 'BEGIN {
	printf "4 MiB-cache misses per WRITE, both NICs: %.1f (%.1f reads, %.1f writes)\n", (r+m)/w, r/w, m/w }'
echo "(the first WRITE of each QP also sets its state up: at $QPS QPs and a few"
echo " WRITEs per QP under valgrind's slowdown that adds a few misses per WRITE)"
if [ -n "${CGOUT:-}" ]; then
	cp "$out/callgrind.out" "$CGOUT"
	echo
	echo "where they are: callgrind_annotate --sort=D1mr,D1mw $CGOUT"
fi
