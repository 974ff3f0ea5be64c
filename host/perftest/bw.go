package perftest

import (
	"context"
	"fmt"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
)

// inc is how far perftest moves between messages of one size in the
// cycle buffer: the size rounded up to the cache line.
func inc(size int) int { return (size + cacheLine - 1) / cacheLine * cacheLine }

// cycleOffset is the offset of message k of size bytes within a buffer
// half: small messages walk through a page, larger ones stay put.
func cycleOffset(k, size int) int {
	if size > cycleBuffer/2 {
		return 0
	}
	step := inc(size)
	return k % (cycleBuffer / step) * step
}

// sendBWServer receives Iters messages, re-posting receives as they
// complete, timing from the first to the last.
func (d *rdma) sendBWServer(ctx context.Context, size int) (Result, error) {
	n := d.cfg.Iters
	posted, got := d.cfg.RxDepth, 0
	var first, end time.Time
	for got < n {
		wcs, err := d.poll(ctx, d.rcq)
		if err != nil {
			return Result{}, err
		}
		now := time.Now()
		if got == 0 {
			first = now
		}
		got += len(wcs)
		end = now
		for range wcs {
			if posted < n {
				if err := d.postRecv(uint64(posted), size, cycleOffset(posted, size)); err != nil {
					return Result{}, err
				}
				posted++
			}
		}
	}
	el := end.Sub(first)
	r := Result{Test: d.cfg.Test.String(), Role: "server", Bytes: size, Iters: n, Units: d.cfg.units()}
	if el > 0 {
		r.BWAvg = d.cfg.bw(float64(size)*float64(n), el)
		r.MsgRate = float64(n) / el.Seconds() / 1e6
	}
	return r, nil
}

// bwClient posts Iters work requests of one size (or runs for Duration),
// TxDepth outstanding, one signalled every CQMod, and measures.
func (d *rdma) bwClient(ctx context.Context, size int) (Result, error) {
	cfg := d.cfg
	n := cfg.Iters
	timed := cfg.Duration > 0
	if timed {
		n = int(^uint(0) >> 1)
	} else if cap(d.tposted) < n {
		d.tposted, d.tdone = make([]time.Time, n), make([]time.Time, n)
	}
	wrs := make([]verbs.SendWR, cfg.TxDepth)
	sges := make([]verbs.SGE, cfg.TxDepth)
	op := verbs.WRRDMAWrite
	switch {
	case cfg.Test.send():
		op = verbs.WRSend
	case cfg.Test.read():
		op = verbs.WRRDMARead
	case cfg.Test.atomic() && cfg.Atomic == CmpAndSwap:
		op = verbs.WRAtomicCmpAndSwp
	case cfg.Test.atomic():
		op = verbs.WRAtomicFetchAdd
	}
	// Duration mode: a warm-up and a cool-down of a quarter each (whole
	// seconds, at least one), measured between.
	start := time.Now()
	margin := (cfg.Duration / 4).Truncate(time.Second)
	margin = max(margin, time.Second)
	var sampleStart, sampleEnd time.Time
	var countStart, countEnd int
	posted, completed := 0, 0
	for completed < n {
		if timed {
			now := time.Now()
			switch {
			case sampleStart.IsZero() && now.Sub(start) >= margin:
				sampleStart, countStart = now, completed
			case sampleEnd.IsZero() && now.Sub(start) >= cfg.Duration-margin:
				sampleEnd, countEnd = now, completed
			}
			if now.Sub(start) >= cfg.Duration {
				n = posted // stop posting, drain what is out
				if completed >= n {
					break
				}
			}
		}
		batch := 0
		for posted < n && posted-completed < cfg.TxDepth && batch < len(wrs) {
			k := posted
			off := cycleOffset(k, size)
			if cfg.Test.atomic() {
				off = k % (cycleBuffer / cacheLine) * cacheLine
			}
			sges[batch] = verbs.SGE{Addr: d.mr.Addr + uint64(off), Length: uint32(size), LKey: d.mr.LKey}
			w := &wrs[batch]
			*w = verbs.SendWR{WRID: uint64(k), Opcode: op, SGL: sges[batch : batch+1]}
			if (k+1)%cfg.CQMod == 0 || k == n-1 || timed {
				w.Flags = verbs.SendSignaled
			}
			if op != verbs.WRSend {
				w.RemoteAddr, w.RKey = d.peer.VAddr+uint64(off), d.peer.RKey
			}
			if op == verbs.WRAtomicFetchAdd {
				w.CompareAdd = 1
			}
			if !timed {
				d.tposted[k] = time.Now()
			}
			posted++
			batch++
		}
		if batch > 0 {
			if i, err := d.qp.PostSend(wrs[:batch]); err != nil {
				return Result{}, fmt.Errorf("perftest: post send %d: %w", i, err)
			}
		}
		var wcs []verbs.WC
		if posted-completed >= cfg.TxDepth || posted == n {
			var err error
			if wcs, err = d.poll(ctx, d.scq); err != nil {
				return Result{}, err
			}
		} else {
			k := d.scq.Poll(d.wc)
			wcs = d.wc[:k]
			for _, c := range wcs {
				if c.Status != verbs.WCSuccess {
					return Result{}, fmt.Errorf("perftest: completion with error: %v (WR %d)", c.Status, c.WRID)
				}
			}
		}
		if len(wcs) > 0 {
			now := time.Now()
			last := int(wcs[len(wcs)-1].WRID)
			if !timed {
				for i := completed; i <= last; i++ {
					d.tdone[i] = now
				}
			}
			completed = last + 1
		}
	}
	r := Result{Test: cfg.Test.String(), Role: "client", Bytes: size, Units: d.cfg.units()}
	if timed {
		if sampleEnd.IsZero() {
			sampleEnd, countEnd = time.Now(), completed
		}
		r.Iters = countEnd - countStart
		if el := sampleEnd.Sub(sampleStart); el > 0 {
			r.BWAvg = d.cfg.bw(float64(size)*float64(r.Iters), el)
			r.MsgRate = float64(r.Iters) / el.Seconds() / 1e6
		}
		return r, nil
	}
	r.Iters = n
	el := d.tdone[n-1].Sub(d.tposted[0])
	if el > 0 {
		r.BWAvg = d.cfg.bw(float64(size)*float64(n), el)
		r.MsgRate = float64(n) / el.Seconds() / 1e6
	}
	if n <= 20000 {
		r.BWPeak = d.peak(size, n)
	}
	return r, nil
}

// peak is perftest's peak bandwidth: the best rate over any run of
// consecutive messages, from the posting of the first to the completion of
// the last.
func (d *rdma) peak(size, n int) float64 {
	best := time.Duration(1<<63 - 1)
	for i := range n {
		for j := i; j < n; j++ {
			if d := d.tdone[j].Sub(d.tposted[i]) / time.Duration(j-i+1); d < best && d > 0 {
				best = d
			}
		}
	}
	if best == 1<<63-1 {
		return 0
	}
	return d.cfg.bw(float64(size), best)
}

// bw converts bytes in a time to the report's unit: MB/s (2^20 bytes) or
// Gbit/s (10^9 bits).
func (c *Config) bw(bytes float64, d time.Duration) float64 {
	if c.Gbits {
		return bytes * 8 / 1e9 / d.Seconds()
	}
	return bytes / (1 << 20) / d.Seconds()
}

func (c *Config) units() string {
	if c.Gbits {
		return "Gb/sec"
	}
	return "MB/sec"
}
