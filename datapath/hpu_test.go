package datapath

import (
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/hpu"
)

// While a QP's first message waits for its handlers, the responder
// acknowledges nothing: not the message, and not the PSN before it,
// which was never sent. The ACK goes when the handlers are done.
func TestNoACKBeforeTheFirstPSN(t *testing.T) {
	rt := newRespTest(t)
	release := make(chan struct{})
	done := make(chan struct{}, 1)
	ctx := hpu.Context{Name: "hold", MemorySize: 64,
		Payload:    func(*hpu.Task) hpu.Action { return hpu.Success },
		Completion: func(*hpu.Task) hpu.Action { <-release; return hpu.Success },
		Done:       func(*hpu.Message, error) { done <- struct{}{} }}
	if _, err := rt.nic.AttachHPU(respQP, ctx, Match{Ops: MatchSend}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.nic.hpu.Load().engine.Close() })
	const first = 1026
	q := rt.q
	q.RQPSN = first
	rt.rcQPAt(respQP, q)
	rt.request(wire.FrameFields{BTH: bth(wire.RCSendOnly, first), Payload: []byte("held")})
	rt.settle()
	for _, r := range rt.replies() {
		t.Errorf("while the first message waits for its handlers the NIC sent %+v", r)
	}
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the handlers never finished")
	}
	var got []reply
	for deadline := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
		rt.settle()
		got = rt.replies()
		time.Sleep(time.Millisecond)
	}
	if len(got) != 1 || got[0].op != wire.RCAcknowledge || got[0].psn != first || got[0].nak {
		t.Errorf("after the handlers: %+v, want one ACK of PSN %d", got, first)
	}
}
