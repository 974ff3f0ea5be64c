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
	n := d.cfg.Iters
	d.ensureTimes(n)
	post, poll := size-1, d.recvOff(0)+size-1
	seen := d.placed0
	scnt, rcnt := 0, 0
	for scnt < n || rcnt < n {
		if rcnt < n && !(scnt < 1 && server) {
			rcnt++
			var err error
			if seen, err = d.waitByte(ctx, poll, byte(rcnt), seen); err != nil {
				return fmt.Errorf("perftest: waiting for the peer's write %d of %d: %w", rcnt, n, err)
			}
		}
		if scnt < n {
			d.tposted[scnt] = time.Now()
			scnt++
			d.buf[post] = byte(scnt)
			wr := verbs.SendWR{WRID: uint64(scnt), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL:        []verbs.SGE{{Addr: d.mr.Addr, Length: uint32(size), LKey: d.mr.LKey}},
				RemoteAddr: d.peer[0].VAddr, RKey: d.peer[0].RKey}
			if size <= maxInline {
				wr.Flags |= verbs.SendInline
			}
			if _, err := d.qps[0].PostSend([]verbs.SendWR{wr}); err != nil {
				return fmt.Errorf("perftest: post write: %w", err)
			}
			if _, err := d.poll(ctx, d.scq); err != nil {
				return err
			}
		}
	}
	d.placed0 = seen
	return nil
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
		if spin < 64 {
			runtime.Gosched()
			continue
		}
		cur, err := d.env.Dev.WaitWritesPlaced(ctx, seen)
		if err != nil {
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
	n := d.cfg.Iters
	d.ensureTimes(n)
	scnt, rcnt := 0, 0
	for scnt < n || rcnt < n {
		if rcnt < n && !(scnt < 1 && !server) {
			wcs, err := d.poll(ctx, d.rcq)
			if err != nil {
				return err
			}
			for range wcs {
				rcnt++
				if rcnt+d.cfg.RxDepth <= n {
					if err := d.postRecv(0, uint64(rcnt), size, 0); err != nil {
						return err
					}
				}
			}
		}
		if scnt < n {
			d.tposted[scnt] = time.Now()
			scnt++
			wr := verbs.SendWR{WRID: uint64(scnt), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{{Addr: d.mr.Addr, Length: uint32(size), LKey: d.mr.LKey}}}
			if size <= maxInline {
				wr.Flags |= verbs.SendInline
			}
			if _, err := d.qps[0].PostSend([]verbs.SendWR{wr}); err != nil {
				return fmt.Errorf("perftest: post send: %w", err)
			}
			if _, err := d.poll(ctx, d.scq); err != nil {
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
	n := d.cfg.Iters
	d.ensureTimes(n)
	for k := range n {
		wr := verbs.SendWR{WRID: uint64(k), Opcode: op, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: d.mr.Addr, Length: uint32(size), LKey: d.mr.LKey}},
			RemoteAddr: d.peer[0].VAddr, RKey: d.peer[0].RKey}
		if op == verbs.WRAtomicFetchAdd {
			wr.CompareAdd = 1
		}
		d.tposted[k] = time.Now()
		if _, err := d.qps[0].PostSend([]verbs.SendWR{wr}); err != nil {
			return fmt.Errorf("perftest: post: %w", err)
		}
		if _, err := d.poll(ctx, d.scq); err != nil {
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
