package perftest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
)

// writeLat runs one size of write_lat: each side writes a message into
// the other's buffer, its last byte counting the iterations, and waits
// until the peer's message has counted as far in its own buffer. The
// server writes first.
func (d *rdma) writeLat(ctx context.Context, size int, server bool) error {
	n, t, ctx, cancel := d.latRun(ctx)
	defer cancel()
	post, poll := size-1, d.recvOff(0)+size-1
	seen := d.placed0
	defer func() { d.placed0 = seen }()
	scnt, rcnt := 0, 0
	for scnt < n || rcnt < n {
		if rcnt < n && !(scnt < 1 && server) {
			rcnt++
			var err error
			if seen, err = d.waitByte(ctx, poll, byte(rcnt), seen); err != nil {
				if t.over() {
					return nil
				}
				return fmt.Errorf("perftest: waiting for the peer's write %d of %d: %w", rcnt, n, err)
			}
		}
		if scnt < n {
			if t.posted(d, scnt) {
				return nil
			}
			scnt++
			d.buf[post] = byte(scnt)
			wr := verbs.SendWR{WRID: uint64(scnt), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL:        []verbs.SGE{{Addr: d.mr.Addr, Length: uint32(size), LKey: d.mr.LKey}},
				RemoteAddr: d.peer[0].VAddr, RKey: d.peer[0].RKey}
			if size <= d.cfg.Inline {
				wr.Flags |= verbs.SendInline
			}
			if _, err := d.qps[0].PostSend([]verbs.SendWR{wr}); err != nil {
				return fmt.Errorf("perftest: post write: %w", err)
			}
			if _, err := d.poll(ctx, d.scq); err != nil {
				if t.over() {
					return nil
				}
				return err
			}
		}
	}
	return nil
}

// latTimer is a latency run's clock: with -D a window that ends the run,
// else the iterations' post times.
type latTimer struct {
	w     *window
	ctx   context.Context
	count int // iterations posted
}

// latRun starts a latency run: its iterations (unbounded with -D) and,
// with -D, a context that ends with the run.
func (d *rdma) latRun(ctx context.Context) (int, *latTimer, context.Context, context.CancelFunc) {
	t := &latTimer{}
	if d.cfg.Duration <= 0 {
		d.ensureTimes(d.cfg.Iters)
		return d.cfg.Iters, t, ctx, func() {}
	}
	t.w = newWindow(d.cfg.Duration, time.Now())
	ctx, cancel := context.WithDeadline(ctx, t.w.deadline())
	t.ctx = ctx
	d.lat = t
	return int(^uint(0) >> 1), t, ctx, cancel
}

// posted notes that iteration k is posted now; with -D it reports instead
// that the run is over.
func (t *latTimer) posted(d *rdma, k int) (over bool) {
	now := time.Now()
	if t.w == nil {
		d.tposted[k] = now
		return false
	}
	t.count = k
	return t.w.tick(now, k)
}

// over reports whether a wait that failed was cut by the end of a -D run
// (its context's deadline) rather than by a failure.
func (t *latTimer) over() bool {
	return t.w != nil && t.ctx.Err() == context.DeadlineExceeded
}

// waitByte waits until the peer's WRITE has set buf[off] to want. It
// reads the buffer only after the device's count of placed WRITEs has
// moved past seen, and returns the count it read. It spins a little (the
// answer often comes within microseconds), then sleeps until the device
// places a WRITE: on a machine with few cores a spinning poller would take
// the CPU the NIC's engine needs.
func (d *rdma) waitByte(ctx context.Context, off int, want byte, seen uint64) (uint64, error) {
	for spin := 0; ; spin++ {
		if cur := d.env.Dev.WritesPlaced(); cur != seen {
			seen = cur
			if d.buf[off] == want {
				return seen, nil
			}
		}
		if spin < 64 && !d.env.Dev.NIC().AppDriven() {
			runtime.Gosched() // the NIC's goroutines need the CPU (where the poll drives the NIC, WaitWritesPlaced does)
			continue
		}
		cur, err := d.env.Dev.WaitWritesPlaced(ctx, seen)
		if err != nil {
			// The run ended while waiting (the peer closed the connection,
			// having seen its own last completion, which comes only once
			// this side placed its WRITE): a last look before giving up.
			if cur := d.env.Dev.WritesPlaced(); cur != seen && d.buf[off] == want {
				return cur, nil
			}
			return seen, err
		}
		if cur != seen {
			seen = cur
			if d.buf[off] == want {
				return seen, nil
			}
		}
	}
}

