# need WHO CMD PACKAGE [CMD PACKAGE ...]: make sure each command is on
# PATH, installing its Debian package with apt-get (as root) when it is
# missing, so that a bench script runs on a fresh machine. WHO names the
# script in the messages. Sourced by tests/bench/*.sh and tests/interop.
need() {
	local who=$1 missing=() cmd pkg
	shift
	while [ $# -ge 2 ]; do
		cmd=$1 pkg=$2
		shift 2
		command -v "$cmd" >/dev/null || missing+=("$pkg")
	done
	[ ${#missing[@]} = 0 ] && return 0
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		echo "$who: needs ${missing[*]} (apt-get install ${missing[*]})" >&2
		exit 2
	fi
	echo "$who: installing ${missing[*]}" >&2
	{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; }; } >/dev/null 2>&1 ||
		{ echo "$who: apt-get install ${missing[*]} failed" >&2; exit 2; }
}
