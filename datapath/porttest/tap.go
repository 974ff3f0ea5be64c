package porttest

import (
	"sync"
	"time"

	"github.com/softrnic/softrnic/datapath"
)

// Tap wraps a port for tests that play an attacker on the path: it shows
// the test every frame the wrapped port receives and sends (Watch), and
// slips frames the test forges in among the received ones (Inject), as an
// off-path host that guesses the addresses would.
type Tap struct {
	datapath.Port
	watch func(frame []byte, received bool)

	mu       sync.Mutex
	pool     *datapath.Pool // the injected frames' buffers
	queued   []uint32       // injected frames waiting for Recv, oldest first
	queuedN  []int          // their lengths
	injected uint64
	dropped  uint64
}

// tapped marks the Handle of a frame Tap injected.
const tapped = 1 << 63

// NewTap wraps p. watch, if not nil, is called with every frame p
// receives (received true) or is given to send, before the NIC sees or
// after it built it; it must not keep the slice.
func NewTap(p datapath.Port, buffers int, watch func(frame []byte, received bool)) *Tap {
	return &Tap{Port: p, watch: watch, pool: datapath.NewPool(buffers, p.MaxFrameLen())}
}

// Inject queues a copy of frame to be received before whatever the
// wrapped port receives next. Without a free buffer, or for a frame
// longer than the port's, it is dropped; it reports whether it was queued.
func (t *Tap) Inject(frame []byte) bool {
	t.mu.Lock()
	h, ok := t.pool.Take()
	if !ok || len(frame) > t.MaxFrameLen() {
		if ok {
			t.pool.Return(h)
		}
		t.dropped++
		t.mu.Unlock()
		return false
	}
	copy(t.pool.Buf(h), frame)
	t.queued = append(t.queued, h)
	t.queuedN = append(t.queuedN, len(frame))
	t.injected++
	t.mu.Unlock()
	t.Port.Wake()
	return true
}

// Injected counts the frames queued by Inject, and Dropped those it could
// not queue.
func (t *Tap) Injected() (injected, dropped uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.injected, t.dropped
}

// Recv implements datapath.Port: injected frames first, then the wrapped
// port's.
func (t *Tap) Recv(frames []datapath.Frame) (int, error) {
	t.mu.Lock()
	n := 0
	for n < len(t.queued) && n < len(frames) {
		h := t.queued[n]
		frames[n] = datapath.Frame{Data: t.pool.Buf(h)[:t.queuedN[n]], Handle: uint64(h) | tapped}
		n++
	}
	t.queued = t.queued[:copy(t.queued, t.queued[n:])]
	t.queuedN = t.queuedN[:copy(t.queuedN, t.queuedN[n:])]
	t.mu.Unlock()
	k, err := t.Port.Recv(frames[n:])
	if t.watch != nil {
		for _, f := range frames[n : n+k] {
			t.watch(f.Data, true)
		}
	}
	return n + k, err
}

// Release implements datapath.Port.
func (t *Tap) Release(frames []datapath.Frame) {
	own := 0
	for i := range frames {
		if frames[i].Handle&tapped != 0 {
			frames[i].Handle &^= tapped
			frames[own], frames[i] = frames[i], frames[own]
			own++
		}
	}
	if own > 0 {
		t.mu.Lock()
		t.pool.Put(frames[:own])
		t.mu.Unlock()
	}
	t.Port.Release(frames[own:])
}

// Send implements datapath.Port.
func (t *Tap) Send(frames []datapath.Frame) (int, error) {
	if t.watch != nil {
		for _, f := range frames {
			t.watch(f.Data, false)
		}
	}
	return t.Port.Send(frames)
}

// Wait implements datapath.Port: it returns at once while injected frames
// wait.
func (t *Tap) Wait(timeout time.Duration) error {
	t.mu.Lock()
	pending := len(t.queued) > 0
	t.mu.Unlock()
	if pending {
		return nil
	}
	return t.Port.Wait(timeout)
}
