# Shared by the scripts that run two softrnic NICs over a veth pair
# (perf-veth, soak, bench-compare, bench-capi, bench-plots); source it.

# vethpair A B MTU NET: network namespaces A and B, joined by a veth pair
# named veth0 on both sides, up with MTU MTU, addresses NET.1/24 in A and
# NET.2/24 in B.
vethpair() {
	ip netns add "$1"
	ip netns add "$2"
	ip link add veth0 netns "$1" type veth peer name veth0 netns "$2"
	local ns
	for ns in "$1" "$2"; do
		ip -n "$ns" link set lo up
		ip -n "$ns" link set veth0 mtu "$3" up
	done
	ip -n "$1" addr add "$4.1/24" dev veth0
	ip -n "$2" addr add "$4.2/24" dev veth0
}

# vethpair_del A B: removes both namespaces (and with them the pair).
vethpair_del() {
	ip netns del "$1" 2>/dev/null
	ip netns del "$2" 2>/dev/null
}
