// Package verbs is softrnic's verbs API, shaped like libibverbs: a device
// on a network interface, protection domains, memory regions, completion
// queues, queue pairs (RC, UC, UD) and shared receive queues. Names and
// numeric values of QP states, WC status codes, WC and WR opcodes, access
// flags and QP attribute masks are libibverbs' own, defined once in
// package ibv and named here too. Control-path errors are sentinel
// errors (errors.Is); data-path errors are WC status codes.
package verbs

import "github.com/softrnic/softrnic/host/ibv"

// The types of libibverbs' numbers (package ibv's).
type (
	QPState   = ibv.QPState  // enum ibv_qp_state
	QPType    = ibv.QPType   // enum ibv_qp_type
	WCStatus  = ibv.WCStatus // enum ibv_wc_status
	WCOpcode  = ibv.WCOpcode // enum ibv_wc_opcode
	WROpcode  = ibv.WROpcode // enum ibv_wr_opcode
	Access    = ibv.Access   // enum ibv_access_flags
	SendFlags = ibv.SendFlags
	WCFlags   = ibv.WCFlags
	AttrMask  = ibv.AttrMask // enum ibv_qp_attr_mask
)

// QP states.
const (
	QPSReset = ibv.QPSReset
	QPSInit  = ibv.QPSInit
	QPSRTR   = ibv.QPSRTR
	QPSRTS   = ibv.QPSRTS
	QPSSQD   = ibv.QPSSQD
	QPSSQE   = ibv.QPSSQE
	QPSErr   = ibv.QPSErr
)

// QP types.
const (
	QPTRC = ibv.QPTRC
	QPTUC = ibv.QPTUC
	QPTUD = ibv.QPTUD
)

// WC status codes.
const (
	WCSuccess        = ibv.WCSuccess
	WCLocLenErr      = ibv.WCLocLenErr
	WCLocQPOpErr     = ibv.WCLocQPOpErr
	WCLocEECOpErr    = ibv.WCLocEECOpErr
	WCLocProtErr     = ibv.WCLocProtErr
	WCWRFlushErr     = ibv.WCWRFlushErr
	WCMWBindErr      = ibv.WCMWBindErr
	WCBadRespErr     = ibv.WCBadRespErr
	WCLocAccessErr   = ibv.WCLocAccessErr
	WCRemInvReqErr   = ibv.WCRemInvReqErr
	WCRemAccessErr   = ibv.WCRemAccessErr
	WCRemOpErr       = ibv.WCRemOpErr
	WCRetryExcErr    = ibv.WCRetryExcErr
	WCRNRRetryExcErr = ibv.WCRNRRetryExcErr
	WCLocRDDViolErr  = ibv.WCLocRDDViolErr
	WCRemInvRDReqErr = ibv.WCRemInvRDReqErr
	WCRemAbortErr    = ibv.WCRemAbortErr
	WCInvEECNErr     = ibv.WCInvEECNErr
	WCInvEECStateErr = ibv.WCInvEECStateErr
	WCFatalErr       = ibv.WCFatalErr
	WCRespTimeoutErr = ibv.WCRespTimeoutErr
	WCGeneralErr     = ibv.WCGeneralErr
)

// WC opcodes.
const (
	WCSend            = ibv.WCSend
	WCRDMAWrite       = ibv.WCRDMAWrite
	WCRDMARead        = ibv.WCRDMARead
	WCCompSwap        = ibv.WCCompSwap
	WCFetchAdd        = ibv.WCFetchAdd
	WCRecv            = ibv.WCRecv
	WCRecvRDMAWithImm = ibv.WCRecvRDMAWithImm
)

// WR opcodes.
const (
	WRRDMAWrite        = ibv.WRRDMAWrite
	WRRDMAWriteWithImm = ibv.WRRDMAWriteWithImm
	WRSend             = ibv.WRSend
	WRSendWithImm      = ibv.WRSendWithImm
	WRRDMARead         = ibv.WRRDMARead
	WRAtomicCmpAndSwp  = ibv.WRAtomicCmpAndSwp
	WRAtomicFetchAdd   = ibv.WRAtomicFetchAdd
	WRSendWithInv      = ibv.WRSendWithInv
)

// Access flags.
const (
	AccessLocalWrite   = ibv.AccessLocalWrite
	AccessRemoteWrite  = ibv.AccessRemoteWrite
	AccessRemoteRead   = ibv.AccessRemoteRead
	AccessRemoteAtomic = ibv.AccessRemoteAtomic
)

// Send flags.
const (
	SendFence     = ibv.SendFence
	SendSignaled  = ibv.SendSignaled
	SendSolicited = ibv.SendSolicited
	SendInline    = ibv.SendInline
)

// WC flags.
const (
	WCWithGRH   = ibv.WCWithGRH
	WCWithImm   = ibv.WCWithImm
	WCWithInv   = ibv.WCWithInv
	WCSolicited = ibv.WCSolicited // softrnic's own: the sender asked for a solicited event
)

// Attribute masks.
const (
	AttrState            = ibv.AttrState
	AttrCurState         = ibv.AttrCurState
	AttrEnSQDAsyncNotify = ibv.AttrEnSQDAsyncNotify
	AttrAccessFlags      = ibv.AttrAccessFlags
	AttrPKeyIndex        = ibv.AttrPKeyIndex
	AttrPort             = ibv.AttrPort
	AttrQKey             = ibv.AttrQKey
	AttrAV               = ibv.AttrAV
	AttrPathMTU          = ibv.AttrPathMTU
	AttrTimeout          = ibv.AttrTimeout
	AttrRetryCnt         = ibv.AttrRetryCnt
	AttrRNRRetry         = ibv.AttrRNRRetry
	AttrRQPSN            = ibv.AttrRQPSN
	AttrMaxQPRdAtomic    = ibv.AttrMaxQPRdAtomic
	AttrAltPath          = ibv.AttrAltPath
	AttrMinRNRTimer      = ibv.AttrMinRNRTimer
	AttrSQPSN            = ibv.AttrSQPSN
	AttrMaxDestRdAtomic  = ibv.AttrMaxDestRdAtomic
	AttrPathMigState     = ibv.AttrPathMigState
	AttrCap              = ibv.AttrCap
	AttrDestQPN          = ibv.AttrDestQPN
	// AttrSelectiveRepeat is softrnic's own: QPAttr.SelectiveRepeat, on
	// an RC QP's INIT->RTR transition.
	AttrSelectiveRepeat = ibv.AttrSelectiveRepeat
	// AttrPeerRNRRetry is softrnic's own: QPAttr.PeerRNRRetry, on an RC
	// QP's RTR->RTS transition.
	AttrPeerRNRRetry = ibv.AttrPeerRNRRetry
	// AttrIdleProbe is softrnic's own: QPAttr.IdleProbe, on an RC QP's
	// RTR->RTS transition.
	AttrIdleProbe = ibv.AttrIdleProbe
)