// sendLat runs one size of send_lat (the receives are posted): the
// client sends first; each answers every message it receives with one of
// its own.
func (d *rdma) sendLat(ctx context.Context, size int, server bool) error {
	n, t, ctx, cancel := d.latRun(ctx)
	defer cancel()
	scnt, rcnt := 0, 0
	for scnt < n || rcnt < n {
		if rcnt < n && !(scnt < 1 && !server) {
			wcs, err := d.poll(ctx, d.rcq)
			if err != nil {
				if t.over() {
					return nil
				}
				return err
			}
			for _, c := range wcs {
				if err := d.cfg.checkLen(c.ByteLen, size); err != nil {
					return err
				}
				rcnt++
				if rcnt+d.cfg.RxDepth <= n {
					if err := d.postRecv(0, uint64(rcnt), size, 0); err != nil {
						return err
					}
				}
			}
		}
		if scnt < n {
			if t.posted(d, scnt) {
				return nil
			}
			scnt++
			wr := verbs.SendWR{WRID: uint64(scnt), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{{Addr: d.mr.Addr, Length: uint32(size), LKey: d.mr.LKey}}}
			if size <= d.cfg.Inline {
				wr.Flags |= verbs.SendInline
			}
			d.address(&wr, 0)
			if _, err := d.qps[0].PostSend([]verbs.SendWR{wr}); err != nil {
				return fmt.Errorf("perftest: post send: %w", err)
			}
			if _, err := d.poll(ctx, d.scq); err != nil {
				if t.over() {
					return nil
				}
				return err
			}
		}
	}
	return nil
}

// readLat runs one size of read_lat or atomic_lat: one READ or atomic at
// a time to the server's buffer, each waited for.
func (d *rdma) readLat(ctx context.Context, size int) error {
	op := verbs.WRRDMARead
	switch {
	case d.cfg.Test.atomic() && d.cfg.Atomic == CmpAndSwap:
		op = verbs.WRAtomicCmpAndSwp
	case d.cfg.Test.atomic():
		op = verbs.WRAtomicFetchAdd
	}
	n, t, ctx, cancel := d.latRun(ctx)
	defer cancel()
	for k := range n {
		wr := verbs.SendWR{WRID: uint64(k), Opcode: op, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: d.mr.Addr, Length: uint32(size), LKey: d.mr.LKey}},
			RemoteAddr: d.peer[0].VAddr, RKey: d.peer[0].RKey}
		if op == verbs.WRAtomicFetchAdd {
			wr.CompareAdd = 1
		}
		if t.posted(d, k) {
			return nil
		}
		if _, err := d.qps[0].PostSend([]verbs.SendWR{wr}); err != nil {
			return fmt.Errorf("perftest: post: %w", err)
		}
		if _, err := d.poll(ctx, d.scq); err != nil {
			if t.over() {
				return nil
			}
			return err
		}
	}
	return nil
}

// latTail is how many of the largest samples perftest leaves out.
const latTail = 2

// latResult computes perftest's latency figures from the times the
// iterations were posted: the samples are the gaps between consecutive
// posts, divided by div (2 for ping-pong tests: a half round trip); the
// largest two are left out; percentiles come from an HDR histogram of the
// rest.
func (d *rdma) latResult(size, div int, server bool) Result {
	r := Result{Test: d.cfg.Test.String(), Role: "client", Bytes: size, Iters: d.cfg.Iters}
	if server {
		r.Role = "server"
	}
	if t := d.lat; t != nil && t.w != nil {
		// -D: the mean over the window, and round trips a second.
		iters, el := t.w.sample(time.Now(), t.count)
		r.Iters = iters
		if iters > 0 && el > 0 {
			r.TAvg = float64(el.Nanoseconds()) / 1e3 / float64(iters) / float64(div)
			r.TPS = float64(iters) / el.Seconds()
		}
		return r
	}
	r.TMin, r.TMax, r.TTypical, r.TAvg, r.TStdev, r.P99, r.P999 = latStats(d.tposted[:d.cfg.Iters], div)
	if d.cfg.Samples {
		posted := d.tposted[:d.cfg.Iters]
		for i := range len(posted) - 1 {
			r.Samples = append(r.Samples, float64(posted[i+1].Sub(posted[i]))/float64(div)/1e3)
		}
	}
	return r
}

// latStats returns, in microseconds, min, max, median, mean, standard
// deviation and the 99th and 99.9th percentiles of the samples.
func latStats(posted []time.Time, div int) (tmin, tmax, typical, avg, stdev, p99, p999 float64) {
	samples := make([]time.Duration, 0, len(posted))
	for i := range len(posted) - 1 {
		samples = append(samples, posted[i+1].Sub(posted[i])/time.Duration(div))
	}
	slices.Sort(samples)
	if len(samples) > latTail {
		samples = samples[:len(samples)-latTail]
	}
	m := len(samples)
	if m == 0 {
		return
	}
	h := NewHistogram()
	for _, x := range samples {
		h.Record(uint64(max(x, 0)))
	}
	median := float64(samples[m/2])
	if m%2 == 0 {
		median = (float64(samples[m/2-1]) + float64(samples[m/2])) / 2
	}
	us := func(ns float64) float64 { return ns / 1e3 }
	return us(float64(samples[0])), us(float64(samples[m-1])), us(median), us(h.Mean()), us(h.StdDev()),
		us(float64(h.Percentile(99))), us(float64(h.Percentile(99.9)))
}
