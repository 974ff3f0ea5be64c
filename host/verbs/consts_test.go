package verbs

import (
	"testing"

	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/reliability"
)

// TestSharedNumbers: the libibverbs numbers the NIC writes (host's, and
// the statuses package reliability decides) are the ones this package
// names: one enum, not copies that could drift.
func TestSharedNumbers(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"WC_SUCCESS", hostmem.WCSuccess, int(WCSuccess)},
		{"WC_LOC_LEN_ERR", hostmem.WCLocLenErr, int(WCLocLenErr)},
		{"WC_LOC_QP_OP_ERR", hostmem.WCLocQPOpErr, int(WCLocQPOpErr)},
		{"WC_LOC_PROT_ERR", hostmem.WCLocProtErr, int(WCLocProtErr)},
		{"WC_WR_FLUSH_ERR", hostmem.WCWRFlushErr, int(WCWRFlushErr)},
		{"WC_REM_INV_REQ_ERR", hostmem.WCRemInvReqErr, int(WCRemInvReqErr)},
		{"WC_REM_ACCESS_ERR", hostmem.WCRemAccessErr, int(WCRemAccessErr)},
		{"WC_REM_OP_ERR", hostmem.WCRemOpErr, int(WCRemOpErr)},
		{"WC_RETRY_EXC_ERR", hostmem.WCRetryExcErr, int(WCRetryExcErr)},
		{"WC_RNR_RETRY_EXC_ERR", hostmem.WCRNRRetryExcErr, int(WCRNRRetryExcErr)},
		{"reliability success", reliability.StatusSuccess, int(WCSuccess)},
		{"reliability REM_INV_REQ_ERR", reliability.StatusRemInvReqErr, int(WCRemInvReqErr)},
		{"reliability REM_ACCESS_ERR", reliability.StatusRemAccessErr, int(WCRemAccessErr)},
		{"reliability REM_OP_ERR", reliability.StatusRemOpErr, int(WCRemOpErr)},
		{"reliability RETRY_EXC_ERR", reliability.StatusRetryExcErr, int(WCRetryExcErr)},
		{"reliability RNR_RETRY_EXC_ERR", reliability.StatusRNRRetryExcErr, int(WCRNRRetryExcErr)},
		{"QPS_RESET", hostmem.QPSReset, int(QPSReset)},
		{"QPS_INIT", hostmem.QPSInit, int(QPSInit)},
		{"QPS_RTR", hostmem.QPSRTR, int(QPSRTR)},
		{"QPS_RTS", hostmem.QPSRTS, int(QPSRTS)},
		{"QPS_SQD", hostmem.QPSSQD, int(QPSSQD)},
		{"QPS_SQE", hostmem.QPSSQE, int(QPSSQE)},
		{"QPS_ERR", hostmem.QPSErr, int(QPSErr)},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, libibverbs %d", c.name, c.got, c.want)
		}
	}
}
