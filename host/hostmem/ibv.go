package hostmem

// The numbers of libibverbs that the NIC and the driver share, as the
// host-memory formats carry them (WQE opcode and flags, CQE opcode,
// status and flags, QPC type and state, MPT access): defined once here,
// typed in host/verbs, used as they are by the datapath.

// QP types (enum ibv_qp_type) and states (enum ibv_qp_state).
const (
	QPTRC = 2
	QPTUC = 3
	QPTUD = 4

	QPSReset = 0
	QPSInit  = 1
	QPSRTR   = 2
	QPSRTS   = 3
	QPSSQD   = 4
	QPSSQE   = 5
	QPSErr   = 6
)

// Work request opcodes (enum ibv_wr_opcode).
const (
	WRRDMAWrite        = 0
	WRRDMAWriteWithImm = 1
	WRSend             = 2
	WRSendWithImm      = 3
	WRRDMARead         = 4
	WRAtomicCmpAndSwp  = 5
	WRAtomicFetchAdd   = 6
	WRSendWithInv      = 9
)

// Send flags (enum ibv_send_flags).
const (
	SendFence     = 1 << 0
	SendSignaled  = 1 << 1
	SendSolicited = 1 << 2
	SendInline    = 1 << 3
)

// Work completion opcodes (enum ibv_wc_opcode).
const (
	WCSend            = 0
	WCRDMAWrite       = 1
	WCRDMARead        = 2
	WCCompSwap        = 3
	WCFetchAdd        = 4
	WCRecv            = 128
	WCRecvRDMAWithImm = 129
)

// Work completion statuses (enum ibv_wc_status) the NIC writes.
const (
	WCSuccess        = 0
	WCLocLenErr      = 1
	WCLocQPOpErr     = 2
	WCLocProtErr     = 4
	WCWRFlushErr     = 5
	WCRemInvReqErr   = 9
	WCRemAccessErr   = 10
	WCRemOpErr       = 11
	WCRetryExcErr    = 12
	WCRNRRetryExcErr = 13
)

// Work completion flags (enum ibv_wc_flags).
const (
	WCWithGRH = 1 << 0
	WCWithImm = 1 << 1
	WCWithInv = 1 << 3
	// WCSolicited is softrnic's: the message asked for a solicited event
	// (its last packet's BTH SE bit, IBV_SEND_SOLICITED at the sender).
	WCSolicited = 1 << 7
)

// Access flags (enum ibv_access_flags).
const (
	AccessLocalWrite   = 1 << 0
	AccessRemoteWrite  = 1 << 1
	AccessRemoteRead   = 1 << 2
	AccessRemoteAtomic = 1 << 3
)
