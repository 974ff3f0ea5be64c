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

// runOneSidedBW runs write_bw, read_bw or atomic_bw. The client sends;
// the server's NIC answers, while the server waits for the client's keys
// after its run, takes its report and prints it.
func (s *session) runOneSidedBW(ctx context.Context, server bool) error {
	if server {
		// The step itself waits for the peer (and fails at once if it
		// goes away).
		if err := s.keys("keys exchange after the run", runWait); err != nil {
			return err
		}
		rep, err := s.conn.Reports(Report{})
		if err != nil {
			return err
		}
		r := Result{Test: s.cfg.Test.String(), Role: "server", Bytes: int(rep.Size), Iters: int(rep.Iters),
			BWPeak: rep.PeakBW, BWAvg: rep.AvgBW, MsgRate: rep.MsgMpp, Units: s.units()}
		s.results = append(s.results, r)
		s.printBW(&r)
		s.printFooter()
		return s.close(StepTimeout)
	}
	var last Result
	for _, size := range s.cfg.sizes() {
		var err error
		if last, err = s.bwClient(ctx, size); err != nil {
			return err
		}
		s.results = append(s.results, last)
		s.printBW(&last)
	}
	s.printFooter()
	if err := s.keys("keys exchange after the run", StepTimeout); err != nil {
		return err
	}
	if _, err := s.conn.Reports(Report{Size: uint64(last.Bytes), Iters: uint64(last.Iters), PeakBW: last.BWPeak, AvgBW: last.BWAvg, MsgMpp: last.MsgRate}); err != nil {
		return err
	}
	return s.close(StepTimeout)
}

// runSendBW runs send_bw: the server posts receives, both sync, the
// client sends and the server counts what it receives; each prints its
// own report.
func (s *session) runSendBW(ctx context.Context, server bool) error {
	if s.cfg.Duration > 0 {
		return fmt.Errorf("perftest: -D is not supported for send-bw")
	}
	for _, size := range s.cfg.sizes() {
		var r Result
		var err error
		if server {
			for k := range s.cfg.RxDepth {
				if err := s.postRecv(uint64(k), size, k); err != nil {
					return err
				}
			}
			if err := s.keys("keys exchange before the run", StepTimeout); err != nil {
				return err
			}
			err = s.watch(ctx, func(ctx context.Context) error {
				r, err = s.sendBWServer(ctx, size)
				return err
			})
		} else {
			if err := s.keys("keys exchange before the run", StepTimeout); err != nil {
				return err
			}
			r, err = s.bwClient(ctx, size)
		}
		if err != nil {
			return err
		}
		s.results = append(s.results, r)
		s.printBW(&r)
	}
	s.printFooter()
	return s.close(StepTimeout)
}

// postRecv posts a receive of size bytes for message k.
func (s *session) postRecv(id uint64, size, k int) error {
	off := s.half + cycleOffset(k, size)
	_, err := s.qp.PostRecv([]verbs.RecvWR{{WRID: id, SGL: []verbs.SGE{{Addr: s.mr.Addr + uint64(off), Length: uint32(size), LKey: s.mr.LKey}}}})
	return err
}

// sendBWServer receives Iters messages, re-posting receives as they
// complete, timing from the first to the last.
func (s *session) sendBWServer(ctx context.Context, size int) (Result, error) {
	n := s.cfg.Iters
	posted, got := s.cfg.RxDepth, 0
	var first, end time.Time
	for got < n {
		wcs, err := s.poll(ctx, s.rcq)
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
				if err := s.postRecv(uint64(posted), size, posted); err != nil {
					return Result{}, err
				}
				posted++
			}
		}
	}
	el := end.Sub(first)
	r := Result{Test: s.cfg.Test.String(), Role: "server", Bytes: size, Iters: n, Units: s.units()}
	if el > 0 {
		r.BWAvg = s.bw(float64(size)*float64(n), el)
		r.MsgRate = float64(n) / el.Seconds() / 1e6
	}
	return r, nil
}

