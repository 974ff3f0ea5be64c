// Package porttest is an in-memory datapath.Port pair for tests: what one
// port sends the other receives, through a link that can lose, duplicate,
// reorder and corrupt frames, reproducibly from a seed.
package porttest

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/wire"
)

// Config sets the ports' buffers and the link's faults. Probabilities are
// per frame, in [0, 1].
type Config struct {
	Buffers     int // buffers per port (RX and TX share them); default 1024
	MaxFrameLen int // default 9216
	Loss        float64
	Duplicate   float64
	Reorder     float64 // hold a frame back and deliver it after the next one
	Corrupt     float64 // flip one random byte after the Ethernet header
	Seed        uint64
	// Delay is added to every frame's one-way trip: a frame is received
	// no sooner than Delay after it was sent (and after the link has
	// serialized it, with Rate).
	Delay time.Duration
	// Rate, in bits per second, is the link's speed in each direction: a
	// frame leaves after the ones queued before it, at this rate. 0 is
	// as fast as the sender.
	Rate float64
	// QueueBytes bounds the bytes waiting for the link (with Rate): a frame
	// that does not fit is dropped, as a shallow switch buffer drops it.
	// 0 is no bound.
	QueueBytes int
	// MarkBytes, with Rate, marks ECN Congestion Experienced on an
	// ECN-capable frame that finds more than this many bytes queued, as an
	// ECN switch does (0: never), instead of letting the queue overflow.
	MarkBytes int
	// ExtraDelay, if set, adds its answer to the one-way delay of each
	// frame (before the link's queue): a far or slow peer for some flows.
	// It must not keep the frame.
	ExtraDelay func(frame []byte) time.Duration
	// Drop, if set, loses each frame for which it returns true: a chosen
	// loss, beside the random one. It must not keep the frame.
	Drop func(frame []byte) bool
}

// LinkStats count what the link did to frames in one direction.
type LinkStats struct {
	Delivered, Lost, Duplicated, Reordered, Corrupted atomic.Uint64
	QueueDropped                                      atomic.Uint64 // frames the link's queue (QueueBytes) had no room for
	Marked                                            atomic.Uint64 // frames marked Congestion Experienced (MarkBytes)
	// QueueDelay is the time each frame the queue took waited in it
	// (with Rate): a histogram, read with Quantile.
	QueueDelay DelayHistogram
}

// DelayHistogram counts durations in buckets of a quarter of a power of
// two (within 19 % of the value), from 1 ns to hours; safe for one writer
// and any readers.
type DelayHistogram struct {
	buckets [64 * 4]atomic.Uint64
}

// bucketOf is the bucket of d nanoseconds: its power of two and the two
// bits after the leading one.
func bucketOf(d int64) int {
	if d < 4 {
		return int(max(d, 0))
	}
	n := bits.Len64(uint64(d)) - 1
	return n*4 + int(uint64(d)>>(n-2)&3)
}

// Add counts one duration.
func (h *DelayHistogram) Add(d time.Duration) { h.buckets[bucketOf(int64(d))].Add(1) }

// Count is how many durations were counted.
func (h *DelayHistogram) Count() uint64 {
	var n uint64
	for i := range h.buckets {
		n += h.buckets[i].Load()
	}
	return n
}

// Quantile is the q-quantile (0 < q <= 1) of the durations counted, as
// its bucket's upper bound; 0 with none.
func (h *DelayHistogram) Quantile(q float64) time.Duration {
	total := h.Count()
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var n uint64
	for i := range h.buckets {
		if n += h.buckets[i].Load(); n >= max(want, 1) {
			if i < 4 {
				return time.Duration(i)
			}
			p, m := i/4, i%4
			return time.Duration((uint64(4+m+1) << (p - 2)) - 1)
		}
	}
	return 0
}

