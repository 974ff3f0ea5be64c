package ibv

import "testing"

// The numbers are libibverbs' (infiniband/verbs.h, rdma-core 44) and so
// are the names String gives: a C program and a Go one must agree on
// every byte the NIC writes.
func TestNumbersAndNames(t *testing.T) {
	for _, c := range []struct {
		v    interface{ String() string }
		n    uint64
		want string
	}{
		{QPTRC, 2, "RC"}, {QPTUC, 3, "UC"}, {QPTUD, 4, "UD"},
		{QPSReset, 0, "RESET"}, {QPSRTR, 2, "RTR"}, {QPSRTS, 3, "RTS"}, {QPSErr, 6, "ERR"},
		{WRRDMAWrite, 0, "RDMA_WRITE"}, {WRSendWithImm, 3, "SEND_WITH_IMM"}, {WRAtomicFetchAdd, 6, "ATOMIC_FETCH_AND_ADD"}, {WRSendWithInv, 9, "SEND_WITH_INV"},
		{WCSend, 0, "SEND"}, {WCFetchAdd, 4, "FETCH_ADD"}, {WCRecv, 128, "RECV"}, {WCRecvRDMAWithImm, 129, "RECV_RDMA_WITH_IMM"},
		{WCSuccess, 0, "success"}, {WCWRFlushErr, 5, "Work Request Flushed Error"}, {WCRemAccessErr, 10, "remote access error"},
		{WCRetryExcErr, 12, "transport retry counter exceeded"}, {WCRNRRetryExcErr, 13, "RNR retry counter exceeded"}, {WCGeneralErr, 21, "general error"},
		{WCWithImm, 2, "WITH_IMM"}, {WCWithGRH | WCWithInv, 9, "GRH|WITH_INV"}, {WCSolicited, 128, "SOLICITED"},
		{SendSignaled | SendInline, 10, "SIGNALED|INLINE"}, {SendFlags(0), 0, "0"},
		{AccessLocalWrite | AccessRemoteRead, 5, "LOCAL_WRITE|REMOTE_READ"}, {Access(1 << 9), 512, "Access(0x200)"},
		{AttrState | AttrDestQPN, 1<<0 | 1<<20, "STATE|DEST_QPN"}, {AttrMask(0), 0, "none"},
		{WROpcode(7), 7, "WROpcode(7)"}, {WCStatus(99), 99, "unknown"},
	} {
		var n uint64
		switch v := c.v.(type) {
		case QPType:
			n = uint64(v)
		case QPState:
			n = uint64(v)
		case WROpcode:
			n = uint64(v)
		case WCOpcode:
			n = uint64(v)
		case WCStatus:
			n = uint64(v)
		case WCFlags:
			n = uint64(v)
		case SendFlags:
			n = uint64(v)
		case Access:
			n = uint64(v)
		case AttrMask:
			n = uint64(v)
		}
		if n != c.n || c.v.String() != c.want {
			t.Errorf("%T %d %q, want %d %q", c.v, n, c.v.String(), c.n, c.want)
		}
	}
}