// bwClient posts Iters work requests of one size (or runs for Duration),
// TxDepth outstanding, one signalled every CQMod, and measures.
func (s *session) bwClient(ctx context.Context, size int) (Result, error) {
	cfg := &s.cfg
	n := cfg.Iters
	timed := cfg.Duration > 0
	if timed {
		n = int(^uint(0) >> 1)
	} else if cap(s.tposted) < n {
		s.tposted, s.tdone = make([]time.Time, n), make([]time.Time, n)
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
			sges[batch] = verbs.SGE{Addr: s.mr.Addr + uint64(off), Length: uint32(size), LKey: s.mr.LKey}
			w := &wrs[batch]
			*w = verbs.SendWR{WRID: uint64(k), Opcode: op, SGL: sges[batch : batch+1]}
			if (k+1)%cfg.CQMod == 0 || k == n-1 || timed {
				w.Flags = verbs.SendSignaled
			}
			if op != verbs.WRSend {
				w.RemoteAddr, w.RKey = s.peer.VAddr+uint64(off), s.peer.RKey
			}
			if op == verbs.WRAtomicFetchAdd {
				w.CompareAdd = 1
			}
			if !timed {
				s.tposted[k] = time.Now()
			}
			posted++
			batch++
		}
		if batch > 0 {
			if i, err := s.qp.PostSend(wrs[:batch]); err != nil {
				return Result{}, fmt.Errorf("perftest: post send %d: %w", i, err)
			}
		}
		var wcs []verbs.WC
		if posted-completed >= cfg.TxDepth || posted == n {
			var err error
			if wcs, err = s.poll(ctx, s.scq); err != nil {
				return Result{}, err
			}
		} else {
			k := s.scq.Poll(s.wc)
			wcs = s.wc[:k]
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
					s.tdone[i] = now
				}
			}
			completed = last + 1
		}
	}
	r := Result{Test: cfg.Test.String(), Role: "client", Bytes: size, Units: s.units()}
	if timed {
		if sampleEnd.IsZero() {
			sampleEnd, countEnd = time.Now(), completed
		}
		r.Iters = countEnd - countStart
		if el := sampleEnd.Sub(sampleStart); el > 0 {
			r.BWAvg = s.bw(float64(size)*float64(r.Iters), el)
			r.MsgRate = float64(r.Iters) / el.Seconds() / 1e6
		}
		return r, nil
	}
	r.Iters = n
	el := s.tdone[n-1].Sub(s.tposted[0])
	if el > 0 {
		r.BWAvg = s.bw(float64(size)*float64(n), el)
		r.MsgRate = float64(n) / el.Seconds() / 1e6
	}
	if n <= 20000 {
		r.BWPeak = s.peak(size, n)
	}
	return r, nil
}

// peak is perftest's peak bandwidth: the best rate over any run of
// consecutive messages, from the posting of the first to the completion of
// the last.
func (s *session) peak(size, n int) float64 {
	best := time.Duration(1<<63 - 1)
	for i := range n {
		for j := i; j < n; j++ {
			if d := s.tdone[j].Sub(s.tposted[i]) / time.Duration(j-i+1); d < best && d > 0 {
				best = d
			}
		}
	}
	if best == 1<<63-1 {
		return 0
	}
	return s.bw(float64(size), best)
}

// bw converts bytes in a time to the report's unit: MB/s (2^20 bytes) or
// Gbit/s (10^9 bits).
func (s *session) bw(bytes float64, d time.Duration) float64 {
	if s.cfg.Gbits {
		return bytes * 8 / 1e9 / d.Seconds()
	}
	return bytes / (1 << 20) / d.Seconds()
}

func (s *session) units() string {
	if s.cfg.Gbits {
		return "Gb/sec"
	}
	return "MB/sec"
}
