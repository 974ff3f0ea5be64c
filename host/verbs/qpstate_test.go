package verbs

import (
	"errors"
	"testing"
)

func TestCheckModify(t *testing.T) {
	const (
		initRC = AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags
		initUD = AttrState | AttrPKeyIndex | AttrPort | AttrQKey
		rtrRC  = AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
		rtrUC  = AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
		rtsRC  = AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic
	)
	tests := []struct {
		name      string
		t         QPType
		cur, next QPState
		mask      AttrMask
		want      error
	}{
		{"RC reset->init", QPTRC, QPSReset, QPSInit, initRC, nil},
		{"RC reset->init without access flags", QPTRC, QPSReset, QPSInit, initRC &^ AttrAccessFlags, ErrMissingAttr},
		{"UD reset->init", QPTUD, QPSReset, QPSInit, initUD, nil},
		{"UD reset->init with access flags", QPTUD, QPSReset, QPSInit, initUD | AttrAccessFlags, ErrInvalidAttr},
		{"RC init->rtr", QPTRC, QPSInit, QPSRTR, rtrRC, nil},
		{"RC init->rtr without min_rnr_timer", QPTRC, QPSInit, QPSRTR, rtrRC &^ AttrMinRNRTimer, ErrMissingAttr},
		{"UC init->rtr", QPTUC, QPSInit, QPSRTR, rtrUC, nil},
		{"UC init->rtr with max_dest_rd_atomic", QPTUC, QPSInit, QPSRTR, rtrUC | AttrMaxDestRdAtomic, ErrInvalidAttr},
		{"UD init->rtr", QPTUD, QPSInit, QPSRTR, AttrState, nil},
		{"RC rtr->rts", QPTRC, QPSRTR, QPSRTS, rtsRC, nil},
		{"RC rtr->rts without timeout", QPTRC, QPSRTR, QPSRTS, rtsRC &^ AttrTimeout, ErrMissingAttr},
		{"UD rtr->rts", QPTUD, QPSRTR, QPSRTS, AttrState | AttrSQPSN, nil},
		{"reset->rtr", QPTRC, QPSReset, QPSRTR, rtrRC, ErrInvalidTransition},
		{"init->rts", QPTRC, QPSInit, QPSRTS, rtsRC, ErrInvalidTransition},
		{"rts->init", QPTRC, QPSRTS, QPSInit, initRC, ErrInvalidTransition},
		{"anything->err", QPTRC, QPSRTR, QPSErr, AttrState, nil},
		{"anything->reset", QPTUD, QPSRTS, QPSReset, AttrState, nil},
		{"err->rts", QPTRC, QPSErr, QPSRTS, rtsRC, ErrInvalidTransition},
		{"rts->sqd->rts", QPTRC, QPSSQD, QPSRTS, AttrState, nil},
		{"UC sqe->rts", QPTUC, QPSSQE, QPSRTS, AttrState, nil},
		{"RC sqe->rts", QPTRC, QPSSQE, QPSRTS, AttrState, ErrInvalidTransition},
		{"attributes only in RTS", QPTRC, QPSRTS, QPSRTS, AttrMinRNRTimer, nil},
		{"attributes only, not allowed", QPTRC, QPSRTS, QPSRTS, AttrDestQPN, ErrInvalidAttr},
	}
	for _, tt := range tests {
		if err := CheckModify(tt.t, tt.cur, tt.next, tt.mask, tt.cur); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if err := CheckModify(QPTRC, QPSInit, QPSRTR, AttrState|AttrCurState|rtrRC, QPSReset); !errors.Is(err, ErrCurStateMismatch) {
		t.Errorf("cur_qp_state mismatch: %v", err)
	}
}

func TestNames(t *testing.T) {
	if QPSRTS.String() != "RTS" || WCRemAccessErr.String() != "remote access error" || WCWRFlushErr != 5 || WCRemAccessErr != 10 {
		t.Error("names or numbers differ from libibverbs")
	}
	if got := (AttrState | AttrSQPSN).String(); got != "STATE|SQ_PSN" {
		t.Errorf("mask string %q", got)
	}
}
