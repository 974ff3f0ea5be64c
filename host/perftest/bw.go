package perftest

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// sendBWServer receives Iters messages on every QP, re-posting receives
// as they complete, timing from the first to the last.
func (d *rdma) sendBWServer(ctx context.Context, size int) (Result, error) {
	return d.receive(ctx, size, d.wc)
}

// receive takes Iters messages on every QP, polling into wc; with a
// duration it takes what comes until the duration is over and measures
// the window between its warm-up and cool-down, as perftest's server does.
func (d *rdma) receive(ctx context.Context, size int, wc []verbs.WC) (Result, error) {
	if d.cfg.Duration > 0 {
		return d.receiveTimed(ctx, size, wc)
	}
	n, q := d.cfg.Iters, len(d.qps)
	posted := make([]int, q)
	for i := range posted {
		posted[i] = d.cfg.RxDepth
	}
	got := 0
	var first, end time.Time
	for got < n*q {
		wcs, err := d.pollRecv(ctx, wc)
		if err == errPeerDone {
			break // UC, UD: the rest was lost
		}
		if err != nil {
			return Result{}, err
		}
		now := time.Now()
		if got == 0 {
			first = now
		}
		got += len(wcs)
		end = now
		for _, c := range wcs {
			if err := d.cfg.checkLen(c.ByteLen, size); err != nil {
				return Result{}, err
			}
			i := d.qpIndex(c.QPNum)
			if i < 0 || posted[i] >= n {
				continue
			}
			if err := d.postRecv(i, uint64(posted[i]), size, cycleOffset(posted[i], size)); err != nil {
				return Result{}, err
			}
			posted[i]++
		}
	}
	r := Result{Test: d.cfg.Test.String(), Role: "server", Bytes: size, Iters: n * q, Lost: n*q - got, Units: d.cfg.units()}
	if el := end.Sub(first); el > 0 {
		r.BWAvg = d.cfg.bw(float64(size)*float64(got), el)
		r.MsgRate = float64(got) / el.Seconds() / 1e6
	}
	return r, nil
}

// errPeerDone ends a UC or UD receiver's wait: the peer has gone on to
// its next step and no message came for lossyGrace since.
var errPeerDone = errors.New("perftest: the peer's run is over")

// lossyGrace is how long a UC or UD receiver waits on, once the peer's run
// is over, for messages still on their way before it counts the rest
// lost.
const lossyGrace = 500 * time.Millisecond

// pollRecv polls the receive CQ into wc as pollInto does. Over UC and UD,
// where a message lost is not sent again, it returns errPeerDone once the
// peer has gone on to its next step (session.watch) and nothing more came
// for lossyGrace: perftest's peer does not say how many it sent.
func (d *rdma) pollRecv(ctx context.Context, wc []verbs.WC) ([]verbs.WC, error) {
	if d.cfg.reliable() {
		return pollInto(ctx, d.rcq, wc)
	}
	var since time.Time
	for {
		wctx, cancel := context.WithTimeout(ctx, lossyGrace/5)
		wcs, err := pollInto(wctx, d.rcq, wc)
		expired := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		if !expired {
			return wcs, err
		}
		select {
		case <-d.ahead:
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) >= lossyGrace {
				return nil, errPeerDone
			}
		default:
		}
	}
}

// receiveTimed is receive for a duration.
func (d *rdma) receiveTimed(ctx context.Context, size int, wc []verbs.WC) (Result, error) {
	q := len(d.qps)
	posted := make([]int, q)
	for i := range posted {
		posted[i] = d.cfg.RxDepth
	}
	w := newWindow(d.cfg.Duration, time.Now())
	w.cpu = d.cfg.CPUUtil
	if !d.cfg.Infinite {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, w.deadline())
		defer cancel()
	}
	rows := newRows(d.cfg, "server", size, time.Now())
	got := 0
	for d.cfg.Infinite || !w.tick(time.Now(), got) {
		rows.tick(time.Now(), got)
		wcs, err := d.pollRecv(ctx, wc)
		if err == errPeerDone {
			break
		}
		if err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				break
			}
			return Result{}, err
		}
		got += len(wcs)
		for _, c := range wcs {
			if err := d.cfg.checkLen(c.ByteLen, size); err != nil {
				return Result{}, err
			}
			if i := d.qpIndex(c.QPNum); i >= 0 {
				if err := d.postRecv(i, uint64(posted[i]), size, cycleOffset(posted[i], size)); err != nil {
					return Result{}, err
				}
				posted[i]++
			}
		}
	}
	r := Result{Test: d.cfg.Test.String(), Role: "server", Bytes: size, Units: d.cfg.units()}
	var el time.Duration
	r.Iters, el = w.sample(time.Now(), got)
	r.CPUUtil = w.cpuUtil()
	if el > 0 {
		r.BWAvg = d.cfg.bw(float64(size)*float64(r.Iters), el)
		r.MsgRate = float64(r.Iters) / el.Seconds() / 1e6
	}
	return r, nil
}

