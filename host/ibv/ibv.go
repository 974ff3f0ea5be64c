// Package ibv holds libibverbs' numbers, typed, in one place: QP types
// and states, work request opcodes and send flags, work completion
// opcodes, statuses and flags, access flags and QP attribute masks, with
// libibverbs' names and values (infiniband/verbs.h) and their names as
// text. It imports nothing of softrnic's: the host-memory formats
// (hostmem), the NIC (datapath), the reliability state machines and the
// verbs API all use these types.
package ibv

import (
	"fmt"
	"strings"
)

// QPType is a transport service (enum ibv_qp_type).
type QPType uint8

// QP types.
const (
	QPTRC QPType = 2 // IBV_QPT_RC
	QPTUC QPType = 3 // IBV_QPT_UC
	QPTUD QPType = 4 // IBV_QPT_UD
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
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is a queue pair state (enum ibv_qp_state).
type QPState uint8

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
	if int(s) >= len(qpStateNames) {
		return fmt.Sprintf("QPState(%d)", uint8(s))
	}
	return qpStateNames[s]
}

// WROpcode is a send work request's operation (enum ibv_wr_opcode).
type WROpcode uint8

// WR opcodes.
const (
	WRRDMAWrite        WROpcode = 0 // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm WROpcode = 1 // IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend             WROpcode = 2 // IBV_WR_SEND
	WRSendWithImm      WROpcode = 3 // IBV_WR_SEND_WITH_IMM
	WRRDMARead         WROpcode = 4 // IBV_WR_RDMA_READ
	WRAtomicCmpAndSwp  WROpcode = 5 // IBV_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAdd   WROpcode = 6 // IBV_WR_ATOMIC_FETCH_AND_ADD
	WRSendWithInv      WROpcode = 9 // IBV_WR_SEND_WITH_INV
)

var wrOpcodeNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND", WRSendWithImm: "SEND_WITH_IMM",
	WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP", WRAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", WRSendWithInv: "SEND_WITH_INV",
}

// String returns the opcode's name as libibverbs' IBV_WR_ constant has it.
func (o WROpcode) String() string {
	if s, ok := wrOpcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint8

// Send flags.
const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE
)

func (f SendFlags) String() string {
	return flagNames(uint64(f), []string{"FENCE", "SIGNALED", "SOLICITED", "INLINE"}, "SendFlags")
}

// WCOpcode is the operation a work completion reports (enum ibv_wc_opcode).
type WCOpcode uint8

// WC opcodes.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

var wcOpcodeNames = map[WCOpcode]string{
	WCSend: "SEND", WCRDMAWrite: "RDMA_WRITE", WCRDMARead: "RDMA_READ", WCCompSwap: "COMP_SWAP", WCFetchAdd: "FETCH_ADD",
	WCRecv: "RECV", WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM",
}

// String returns the opcode's name as libibverbs' IBV_WC_ constant has it.
func (o WCOpcode) String() string {
	if s, ok := wcOpcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCStatus is a work completion status (enum ibv_wc_status).
type WCStatus uint8

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
	if int(s) >= len(wcStatusNames) {
		return "unknown"
	}
	return wcStatusNames[s]
}

// Error makes a status an error, as syscall.Errno is one, so that
// errors.Is(err, ibv.WCRemAccessErr) matches a failed completion's error
// (verbs.WC.Err).
func (s WCStatus) Error() string { return s.String() }

// WCFlags describe a work completion (enum ibv_wc_flags).
type WCFlags uint8

// WC flags.
const (
	WCWithGRH WCFlags = 1 << 0 // IBV_WC_GRH
	WCWithImm WCFlags = 1 << 1 // IBV_WC_WITH_IMM
	WCWithInv WCFlags = 1 << 3 // IBV_WC_WITH_INV
	// WCSolicited is softrnic's own: the sender asked for a solicited
	// event (IBV_SEND_SOLICITED, the BTH's SE bit); libibverbs reports it
	// only as the event ibv_req_notify_cq(cq, 1) waits for.
	WCSolicited WCFlags = 1 << 7
)

func (f WCFlags) String() string {
	return flagNames(uint64(f), []string{"GRH", "WITH_IMM", "IP_CSUM_OK", "WITH_INV", "TM_SYNC_REQ", "TM_MATCH", "TM_DATA_VALID", "SOLICITED"}, "WCFlags")
}

// Access is a set of memory access flags (enum ibv_access_flags).
type Access uint16

// Access flags.
const (
	AccessLocalWrite   Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
)

func (a Access) String() string {
	return flagNames(uint64(a), []string{"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC"}, "Access")
}

// AttrMask says which QP attributes a modify sets (enum ibv_qp_attr_mask).
type AttrMask uint32

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

	// AttrIdleProbe is softrnic's own: the idle probe of a go-back-N
	// responder (the expected PSN NAKed while a receive waits and the
	// peer is quiet), on an RC QP's RTR->RTS transition.
	AttrIdleProbe AttrMask = 1 << 28
	// AttrPeerRNRRetry is softrnic's own: the RNR retry count the peer's
	// QP has, where this side knows it (its connection manager sent it),
	// on an RC QP's RTR->RTS transition.
	AttrPeerRNRRetry AttrMask = 1 << 29
	// AttrSelectiveRepeat is softrnic's own: selective repeat, on an RC
	// QP's INIT->RTR transition.
	AttrSelectiveRepeat AttrMask = 1 << 30
)

var attrNames = []string{
	"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY", "AV",
	"PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH",
	"MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN",
}

// String names the attributes as IBV_QP_ constants do, joined by |.
func (m AttrMask) String() string {
	var names []string
	for i, n := range attrNames {
		if m&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if m&AttrIdleProbe != 0 {
		names = append(names, "IDLE_PROBE")
	}
	if m&AttrPeerRNRRetry != 0 {
		names = append(names, "PEER_RNR_RETRY")
	}
	if m&AttrSelectiveRepeat != 0 {
		names = append(names, "SELECTIVE_REPEAT")
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// flagNames writes a set of flags as NAME|NAME, bits it has no name for
// as a number.
func flagNames(v uint64, names []string, typ string) string {
	if v == 0 {
		return "0"
	}
	var parts []string
	for i, n := range names {
		if v&(1<<i) != 0 && n != "" {
			parts = append(parts, n)
			v &^= 1 << i
		}
	}
	if v != 0 {
		parts = append(parts, fmt.Sprintf("%s(%#x)", typ, v))
	}
	return strings.Join(parts, "|")
}
