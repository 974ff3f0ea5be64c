package wire

// IB MTUs, as the ibv_mtu enum numbers them (1 = 256 … 5 = 4096).
var ibMTUs = [...]int{256, 512, 1024, 2048, 4096}

// MTUHeaderRoom is the room rdma_rxe leaves in a netdev MTU for the
// headers around an IB MTU's payload: IPv6 (40), UDP (8), BTH (12), RETH
// (16) and ICRC (4).
const MTUHeaderRoom = 80

// IBMTU returns the largest IB MTU in bytes that a netdev MTU carries, as
// rxe sets a port's active MTU from its netdev's, or 0 if not even 256
// fits.
func IBMTU(netdevMTU int) int {
	best := 0
	for _, m := range ibMTUs {
		if m <= netdevMTU-MTUHeaderRoom {
			best = m
		}
	}
	return best
}

// MTUEnum returns the ibv_mtu number of an IB MTU (1 for 256 … 5 for
// 4096), or 0 if it is not one.
func MTUEnum(ibMTU int) int {
	for i, m := range ibMTUs {
		if m == ibMTU {
			return i + 1
		}
	}
	return 0
}

// MTUFromEnum returns the IB MTU of an ibv_mtu number, or 0.
func MTUFromEnum(e int) int {
	if e < 1 || e > len(ibMTUs) {
		return 0
	}
	return ibMTUs[e-1]
}
