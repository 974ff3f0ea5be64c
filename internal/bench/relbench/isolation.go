package relbench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/observe"
	"github.com/softrnic/softrnic/host/verbs"
)

// IsolationConfig sets a stall-isolation run: QP A, with a small replay
// allocation, writes to a slow peer (its frames take SlowDelay longer);
// QP B, on the same engine, writes to a near one. B's throughput alone
// and beside A are measured in the same run.
type IsolationConfig struct {
	AllocA    int           // A's replay entries (default 4)
	SlowDelay time.Duration // extra one-way delay of A's requests (default 20 ms)
	RTT       time.Duration // the link's added round trip (default 200 us)
	LinkGbits float64       // default 2
	Duration  time.Duration // per measurement (default 1 s)
	// Observe, if not nil, watches the NICs the benchmark opens (their
	// frames, their counters).
	Observe *observe.Hooks
}

func (c *IsolationConfig) defaults() {
	if c.AllocA == 0 {
		c.AllocA = 4
	}
	if c.SlowDelay == 0 {
		c.SlowDelay = 20 * time.Millisecond
	}
	if c.RTT == 0 {
		c.RTT = 200 * time.Microsecond
	}
	if c.LinkGbits == 0 {
		c.LinkGbits = 2
	}
	if c.Duration == 0 {
		c.Duration = time.Second
	}
}

// IsolationResult is a run's figures.
type IsolationResult struct {
	BAlone, BBeside float64 // B's Gbit/s alone and beside A
	AGbits          float64 // A's Gbit/s
	AStalls         uint64  // gate stalls on the sending NIC while A ran (all A's: B's allocation is far larger than its window)
	AStalledPercent float64
}

// Isolation runs the scenario.
func Isolation(cfg IsolationConfig) (IsolationResult, error) {
	cfg.defaults()
	const msg = 64 << 10
	var slowQPN uint32 // A's peer: its requests take the slow path
	var slowMu sync.Mutex
	linkCfg := porttest.Config{Buffers: 16384, Delay: cfg.RTT / 2, Rate: cfg.LinkGbits * 1e9,
		ExtraDelay: func(f []byte) time.Duration {
			var p wire.Packet
			if wire.ParseNoICRC(f, &p) != nil {
				return 0
			}
			slowMu.Lock()
			defer slowMu.Unlock()
			if p.BTH().DestQP() == slowQPN && slowQPN != 0 {
				return cfg.SlowDelay
			}
			return 0
		}}
	l, err := openLink(cfg.Observe, "isolation", linkCfg, 3, 32*msg, 0)
	if err != nil {
		return IsolationResult{}, err
	}
	defer l.Close()
	a, b := l.a, l.b
	// B is the pair open made; A is a second pair on the same devices,
	// whose sending QP gets the small allocation.
	cqA, err := a.dev.CreateCQ(256)
	if err != nil {
		return IsolationResult{}, err
	}
	qa, err := a.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: cqA, RecvCQ: cqA, ReplayEntries: cfg.AllocA,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return IsolationResult{}, err
	}
	qaPeer, err := b.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: b.cq, RecvCQ: b.cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return IsolationResult{}, err
	}
	if err := verbs.ConnectRC(a.qp, b.qp, a.ah, b.ah, 5, 18); err != nil {
		return IsolationResult{}, err
	}
	if err := verbs.ConnectRC(qa, qaPeer, a.ah, b.ah, 5, 18); err != nil {
		return IsolationResult{}, err
	}
	slowMu.Lock()
	slowQPN = qaPeer.Num
	slowMu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration*4+time.Minute)
	defer cancel()
	var res IsolationResult
	bytes, err := streamFor(ctx, a.qp, a.cq, cfg.Duration, msg, a.mr, b.mr, 0)
	if err != nil {
		return res, fmt.Errorf("B alone: %w", err)
	}
	res.BAlone = float64(bytes*8) / cfg.Duration.Seconds() / 1e9

	c := a.dev.NIC().Counters()
	stalls0, stalled0 := c.ReplayStalls.Load(), c.ReplayStalledNs.Load()
	actx, stopA := context.WithCancel(ctx)
	var aBytes int
	var aErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		aBytes, aErr = streamFor(actx, qa, cqA, 10*cfg.Duration, msg, a.mr, b.mr, 16*msg)
	}()
	time.Sleep(cfg.SlowDelay * 3) // A's window is full and its gate shut
	start := time.Now()
	bytes, err = streamFor(ctx, a.qp, a.cq, cfg.Duration, msg, a.mr, b.mr, 0)
	elapsed := time.Since(start)
	stopA()
	wg.Wait()
	if err != nil {
		return res, fmt.Errorf("B beside A: %w", err)
	}
	if aErr != nil && aErr != context.Canceled {
		return res, fmt.Errorf("A: %w", aErr)
	}
	res.BBeside = float64(bytes*8) / cfg.Duration.Seconds() / 1e9
	res.AGbits = float64(aBytes*8) / (elapsed + cfg.SlowDelay*3).Seconds() / 1e9
	res.AStalls = c.ReplayStalls.Load() - stalls0
	res.AStalledPercent = 100 * float64(c.ReplayStalledNs.Load()-stalled0) / float64((elapsed + cfg.SlowDelay*3).Nanoseconds())
	return res, nil
}

// streamFor runs WRITEs on a QP, 8 in flight, for d (or until ctx ends),
// and returns the bytes completed.
func streamFor(ctx context.Context, qp *verbs.QP, cq *verbs.CQ, d time.Duration, msg int, local, remote *verbs.MR, off uint64) (int, error) {
	posted, done := 0, 0
	var wc [16]verbs.WC
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for ; posted-done < 8; posted++ {
			o := off + uint64(posted%8*msg)
			if _, err := qp.PostSend([]verbs.SendWR{{WRID: uint64(posted), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{{Addr: local.Addr + o, Length: uint32(msg), LKey: local.LKey}}, RemoteAddr: remote.Addr + o, RKey: remote.RKey}}); err != nil {
				return done * msg, err
			}
		}
		k := cq.Poll(wc[:])
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				return done * msg, fmt.Errorf("QP %d, work request %d: %v", qp.Num, w.WRID, w.Status)
			}
			done++
		}
		if k == 0 {
			wctx, cancel := context.WithDeadline(ctx, end)
			err := cq.Wait(wctx)
			cancel()
			if ctx.Err() != nil {
				return done * msg, ctx.Err()
			}
			_ = err // the deadline: measured time is over
		}
	}
	measured := done * msg
	// What is still in flight completes before the next measurement.
	for done < posted {
		k := cq.Poll(wc[:])
		done += k
		if k == 0 && cq.Wait(ctx) != nil {
			break
		}
	}
	return measured, nil
}

// ReportIsolation runs the scenario and prints it.
func ReportIsolation(w io.Writer, cfg IsolationConfig) (IsolationResult, error) {
	cfg.defaults()
	fmt.Fprintf(w, "QP A (%d replay entries) writes to a peer %v farther away; QP B, same engine, to a near one (RTT %v, link %.1f Gbit/s)\n",
		cfg.AllocA, cfg.SlowDelay, cfg.RTT, cfg.LinkGbits)
	r, err := Isolation(cfg)
	if err != nil {
		return r, err
	}
	fmt.Fprintf(w, "B alone %.3f Gbit/s, B beside A %.3f Gbit/s (%.2fx); A %.3f Gbit/s, %d gate stalls, stalled %.0f%% of the time\n",
		r.BAlone, r.BBeside, r.BBeside/r.BAlone, r.AGbits, r.AStalls, r.AStalledPercent)
	return r, nil
}
