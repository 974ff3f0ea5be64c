package verbs

import (
	"errors"
	"fmt"
)

// Control-path errors, usable with errors.Is.
var (
	ErrInvalidTransition = errors.New("verbs: invalid QP state transition")
	ErrMissingAttr       = errors.New("verbs: required QP attribute missing")
	ErrInvalidAttr       = errors.New("verbs: QP attribute not allowed in this transition")
	ErrCurStateMismatch  = errors.New("verbs: cur_qp_state does not match the QP's state")
)

// transition lists the attributes one state change requires and allows,
// per transport (index: RC, UC, UD), as the IBTA (and the Linux kernel's
// ib_modify_qp_is_ok) define them.
type transition struct {
	req, opt [3]AttrMask
}

func typeIndex(t QPType) int {
	switch t {
	case QPTRC:
		return 0
	case QPTUC:
		return 1
	}
	return 2
}

// Attribute sets used by several transitions.
const (
	pathRC = AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic | AttrMaxDestRdAtomic |
		AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrMinRNRTimer | AttrPathMigState
)

var transitions = func() (t [7][7]*transition) {
	all := func(m AttrMask) [3]AttrMask { return [3]AttrMask{m, m, m} }
	for s := range t {
		t[s][QPSReset] = &transition{}
		t[s][QPSErr] = &transition{}
	}
	t[QPSReset][QPSInit] = &transition{
		req: [3]AttrMask{AttrPKeyIndex | AttrPort | AttrAccessFlags, AttrPKeyIndex | AttrPort | AttrAccessFlags, AttrPKeyIndex | AttrPort | AttrQKey},
	}
	t[QPSInit][QPSInit] = &transition{
		opt: [3]AttrMask{AttrPKeyIndex | AttrPort | AttrAccessFlags, AttrPKeyIndex | AttrPort | AttrAccessFlags, AttrPKeyIndex | AttrPort | AttrQKey},
	}
	t[QPSInit][QPSRTR] = &transition{
		req: [3]AttrMask{
			AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
			0,
		},
		opt: [3]AttrMask{AttrAltPath | AttrAccessFlags | AttrPKeyIndex, AttrAltPath | AttrAccessFlags | AttrPKeyIndex, AttrPKeyIndex | AttrQKey},
	}
	t[QPSRTR][QPSRTS] = &transition{
		req: [3]AttrMask{AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic, AttrSQPSN, AttrSQPSN},
		opt: [3]AttrMask{
			AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState,
			AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState,
			AttrCurState | AttrQKey,
		},
	}
	rtsOpt := [3]AttrMask{
		AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer,
		AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState,
		AttrCurState | AttrQKey,
	}
	t[QPSRTS][QPSRTS] = &transition{opt: rtsOpt}
	t[QPSRTS][QPSSQD] = &transition{opt: all(AttrEnSQDAsyncNotify)}
	t[QPSSQD][QPSRTS] = &transition{opt: rtsOpt}
	t[QPSSQD][QPSSQD] = &transition{opt: [3]AttrMask{
		pathRC,
		AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState,
		AttrPKeyIndex | AttrQKey,
	}}
	t[QPSSQE][QPSRTS] = &transition{opt: [3]AttrMask{0, AttrCurState | AttrAccessFlags, AttrCurState | AttrQKey}}
	return t
}()

// CheckModify reports whether a QP of type t in state cur may move to next
// with the attributes in mask. Without AttrState the QP stays in cur and
// only attributes change.
func CheckModify(t QPType, cur, next QPState, mask AttrMask, curAttr QPState) error {
	if mask&AttrState == 0 {
		next = cur
	}
	if mask&AttrCurState != 0 && curAttr != cur {
		return fmt.Errorf("%w: QP is %v, attribute says %v", ErrCurStateMismatch, cur, curAttr)
	}
	if cur < 0 || int(cur) >= len(transitions) || next < 0 || int(next) >= len(transitions) || transitions[cur][next] == nil {
		return fmt.Errorf("%w: %v QP from %v to %v", ErrInvalidTransition, t, cur, next)
	}
	if t == QPTRC && cur == QPSSQE && next == QPSRTS {
		return fmt.Errorf("%w: an RC QP leaves SQE only through RESET or ERR", ErrInvalidTransition)
	}
	tr := transitions[cur][next]
	i := typeIndex(t)
	given := mask &^ (AttrState | AttrCurState)
	if given&AttrSelectiveRepeat != 0 {
		if t != QPTRC || cur != QPSInit || next != QPSRTR {
			return fmt.Errorf("%w: selective repeat is set on an RC QP's INIT->RTR, not a %v QP's %v->%v", ErrInvalidAttr, t, cur, next)
		}
		given &^= AttrSelectiveRepeat
	}
	if given&AttrPeerRNRRetry != 0 {
		if t != QPTRC || cur != QPSRTR || next != QPSRTS {
			return fmt.Errorf("%w: the peer's RNR retry count is set on an RC QP's RTR->RTS, not a %v QP's %v->%v", ErrInvalidAttr, t, cur, next)
		}
		given &^= AttrPeerRNRRetry
	}
	if given&AttrIdleProbe != 0 {
		if t != QPTRC || cur != QPSRTR || next != QPSRTS {
			return fmt.Errorf("%w: the idle probe is set on an RC QP's RTR->RTS, not a %v QP's %v->%v", ErrInvalidAttr, t, cur, next)
		}
		given &^= AttrIdleProbe
	}
	if missing := tr.req[i] &^ given; missing != 0 {
		return fmt.Errorf("%w: %v QP %v->%v needs %v", ErrMissingAttr, t, cur, next, missing)
	}
	allowed := tr.req[i] | tr.opt[i]
	if next == QPSReset || next == QPSErr {
		allowed = ^AttrMask(0) // the kernel ignores other attributes there
	}
	if extra := given &^ allowed; extra != 0 {
		return fmt.Errorf("%w: %v QP %v->%v does not take %v", ErrInvalidAttr, t, cur, next, extra)
	}
	return nil
}
