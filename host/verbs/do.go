package verbs

import (
	"context"
	"errors"
	"fmt"
)

// WCError is a failed completion as an error: errors.Is(err, status)
// matches its status (errors.Is(err, WCRemAccessErr)), errors.As finds
// the whole completion.
type WCError struct {
	WC WC
}

func (e *WCError) Error() string {
	return fmt.Sprintf("verbs: work request %d (%v) failed: %v", e.WC.WRID, e.WC.Opcode, e.WC.Status)
}

// Is reports whether target is the completion's status.
func (e *WCError) Is(target error) bool {
	s, ok := target.(WCStatus)
	return ok && s == e.WC.Status
}

// Err returns nil for a successful completion, else a *WCError.
func (wc WC) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &WCError{WC: wc}
}

// SGL returns one scatter/gather element over the whole region: what a
// work request on all of it names.
func (mr *MR) SGL() []SGE {
	return []SGE{{Addr: mr.Addr, Length: uint32(len(mr.Buf)), LKey: mr.LKey}}
}

// ErrOtherCompletion is returned by Do when its QP's send CQ brought the
// completion of another work request: Do is for a CQ it has to itself.
var ErrOtherCompletion = errors.New("verbs: another work request completed on the send CQ")

// Do posts one work request, signaled, and waits for its completion on
// the QP's send CQ: the synchronous way to WRITE, READ or SEND once, for a
// QP whose send CQ has no other work outstanding. It returns the
// completion, and its error for a failed one (a *WCError), or ctx's.
func (qp *QP) Do(ctx context.Context, wr SendWR) (WC, error) {
	wr.Flags |= SendSignaled
	if _, err := qp.PostSend([]SendWR{wr}); err != nil {
		return WC{}, err
	}
	var wc [1]WC
	for {
		if qp.sendCQ.Poll(wc[:]) == 1 {
			if wc[0].WRID != wr.WRID || wc[0].QPNum != qp.Num {
				return wc[0], fmt.Errorf("%w: WR %d of QP %d, waiting for WR %d", ErrOtherCompletion, wc[0].WRID, wc[0].QPNum, wr.WRID)
			}
			return wc[0], wc[0].Err()
		}
		if err := qp.sendCQ.Wait(ctx); err != nil {
			return WC{}, err
		}
	}
}
