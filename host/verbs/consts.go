// Package verbs is softrnic's verbs API, shaped like libibverbs: a device
// on a network interface, protection domains, memory regions, completion
// queues, queue pairs (RC, UC, UD) and shared receive queues. Names and
// numeric values of QP states, WC status codes, WC and WR opcodes, access
// flags and QP attribute masks are libibverbs' own. Control-path errors are
// sentinel errors (errors.Is); data-path errors are WC status codes.
package verbs

import (
	"fmt"

	"github.com/softrnic/softrnic/host/hostmem"
)

// QPState is a queue pair state (enum ibv_qp_state).
type QPState int

// QP states.
const (
	QPSReset QPState = iota // IBV_QPS_RESET
	QPSInit                 // IBV_QPS_INIT
	QPSRTR                  // IBV_QPS_RTR: ready to receive
	QPSRTS                  // IBV_QPS_RTS: ready to send
	QPSSQD                  // IBV_QPS_SQD: send queue drained
	QPSSQE                  // IBV_QPS_SQE: send queue error
	QPSErr                  // IBV_QPS_ERR
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if s < 0 || int(s) >= len(qpStateNames) {
		return fmt.Sprintf("QPState(%d)", int(s))
	}
	return qpStateNames[s]
}

// QPType is a transport service (enum ibv_qp_type).
type QPType int

// QP types.
const (
	QPTRC QPType = hostmem.QPTRC // IBV_QPT_RC
	QPTUC QPType = hostmem.QPTUC // IBV_QPT_UC
	QPTUD QPType = hostmem.QPTUD // IBV_QPT_UD
)

func (t QPType) String() string {
	switch t {
	case QPTRC:
		return "RC"
	case QPTUC:
		return "UC"
	case QPTUD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", int(t))
}

// WCStatus is a work completion status (enum ibv_wc_status).
type WCStatus int

// WC status codes.
const (
	WCSuccess        WCStatus = iota // IBV_WC_SUCCESS
	WCLocLenErr                      // IBV_WC_LOC_LEN_ERR
	WCLocQPOpErr                     // IBV_WC_LOC_QP_OP_ERR
	WCLocEECOpErr                    // IBV_WC_LOC_EEC_OP_ERR
	WCLocProtErr                     // IBV_WC_LOC_PROT_ERR
	WCWRFlushErr                     // IBV_WC_WR_FLUSH_ERR
	WCMWBindErr                      // IBV_WC_MW_BIND_ERR
	WCBadRespErr                     // IBV_WC_BAD_RESP_ERR
	WCLocAccessErr                   // IBV_WC_LOC_ACCESS_ERR
	WCRemInvReqErr                   // IBV_WC_REM_INV_REQ_ERR
	WCRemAccessErr                   // IBV_WC_REM_ACCESS_ERR
	WCRemOpErr                       // IBV_WC_REM_OP_ERR
	WCRetryExcErr                    // IBV_WC_RETRY_EXC_ERR
	WCRNRRetryExcErr                 // IBV_WC_RNR_RETRY_EXC_ERR
	WCLocRDDViolErr                  // IBV_WC_LOC_RDD_VIOL_ERR
	WCRemInvRDReqErr                 // IBV_WC_REM_INV_RD_REQ_ERR
	WCRemAbortErr                    // IBV_WC_REM_ABORT_ERR
	WCInvEECNErr                     // IBV_WC_INV_EECN_ERR
	WCInvEECStateErr                 // IBV_WC_INV_EEC_STATE_ERR
	WCFatalErr                       // IBV_WC_FATAL_ERR
	WCRespTimeoutErr                 // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr                     // IBV_WC_GENERAL_ERR
)

var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
}

// String returns libibverbs' ibv_wc_status_str text.
func (s WCStatus) String() string {
	if s < 0 || int(s) >= len(wcStatusNames) {
		return "unknown"
	}
	return wcStatusNames[s]
}

// WCOpcode is the operation a work completion reports (enum ibv_wc_opcode).
type WCOpcode int

// WC opcodes.
const (
	WCSend            WCOpcode = hostmem.WCSend            // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = hostmem.WCRDMAWrite       // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = hostmem.WCRDMARead        // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = hostmem.WCCompSwap        // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = hostmem.WCFetchAdd        // IBV_WC_FETCH_ADD
	WCRecv            WCOpcode = hostmem.WCRecv            // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = hostmem.WCRecvRDMAWithImm // IBV_WC_RECV_RDMA_WITH_IMM
)