// qpStream is one QP's share of a bandwidth run.
type qpStream struct {
	posted, completed int
	target            int // messages to send: Iters, or in duration mode those posted when time is up
}

// peakMeasured reports whether a bandwidth run's peak is computed: not
// for a timed run (-D) nor one of more than peakMessages messages, as
// perftest computes none for those (and says so).
func (c *Config) peakMeasured() bool {
	return !c.NoPeak && c.Duration == 0 && c.Iters*c.QPs <= peakMessages
}

// peakMessages bounds the runs whose peak is computed (the search is
// quadratic in the messages).
const peakMessages = 20000

// bwClient posts Iters work requests of one size on every QP (or runs
// for Duration), TxDepth outstanding a QP, one signalled every CQMod, and
// measures them all together.
func (d *rdma) bwClient(ctx context.Context, size int) (Result, error) {
	cfg := d.cfg
	n, q := cfg.Iters, len(d.qps)
	timed := cfg.Duration > 0
	if timed {
		n = int(^uint(0) >> 1)
	}
	streams := make([]qpStream, q)
	for i := range streams {
		streams[i].target = n
	}
	// The peak, as perftest finds it, needs every message's post and
	// completion times, numbered over all QPs in the order they happen.
	var tposted, tdone []time.Time
	if cfg.peakMeasured() {
		d.ensureTimes(n * q)
		tposted, tdone = d.tposted[:n*q], d.tdone[:n*q]
	}
	posted := 0
	wrs := make([]verbs.SendWR, cfg.TxDepth)
	list := len(wrs) // -l: work requests a PostSend
	if cfg.PostList > 0 {
		list = cfg.PostList
	}
	sges := make([]verbs.SGE, cfg.TxDepth)
	op := cfg.opcode()
	if cfg.WarmUp && !cfg.Test.send() {
		if err := d.warmUp(ctx, size, op, list); err != nil {
			return Result{}, err
		}
	}
	var w *window
	if timed {
		w = newWindow(cfg.Duration, time.Now())
		w.cpu = cfg.CPUUtil
	}
	rows := newRows(cfg, "client", size, time.Now())
	var first, last time.Time
	var total int
	stopped := false
	for {
		busy := false
		for i := range streams {
			if streams[i].completed < streams[i].target {
				busy = true
			}
		}
		if !busy {
			break
		}
		if cfg.Infinite {
			rows.tick(time.Now(), total)
		} else if timed && !stopped {
			if w.tick(time.Now(), total) {
				stopped = true
				for i := range streams { // stop posting; drain what is out
					streams[i].target = streams[i].posted
				}
				continue
			}
		}
		for i := range streams {
			st := &streams[i]
			batch := 0
			if cfg.PostList > 0 && st.posted+cfg.PostList <= st.target && st.posted-st.completed+cfg.PostList > cfg.TxDepth {
				continue // -l: whole lists only, while the run has them
			}
			for st.posted < st.target && st.posted-st.completed < cfg.TxDepth && batch < list {
				k := st.posted
				off := cycleOffset(k, size)
				if cfg.Test.atomic() {
					off = k % (cycleBuffer / cacheLine) * cacheLine
				}
				sges[batch] = verbs.SGE{Addr: d.mr.Addr + uint64(d.sendOff(i)+off), Length: uint32(size), LKey: d.mr.LKey}
				w := &wrs[batch]
				*w = verbs.SendWR{WRID: uint64(k), Opcode: op, SGL: sges[batch : batch+1]}
				if (k+1)%cfg.CQMod == 0 || k == st.target-1 || timed {
					w.Flags = verbs.SendSignaled
				}
				if op != verbs.WRSend {
					w.RemoteAddr, w.RKey = d.peer[i].VAddr+uint64(off), d.peer[i].RKey
				}
				if size <= cfg.Inline {
					w.Flags |= verbs.SendInline
				}
				d.address(w, i)
				if op == verbs.WRAtomicFetchAdd {
					w.CompareAdd = 1
				}
				now := time.Now()
				if tposted != nil {
					tposted[posted] = now
				}
				posted++
				if first.IsZero() {
					first = now
				}
				st.posted++
				batch++
			}
			if batch > 0 {
				if j, err := d.qps[i].PostSend(wrs[:batch]); err != nil {
					return Result{}, fmt.Errorf("perftest: post send %d on QP %d: %w", j, i, err)
				}
			}
		}
		// Wait for completions when every QP has its fill out.
		full := true
		for i := range streams {
			if st := &streams[i]; st.posted < st.target && st.posted-st.completed < cfg.TxDepth {
				full = false
			}
		}
		var wcs []verbs.WC
		if full || cfg.Events {
			var err error
			if wcs, err = d.poll(ctx, d.scq); err != nil {
				return Result{}, err
			}
		} else {
			k := d.scq.Poll(d.wc)
			wcs = d.wc[:k]
			for _, c := range wcs {
				if c.Status != verbs.WCSuccess {
					return Result{}, fmt.Errorf("perftest: completion with error: %w (WR %d)", c.Status, c.WRID)
				}
			}
		}
		if len(wcs) > 0 {
			now := time.Now()
			for _, c := range wcs {
				i := d.qpIndex(c.QPNum)
				if i < 0 {
					continue
				}
				st := &streams[i]
				upto := int(c.WRID)
				if tdone != nil {
					for k := st.completed; k <= upto; k++ {
						tdone[total+k-st.completed] = now
					}
				}
				if upto+1 > st.completed {
					total += upto + 1 - st.completed
					st.completed = upto + 1
				}
			}
			last = now
		}
	}
	r := Result{Test: cfg.Test.String(), Role: "client", Bytes: size, Units: cfg.units()}
	if timed {
		var el time.Duration
		r.Iters, el = w.sample(time.Now(), total)
		r.CPUUtil = w.cpuUtil()
		if el > 0 {
			r.BWAvg = cfg.bw(float64(size)*float64(r.Iters), el)
			r.MsgRate = float64(r.Iters) / el.Seconds() / 1e6
		}
		return r, nil
	}
	r.Iters = n * q // perftest counts every QP's messages
	if el := last.Sub(first); el > 0 {
		r.BWAvg = cfg.bw(float64(size)*float64(n*q), el)
		r.MsgRate = float64(n*q) / el.Seconds() / 1e6
	}
	if tposted != nil {
		r.BWPeak = d.peak(size, n*q)
	}
	return r, nil
}

