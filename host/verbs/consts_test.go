package verbs

import (
	"testing"

	"github.com/softrnic/softrnic/host"
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
		{"WC_SUCCESS", host.WCSuccess, int(WCSuccess)},
		{"WC_LOC_LEN_ERR", host.WCLocLenErr, int(WCLocLenErr)},
		{"WC_LOC_QP_OP_ERR", host.WCLocQPOpErr, int(WCLocQPOpErr)},
		{"WC_LOC_PROT_ERR", host.WCLocProtErr, int(WCLocProtErr)},
		{"WC_WR_FLUSH_ERR", host.WCWRFlushErr, int(WCWRFlushErr)},
		{"WC_REM_INV_REQ_ERR", host.WCRemInvReqErr, int(WCRemInvReqErr)},
		{"WC_REM_ACCESS_ERR", host.WCRemAccessErr, int(WCRemAccessErr)},
		{"WC_REM_OP_ERR", host.WCRemOpErr, int(WCRemOpErr)},
		{"WC_RETRY_EXC_ERR", host.WCRetryExcErr, int(WCRetryExcErr)},
		{"WC_RNR_RETRY_EXC_ERR", host.WCRNRRetryExcErr, int(WCRNRRetryExcErr)},
		{"reliability success", reliability.StatusSuccess, int(WCSuccess)},
		{"reliability REM_INV_REQ_ERR", reliability.StatusRemInvReqErr, int(WCRemInvReqErr)},
		{"reliability REM_ACCESS_ERR", reliability.StatusRemAccessErr, int(WCRemAccessErr)},
		{"reliability REM_OP_ERR", reliability.StatusRemOpErr, int(WCRemOpErr)},
		{"reliability RETRY_EXC_ERR", reliability.StatusRetryExcErr, int(WCRetryExcErr)},
		{"reliability RNR_RETRY_EXC_ERR", reliability.StatusRNRRetryExcErr, int(WCRNRRetryExcErr)},
		{"QPS_RESET", host.QPSReset, int(QPSReset)},
		{"QPS_INIT", host.QPSInit, int(QPSInit)},
		{"QPS_RTR", host.QPSRTR, int(QPSRTR)},
		{"QPS_RTS", host.QPSRTS, int(QPSRTS)},
		{"QPS_SQD", host.QPSSQD, int(QPSSQD)},
		{"QPS_SQE", host.QPSSQE, int(QPSSQE)},
		{"QPS_ERR", host.QPSErr, int(QPSErr)},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, libibverbs %d", c.name, c.got, c.want)
		}
	}
}