// Port is one end of an in-memory pair.
type Port struct {
	cfg    Config
	peer   *Port
	notify chan struct{}
	stats  datapath.PortStats
	waitMu sync.Mutex
	timer  *time.Timer
	// efd is an eventfd that Wait polls with a nanosecond timeout when the
	// system has one (-1 otherwise: notify and timer): Go's timers wake a
	// millisecond late on an idle host, which would add a millisecond to
	// every Delay and Rate; sleeping is set while Wait may poll it.
	efd      int
	sleeping atomic.Bool
	// woken is a Wake not yet answered: an engine says it sleeps, looks
	// at its doorbells, then waits on the port; a doorbell rung between
	// its look and its Wait finds the port not yet sleeping, and its Wake
	// must still end that Wait (it slept to its next timer, milliseconds,
	// with a WRITE posted: the incast's link idled 10 ms at its end).
	woken atomic.Bool
	// Link counts the faults applied to frames this port sent.
	Link LinkStats
	rng  *rand.Rand // faults on frames this port sends; used by Send only
	busy time.Time  // when the link in the send direction is free (Rate); used by Send only

	mu     sync.Mutex     // guards the fields below
	pool   *datapath.Pool // every buffer, RX and TX
	rxq    []uint32       // handles of received frames, oldest first
	rxlen  []int          // their lengths
	rxAt   []int64        // when each may be received (mono), with Delay or Rate
	held   int            // handle held back for reordering, or -1
	heldN  int
	closed bool
}

// NewPair returns two connected ports.
func NewPair(cfg Config) (*Port, *Port) {
	if cfg.Buffers == 0 {
		cfg.Buffers = 1024
	}
	if cfg.MaxFrameLen == 0 {
		cfg.MaxFrameLen = 9216
	}
	a, b := newPort(cfg, cfg.Seed), newPort(cfg, cfg.Seed^0x9e3779b97f4a7c15)
	a.peer, b.peer = b, a
	return a, b
}

func newPort(cfg Config, seed uint64) *Port {
	p := &Port{
		cfg:    cfg,
		notify: make(chan struct{}, 1),
		rng:    rand.New(rand.NewPCG(seed, seed>>1|1)),
		pool:   datapath.NewPool(cfg.Buffers, cfg.MaxFrameLen),
		rxq:    make([]uint32, 0, cfg.Buffers),
		rxlen:  make([]int, 0, cfg.Buffers),
		rxAt:   make([]int64, 0, cfg.Buffers),
		held:   -1,
		efd:    newEventFD(),
	}
	if p.efd >= 0 {
		runtime.AddCleanup(p, closeEventFD, p.efd)
	}
	return p
}

// signal wakes a Wait.
func (p *Port) signal() {
	if p.efd >= 0 {
		if p.sleeping.Load() {
			wakeEventFD(p.efd)
		}
		return
	}
	select {
	case p.notify <- struct{}{}:
	default: // a wake is already pending
	}
}

var _ datapath.Port = (*Port)(nil)

// Recv implements datapath.Port.
func (p *Port) Recv(frames []datapath.Frame) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, datapath.ErrClosed
	}
	n, kept := 0, 0
	now := int64(0)
	if p.cfg.Delay > 0 || p.cfg.Rate > 0 || p.cfg.ExtraDelay != nil {
		now = mono(time.Now())
	}
	for i := range p.rxq {
		if n == len(frames) || now != 0 && p.rxAt[i] > now {
			// Still on the wire (a frame of a slower path lets the ones
			// behind it pass), or no room: it stays, in order.
			p.rxq[kept], p.rxlen[kept], p.rxAt[kept] = p.rxq[i], p.rxlen[i], p.rxAt[i]
			kept++
			continue
		}
		h, l := p.rxq[i], p.rxlen[i]
		data := p.pool.Buf(h)[:l]
		if err := wire.Classify(data); err != nil {
			p.stats.CountDrop(err)
			p.pool.Return(h)
			continue
		}
		frames[n] = datapath.Frame{Data: data, Handle: uint64(h)}
		p.stats.RxFrames.Add(1)
		p.stats.RxBytes.Add(uint64(l))
		n++
	}
	p.rxq, p.rxlen, p.rxAt = p.rxq[:kept], p.rxlen[:kept], p.rxAt[:kept]
	return n, nil
}

// Release implements datapath.Port.
func (p *Port) Release(frames []datapath.Frame) { p.putBack(frames) }

// Free implements datapath.Port.
func (p *Port) Free(frames []datapath.Frame) { p.putBack(frames) }

func (p *Port) putBack(frames []datapath.Frame) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pool.Put(frames)
}