// peak is perftest's peak bandwidth: the best rate over any run of
// consecutive messages, from the posting of the first to the completion of
// the last.
func (d *rdma) peak(size, n int) float64 {
	best := peakTime(d.tposted[:n], d.tdone[:n])
	if best <= 0 {
		return 0
	}
	return d.cfg.bw(float64(size), best)
}

// peakTime is the least time per message over any run of consecutive
// messages i..j: (done[j] - posted[i]) / (j - i + 1). perftest tries
// every pair, n²/2 of them, which for a run of a million iterations is
// minutes; here a bisection on the answer t asks, in one pass, whether
// some run does as well as t: done[j] - t(j+1) <= posted[i] - t i for an
// i <= j, keeping the best right side seen so far. Sixty halvings bring
// t to well under a nanosecond.
func peakTime(posted, done []time.Time) time.Duration {
	n := min(len(posted), len(done))
	if n == 0 {
		return 0
	}
	base := posted[0]
	p := func(i int) float64 { return float64(posted[i].Sub(base)) }
	q := func(j int) float64 { return float64(done[j].Sub(base)) }
	within := func(t float64) bool {
		bestLeft := math.Inf(-1)
		for j := range n {
			bestLeft = max(bestLeft, p(j)-t*float64(j))
			if q(j)-t*float64(j+1) <= bestLeft {
				return true
			}
		}
		return false
	}
	hi := q(0) - p(0) // the first message alone
	for j := range n {
		hi = max(hi, q(j)-p(j))
	}
	if hi <= 0 {
		return 0
	}
	lo := 0.0
	for range 60 {
		mid := (lo + hi) / 2
		if within(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return time.Duration(math.Ceil(hi))
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

// inOwnUnits returns a client's report in this side's unit. The report
// does not say its unit (perftest's server prints what the client sent
// under its own header), but its message rate and size do: a report whose
// bandwidth matches them in the other unit (the client had
// --report_gbits and this side not, or the other way) is converted, and
// from names the client's unit ("" when the report was left as it came).
func (c *Config) inOwnUnits(r Report) (out Report, from string) {
	if r.MsgMpp <= 0 || r.AvgBW <= 0 || r.Size == 0 {
		return r, ""
	}
	bytesPerSec := r.MsgMpp * 1e6 * float64(r.Size)
	other := Config{Gbits: !c.Gbits}
	own, theirs := c.bw(bytesPerSec, time.Second), other.bw(bytesPerSec, time.Second)
	near := func(a, b float64) bool { return math.Abs(a-b) <= 0.1*b }
	if near(r.AvgBW, own) || !near(r.AvgBW, theirs) {
		return r, ""
	}
	f := own / theirs
	r.AvgBW *= f
	r.PeakBW *= f
	return r, other.units()
}

// rows prints --run_infinitely's rows: every period (Duration) one of
// what completed in it, as perftest's printing thread does.
type rows struct {
	cfg       *Config
	role      string
	size      int
	last      time.Time
	lastCount int
}

func newRows(cfg *Config, role string, size int, now time.Time) *rows {
	return &rows{cfg: cfg, role: role, size: size, last: now}
}

// tick prints a row if a period has passed since the last, count being
// what has completed so far.
func (r *rows) tick(now time.Time, count int) {
	if !r.cfg.Infinite || now.Sub(r.last) < r.cfg.Duration {
		return
	}
	n, el := count-r.lastCount, now.Sub(r.last)
	res := Result{Test: r.cfg.Test.String(), Role: r.role, Bytes: r.size, Iters: n, Units: r.cfg.units()}
	res.BWAvg = r.cfg.bw(float64(r.size)*float64(n), el)
	res.MsgRate = float64(n) / el.Seconds() / 1e6
	if r.cfg.emit != nil {
		r.cfg.emit(res)
	}
	r.last, r.lastCount = now, count
}

// opcode is the work request a bandwidth test posts.
func (c *Config) opcode() verbs.WROpcode {
	switch {
	case c.Test.send():
		return verbs.WRSend
	case c.Test.read():
		return verbs.WRRDMARead
	case c.Test.atomic() && c.Atomic == CmpAndSwap:
		return verbs.WRAtomicCmpAndSwp
	case c.Test.atomic():
		return verbs.WRAtomicFetchAdd
	}
	return verbs.WRRDMAWrite
}

// warmUp is perftest's --perform_warm_up for the WRITE, READ and atomic
// tests: a list (-l, else the send queue's depth) of size-byte work
// requests on every QP, each waited for, before the measured run.
func (d *rdma) warmUp(ctx context.Context, size int, op verbs.WROpcode, list int) error {
	k := min(list, d.cfg.TxDepth)
	wrs, sges := make([]verbs.SendWR, k), make([]verbs.SGE, k)
	for i, qp := range d.qps {
		for j := range wrs {
			off := cycleOffset(j, size)
			if d.cfg.Test.atomic() {
				off = j % (cycleBuffer / cacheLine) * cacheLine
			}
			sges[j] = verbs.SGE{Addr: d.mr.Addr + uint64(d.sendOff(i)+off), Length: uint32(size), LKey: d.mr.LKey}
			wrs[j] = verbs.SendWR{WRID: uint64(j), Opcode: op, Flags: verbs.SendSignaled, SGL: sges[j : j+1],
				RemoteAddr: d.peer[i].VAddr + uint64(off), RKey: d.peer[i].RKey}
			if op == verbs.WRAtomicFetchAdd {
				wrs[j].CompareAdd = 1
			}
		}
		if j, err := qp.PostSend(wrs); err != nil {
			return fmt.Errorf("perftest: warm-up: post %d on QP %d: %w", j, i, err)
		}
		for done := 0; done < k; {
			wcs, err := d.poll(ctx, d.scq)
			if err != nil {
				return fmt.Errorf("perftest: warm-up: %w", err)
			}
			done += len(wcs)
		}
	}
	return nil
}