// WROpcode is a send work request's operation (enum ibv_wr_opcode).
type WROpcode int

// WR opcodes.
const (
	WRRDMAWrite        WROpcode = hostmem.WRRDMAWrite        // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm WROpcode = hostmem.WRRDMAWriteWithImm // IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend             WROpcode = hostmem.WRSend             // IBV_WR_SEND
	WRSendWithImm      WROpcode = hostmem.WRSendWithImm      // IBV_WR_SEND_WITH_IMM
	WRRDMARead         WROpcode = hostmem.WRRDMARead         // IBV_WR_RDMA_READ
	WRAtomicCmpAndSwp  WROpcode = hostmem.WRAtomicCmpAndSwp  // IBV_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAdd   WROpcode = hostmem.WRAtomicFetchAdd   // IBV_WR_ATOMIC_FETCH_AND_ADD
	WRSendWithInv      WROpcode = hostmem.WRSendWithInv      // IBV_WR_SEND_WITH_INV
)

// Access is a set of memory access flags (enum ibv_access_flags).
type Access int

// Access flags.
const (
	AccessLocalWrite   Access = hostmem.AccessLocalWrite   // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  Access = hostmem.AccessRemoteWrite  // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   Access = hostmem.AccessRemoteRead   // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic Access = hostmem.AccessRemoteAtomic // IBV_ACCESS_REMOTE_ATOMIC
)

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags int

// Send flags.
const (
	SendFence     SendFlags = hostmem.SendFence     // IBV_SEND_FENCE
	SendSignaled  SendFlags = hostmem.SendSignaled  // IBV_SEND_SIGNALED
	SendSolicited SendFlags = hostmem.SendSolicited // IBV_SEND_SOLICITED
	SendInline    SendFlags = hostmem.SendInline    // IBV_SEND_INLINE
)

// WCFlags describe a work completion (enum ibv_wc_flags).
type WCFlags int

// WC flags.
const (
	WCWithGRH WCFlags = hostmem.WCWithGRH // IBV_WC_GRH
	WCWithImm WCFlags = hostmem.WCWithImm // IBV_WC_WITH_IMM
	WCWithInv WCFlags = hostmem.WCWithInv // IBV_WC_WITH_INV
	// WCSolicited is softrnic's own: the sender asked for a solicited
	// event (IBV_SEND_SOLICITED, the BTH's SE bit); libibverbs reports it
	// only as the event ibv_req_notify_cq(cq, 1) waits for.
	WCSolicited WCFlags = hostmem.WCSolicited
)

// AttrMask says which QPAttr fields a Modify sets (enum ibv_qp_attr_mask).
type AttrMask int

// Attribute masks.
const (
	AttrState            AttrMask = 1 << 0  // IBV_QP_STATE
	AttrCurState         AttrMask = 1 << 1  // IBV_QP_CUR_STATE
	AttrEnSQDAsyncNotify AttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	AttrAccessFlags      AttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS
	AttrPKeyIndex        AttrMask = 1 << 4  // IBV_QP_PKEY_INDEX
	AttrPort             AttrMask = 1 << 5  // IBV_QP_PORT
	AttrQKey             AttrMask = 1 << 6  // IBV_QP_QKEY
	AttrAV               AttrMask = 1 << 7  // IBV_QP_AV
	AttrPathMTU          AttrMask = 1 << 8  // IBV_QP_PATH_MTU
	AttrTimeout          AttrMask = 1 << 9  // IBV_QP_TIMEOUT
	AttrRetryCnt         AttrMask = 1 << 10 // IBV_QP_RETRY_CNT
	AttrRNRRetry         AttrMask = 1 << 11 // IBV_QP_RNR_RETRY
	AttrRQPSN            AttrMask = 1 << 12 // IBV_QP_RQ_PSN
	AttrMaxQPRdAtomic    AttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC
	AttrAltPath          AttrMask = 1 << 14 // IBV_QP_ALT_PATH
	AttrMinRNRTimer      AttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	AttrSQPSN            AttrMask = 1 << 16 // IBV_QP_SQ_PSN
	AttrMaxDestRdAtomic  AttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
	AttrPathMigState     AttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE
	AttrCap              AttrMask = 1 << 19 // IBV_QP_CAP
	AttrDestQPN          AttrMask = 1 << 20 // IBV_QP_DEST_QPN

	// AttrSelectiveRepeat is softrnic's own: QPAttr.SelectiveRepeat, on
	// an RC QP's INIT->RTR transition.
	AttrSelectiveRepeat AttrMask = 1 << 30
)