// Alloc implements datapath.Port.
func (p *Port) Alloc(frames []datapath.Frame) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pool.Get(frames)
}

// Send implements datapath.Port: each frame is copied to the peer through
// the faulty link and its buffer returns to this port at once.
func (p *Port) Send(frames []datapath.Frame) (int, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return 0, datapath.ErrClosed
	}
	var err error
	n := 0
	for ; n < len(frames); n++ {
		f := frames[n].Data
		if len(f) > p.cfg.MaxFrameLen {
			p.stats.TxDropTooLong.Add(1)
			err = fmt.Errorf("porttest: frame of %d bytes exceeds %d", len(f), p.cfg.MaxFrameLen)
			break
		}
		p.stats.TxFrames.Add(1)
		p.stats.TxBytes.Add(uint64(len(f)))
		p.transmit(f)
	}
	p.putBack(frames[:n])
	return n, err
}

// transmit applies the link's faults to one frame. Only the sending
// goroutine touches the random source; only the peer's lock is taken.
// mono is t on the monotonic clock, in nanoseconds from the package's
// start (never 0: 0 is a frame with no time to wait). A wall clock's
// time (UnixNano) moves when the system's clock is set or slewed: a
// frame came 0.4 ms before its Delay had passed.
func mono(t time.Time) int64 { return int64(t.Sub(monoBase)) + 1 }

var monoBase = time.Now()

func (p *Port) transmit(f []byte) {
	r := p.rng
	var at int64
	mark := false
	if p.cfg.Delay > 0 || p.cfg.Rate > 0 || p.cfg.ExtraDelay != nil {
		now := time.Now()
		leave := now
		if p.cfg.Rate > 0 {
			if p.busy.Before(now) {
				p.busy = now
			}
			backlog := float64(p.busy.Sub(now)) * p.cfg.Rate / 8e9
			if q := p.cfg.QueueBytes; q > 0 && backlog+float64(len(f)) > float64(q) {
				p.Link.QueueDropped.Add(1)
				return
			}
			if m := p.cfg.MarkBytes; m > 0 && backlog > float64(m) {
				mark = true
			}
			p.Link.QueueDelay.Add(p.busy.Sub(now))
			p.busy = p.busy.Add(time.Duration(float64(len(f)*8) / p.cfg.Rate * 1e9))
			leave = p.busy
		}
		extra := time.Duration(0)
		if p.cfg.ExtraDelay != nil {
			extra = p.cfg.ExtraDelay(f)
		}
		at = mono(leave.Add(p.cfg.Delay + extra))
	}
	if r.Float64() < p.cfg.Loss || p.cfg.Drop != nil && p.cfg.Drop(f) {
		p.Link.Lost.Add(1)
		return
	}
	corrupt := -1
	if r.Float64() < p.cfg.Corrupt && len(f) > wire.EthernetLen {
		corrupt = wire.EthernetLen + r.IntN(len(f)-wire.EthernetLen)
		p.Link.Corrupted.Add(1)
	}
	copies := 1
	if r.Float64() < p.cfg.Duplicate {
		copies = 2
		p.Link.Duplicated.Add(1)
	}
	reorder := r.Float64() < p.cfg.Reorder
	if reorder {
		p.Link.Reordered.Add(1)
	}
	if mark && markCE(f) {
		p.Link.Marked.Add(1)
	}
	for range copies {
		p.peer.deliver(f, corrupt, reorder, at)
		p.Link.Delivered.Add(1)
		reorder = false
	}
}

// markCE sets an ECN-capable IPv4 or IPv6 frame's ECN field to
// Congestion Experienced (the IPv4 checksum follows; the ICRC masks the
// field). It reports whether the frame was ECN-capable.
func markCE(f []byte) bool {
	var p wire.Packet
	if wire.ParseNoICRC(f, &p) != nil {
		return false
	}
	ip := f[p.IPOff:]
	if p.IPv6 {
		tc := ip[0]<<4 | ip[1]>>4
		if tc&3 == 0 {
			return false
		}
		ip[1] |= 3 << 4
		return true
	}
	h := wire.IPv4(ip[:wire.IPv4MinLen])
	if ip[1]&3 == 0 {
		return false
	}
	ip[1] |= 3
	h.SetChecksum(0)
	h.SetChecksum(h.ComputeChecksum())
	return true
}

// deliver copies a frame into one of the port's buffers, or holds it back
// to deliver after the next frame.
func (p *Port) deliver(f []byte, corrupt int, holdBack bool, at int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	h, ok := p.pool.Take()
	if !ok {
		p.stats.RxDropKernel.Add(1) // like a full ring
		return
	}
	buf := p.pool.Buf(h)
	n := copy(buf, f)
	if corrupt >= 0 {
		buf[corrupt] ^= byte(1 + corrupt%255)
	}
	if holdBack && p.held < 0 {
		p.held, p.heldN = int(h), n
		return
	}
	p.rxq = append(p.rxq, h)
	p.rxlen = append(p.rxlen, n)
	p.rxAt = append(p.rxAt, at)
	if p.held >= 0 {
		p.rxq = append(p.rxq, uint32(p.held))
		p.rxlen = append(p.rxlen, p.heldN)
		p.rxAt = append(p.rxAt, at)
		p.held = -1
	}
	p.signal()
}

// Wait implements datapath.Port.
func (p *Port) Wait(timeout time.Duration) error {
	if p.efd >= 0 {
		p.sleeping.Store(true) // before looking: a frame queued or a Wake after the look signals
		defer p.sleeping.Store(false)
		if p.woken.Swap(false) {
			return nil
		}
	}
	ready, closed, timeout := p.look(timeout)
	if closed {
		return datapath.ErrClosed
	}
	if ready {
		return nil
	}
	if p.efd >= 0 {
		pollEventFD(p.efd, timeout)
		return nil
	}
	p.waitMu.Lock() // one timer, reused: Wait allocates nothing
	defer p.waitMu.Unlock()
	if p.timer == nil {
		p.timer = time.NewTimer(timeout)
	} else {
		p.timer.Reset(timeout)
	}
	select {
	case <-p.notify:
	case <-p.timer.C:
	}
	p.timer.Stop()
	return nil
}

// look reports whether a frame can be received now and whether the port
// is closed, and shortens timeout to when the first frame on the wire
// lands.
func (p *Port) look(timeout time.Duration) (ready, closed bool, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ready, closed = len(p.rxq) > 0, p.closed
	if ready && p.rxAt[0] != 0 {
		first := p.rxAt[0]
		for _, at := range p.rxAt {
			first = min(first, at)
		}
		if w := time.Duration(first - mono(time.Now())); w > 0 {
			ready, timeout = false, min(timeout, w) // on the wire: sleep until the first lands
		}
	}
	return ready, closed, timeout
}

// Wake implements datapath.Port.
func (p *Port) Wake() {
	p.woken.Store(true) // before signal looks at sleeping: Wait looks at woken after saying it sleeps
	p.signal()
}

// Flush implements datapath.Port: Send delivers at once, nothing waits.
func (p *Port) Flush() {}

// MaxFrameLen implements datapath.Port.
func (p *Port) MaxFrameLen() int { return p.cfg.MaxFrameLen }

// RecvCapacity implements datapath.RecvCapacitor: half the port's
// buffers (receiving and sending share them).
func (p *Port) RecvCapacity() int { return p.cfg.Buffers / 2 }

// Stats implements datapath.Port.
func (p *Port) Stats() *datapath.PortStats { return &p.stats }

// Close implements datapath.Port.
func (p *Port) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return datapath.ErrClosed
	}
	p.closed = true
	p.signal()
	return nil
}

// Outstanding returns how many of the port's buffers are lent out (received
// frames not released, transmit buffers not sent or freed). A test that has
// given everything back expects 0.
func (p *Port) Outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := 0
	if p.held >= 0 {
		held = 1
	}
	return p.pool.Lent() - len(p.rxq) - held
}

// ErrLeak is returned by CheckNoLeaks.
var ErrLeak = errors.New("porttest: buffers not returned")

// CheckNoLeaks returns ErrLeak if either port of a pair has buffers lent out.
func CheckNoLeaks(a, b *Port) error {
	if n, m := a.Outstanding(), b.Outstanding(); n != 0 || m != 0 {
		return fmt.Errorf("%w: %d and %d", ErrLeak, n, m)
	}
	return nil
}
