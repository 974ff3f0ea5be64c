package hpubench

// The application rows: each application of hpu/apps with its handlers on
// the receiving NIC of a live pair, against a host baseline on the same
// pair, in the same run: the data moves as plain RDMA WRITEs (or SENDs,
// for the key-value cache) and the receiving host does the application's
// work itself. Every run checks its result against a reference the
// benchmark computes beforehand and fails if they differ.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/hpu"
	"github.com/softrnic/softrnic/hpu/apps"
)

var le = binary.LittleEndian

// AppsConfig sizes the application rows.
type AppsConfig struct {
	Size        int // bytes per message (and per aggregated vector), a multiple of 64 (default 65536)
	Messages    int // messages per row of reduction, filtering, histogram and scatter (default 500)
	Rounds      int // aggregation rounds (default 300)
	GETs        int // key-value GETs one at a time, for their latency (default 2000)
	RateGETs    int // key-value GETs for the rate rows (default 20000)
	Outstanding int // GETs in flight for the rate rows (default 32)
	Depth       int // WRITEs in flight for the message rows (default 8, at most 16)
	// Repeats is how many times each application runs, both ways in
	// turn; each way's row is its run of median rate (default 5): a
	// single run of a tenth of a second moved the NIC/host ratio by a
	// third from one run to the next on a shared machine.
	Repeats int

	// tamper ("NIC" or "host", for tests) corrupts every application's
	// reference before that way's run, which must then fail its check.
	tamper string
}

func (c *AppsConfig) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Size, 64<<10)
	def(&c.Messages, 500)
	def(&c.Rounds, 300)
	def(&c.GETs, 2000)
	def(&c.RateGETs, 20000)
	def(&c.Outstanding, 32)
	def(&c.Depth, 8)
	def(&c.Repeats, 5)
	c.Depth = min(c.Depth, appSlots)
	c.Outstanding = min(c.Outstanding, kvSlots/2)
}

// AppRow is one application run one way.
type AppRow struct {
	App      string        // the application (and, for the cache, the GET pattern)
	Way      string        // "NIC": handlers on the receiving NIC; "host": plain WRITEs or SENDs, the host doing the work
	Work     string        // what was done
	Ops      int           // rounds, messages or GETs done
	Unit     string        // what Ops counts, per second: "rounds/s", "msgs/s", "GETs/s"
	Elapsed  time.Duration // the run (aggregation: less the checks between rounds)
	P50, P99 time.Duration // GET latency (key-value rows), else 0
	// HostBytes is what the receiving NIC wrote to host memory during
	// the run (its DMA engine's WriteBytes): data, results and CQEs.
	HostBytes uint64
	Runs      int  // the runs this row is the median of (AppsConfig.Repeats)
	Verified  bool // the result equalled the benchmark's reference
}

// Rate is Ops per second.
func (r AppRow) Rate() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

// The link's shape.
const (
	appMTU     = 3  // path MTU enum: 1024 bytes
	appTimeout = 14 // ACK timeout exponent
	appSenders = 4  // aggregation: sender QPs
	appSlots   = 16 // host landing slots of the message rows (at least Depth)
	appSources = 17 // source messages: message k sends source k mod 17, so a slot reused holds another
	appQPs     = 8  // scatter: QPs, one message in flight each
	appRunMax  = 3 * time.Minute
)

// appEnd is one side: a device, its PD, one CQ for everything, QPs and a
// registered buffer.
type appEnd struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qps []*verbs.QP
	buf []byte
	mr  *verbs.MR
	ah  verbs.AH
}

// appLink is two devices over an in-memory port pair, their QPs connected
// pairwise (RC).
type appLink struct {
	pa, pb *porttest.Port
	a, b   *appEnd
}

func openEnd(p *porttest.Port, mac wire.MAC, ip string, qps, size int) (*appEnd, error) {
	e := &appEnd{ah: verbs.AH{DestMAC: mac, DestGID: netip.MustParseAddr(ip)}, buf: make([]byte, size)}
	var err error
	if e.dev, err = verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: mac, IP: e.ah.DestGID}, Port: p}); err != nil {
		return nil, err
	}
	if e.pd, err = e.dev.AllocPD(); err != nil {
		return e, err
	}
	if e.cq, err = e.dev.CreateCQ(4096); err != nil {
		return e, err
	}
	for range qps {
		qp, err := e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 512, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return e, err
		}
		e.qps = append(e.qps, qp)
	}
	e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	return e, err
}

// openApps opens a link with qps QP pairs and buffers of aSize and bSize
// bytes; close releases everything.
func openApps(qps, aSize, bSize int) (*appLink, error) {
	l := &appLink{}
	l.pa, l.pb = porttest.NewPair(porttest.Config{Buffers: 8192})
	var err error
	if l.a, err = openEnd(l.pa, wire.MAC{2, 0, 0, 0, 0x5a, 1}, "10.51.0.1", qps, aSize); err == nil {
		l.b, err = openEnd(l.pb, wire.MAC{2, 0, 0, 0, 0x5a, 2}, "10.51.0.2", qps, bSize)
	}
	for i := 0; err == nil && i < qps; i++ {
		err = verbs.ConnectRC(l.a.qps[i], l.b.qps[i], l.a.ah, l.b.ah, appMTU, appTimeout)
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *appLink) close() {
	for _, e := range []*appEnd{l.a, l.b} {
		if e != nil && e.dev != nil {
			e.dev.Close()
		}
	}
	l.pa.Close()
	l.pb.Close()
}

// region registers n more bytes of B's host memory (a context's host
// region).
func (e *appEnd) region(n int) (*verbs.MR, []byte, error) {
	buf := make([]byte, n)
	mr, err := e.pd.RegMR(buf, verbs.AccessLocalWrite)
	return mr, buf, err
}

// written is what B's NIC has written to host memory so far.
func (l *appLink) written() uint64 { return l.b.dev.DMA().WriteBytes.Load() }

// reset clears B's buffers and hands them back to its NIC: what one way
// left there cannot pass for the other's result.
func (l *appLink) reset(more ...[]byte) {
	clear(l.b.buf)
	for _, b := range more {
		clear(b)
	}
	l.b.dev.Fence()
}

// write posts a signaled WRITE of n bytes of A's buffer at src to B's at
// dst on QP q.
func (l *appLink) write(q int, id uint64, src, n, dst int) error {
	_, err := l.a.qps[q].PostSend([]verbs.SendWR{{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: l.a.mr.Addr + uint64(src), Length: uint32(n), LKey: l.a.mr.LKey}},
		RemoteAddr: l.b.mr.Addr + uint64(dst), RKey: l.b.mr.RKey}})
	return err
}

// stream WRITEs n messages of size bytes, message k on QP k mod qps from
// A's buffer at src(k) to B's at dst(k), at most window in flight per QP;
// consume(k), if set, runs as k's completion comes (in order per QP). It
// returns the time from the first post to the last consume.
func (l *appLink) stream(ctx context.Context, n, size, qps, window int, src, dst func(k int) int, consume func(k int) error) (time.Duration, error) {
	inflight := make([]int, qps)
	wc := make([]verbs.WC, 64)
	posted, done := 0, 0
	start := time.Now()
	for done < n {
		for posted < n && inflight[posted%qps] < window {
			if err := l.write(posted%qps, uint64(posted), src(posted), size, dst(posted)); err != nil {
				return 0, err
			}
			inflight[posted%qps]++
			posted++
		}
		k := l.a.cq.Poll(wc)
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				return 0, fmt.Errorf("WRITE %d completed with %v", c.WRID, c.Status)
			}
			m := int(c.WRID)
			inflight[m%qps]--
			done++
			if consume != nil {
				if err := consume(m); err != nil {
					return 0, err
				}
			}
		}
		if k == 0 {
			if err := l.a.cq.Wait(ctx); err != nil {
				return 0, fmt.Errorf("%d of %d WRITEs completed: %w", done, n, err)
			}
		}
	}
	return time.Since(start), nil
}

// reap takes the WRITE completions A has (all of want, if block), and
// returns how many it took.
func (l *appLink) reap(ctx context.Context, want int, block bool) (int, error) {
	wc := make([]verbs.WC, 64)
	got := 0
	for got < want {
		k := l.a.cq.Poll(wc[:min(len(wc), want-got)])
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				return got, fmt.Errorf("WRITE %d completed with %v", c.WRID, c.Status)
			}
		}
		got += k
		if k == 0 {
			if !block {
				break
			}
			if err := l.a.cq.Wait(ctx); err != nil {
				return got, err
			}
		}
	}
	return got, nil
}

// waitPlaced waits until B has placed want WRITEs in all: loading the
// count orders their data before the host's reads of it.
func (l *appLink) waitPlaced(ctx context.Context, want uint64) error {
	for seen := l.b.dev.WritesPlaced(); seen < want; {
		var err error
		if seen, err = l.b.dev.WaitWritesPlaced(ctx, seen); err != nil {
			return fmt.Errorf("%d WRITEs placed, waiting for %d: %w", seen, want, err)
		}
	}
	return nil
}

// failure keeps the first error handlers report (they run on HPU
// goroutines).
type failure struct {
	mu  sync.Mutex
	err error
}

func (f *failure) set(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *failure) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// fillInt32 fills b with random little-endian int32s from rng, in [lo, hi).
func fillInt32(rng *rand.Rand, b []byte, lo, hi int64) {
	for i := 0; i+4 <= len(b); i += 4 {
		le.PutUint32(b[i:], uint32(int32(lo+rng.Int64N(hi-lo))))
	}
}

func sizeName(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

// appAggregate: appSenders QPs each WRITE a vector of int32 to one
// receiver, which needs their sum. NIC: apps.NewAggregate, one context
// shared by the receiving QPs, attached afresh every round; a round ends
// when the NIC notifies that the sum is in host memory. Host: the vectors
// land in one buffer each and the host sums them.
func appAggregate(ctx context.Context, cfg AppsConfig) ([]AppRow, error) {
	size, elems, rounds := cfg.Size, cfg.Size/4, cfg.Rounds
	l, err := openApps(appSenders, 2*appSenders*size, appSenders*size)
	if err != nil {
		return nil, err
	}
	defer l.close()
	sumMR, sum, err := l.b.region(size)
	if err != nil {
		return nil, err
	}
	// Two sets of vectors, rounds alternating: a sum left from the round
	// before is not this round's.
	rng := rand.New(rand.NewPCG(1, 1))
	var ref [2][]byte
	for set := range 2 {
		acc := make([]int32, elems)
		for s := range appSenders {
			v := l.a.buf[(set*appSenders+s)*size:][:size]
			fillInt32(rng, v, math.MinInt32/4, math.MaxInt32/4)
			for i := range acc {
				acc[i] += int32(le.Uint32(v[4*i:]))
			}
		}
		ref[set] = make([]byte, size)
		for i, x := range acc {
			le.PutUint32(ref[set][4*i:], uint32(x))
		}
	}
	spoil := func(way string) {
		if cfg.tamper == way {
			ref[0][0] ^= 1
		}
	}
	post := func(r int) error {
		for s := range appSenders {
			if err := l.write(s, uint64(r*appSenders+s), ((r%2)*appSenders+s)*size, size, s*size); err != nil {
				return err
			}
		}
		return nil
	}
	work := fmt.Sprintf("%d rounds of %d x %s", rounds, appSenders, sizeName(size))
	var rows []AppRow

	// NIC.
	spoil("NIC")
	notified := make(chan struct{}, 1)
	var extra atomic.Int32
	notify := func() {
		select {
		case notified <- struct{}{}:
		default:
			extra.Add(1)
		}
	}
	// One aggregation for every round, as a synchronous allreduce keeps
	// its collective installed: its sum starts again from zero after each
	// round's notification, before which no sender posts the next round.
	agg, err := apps.NewAggregateRounds(l.b.qps[0].Handlers(verbs.Match{}), sumMR.Region(), elems, appSenders, false, notify)
	if err != nil {
		return nil, err
	}
	for _, qp := range l.b.qps[1:] {
		if err := qp.ShareHandlers(agg.In, verbs.Match{}); err != nil {
			return nil, err
		}
	}
	w0 := l.written()
	var checking time.Duration
	reaped := 0
	start := time.Now()
	for r := range rounds {
		if err := post(r); err != nil {
			return nil, err
		}
		select {
		case <-notified:
		case <-ctx.Done():
			return nil, fmt.Errorf("NIC round %d: no notification: %w", r, ctx.Err())
		}
		t := time.Now()
		if !bytes.Equal(sum, ref[r%2]) {
			return nil, fmt.Errorf("NIC round %d: the sum in host memory differs from the reference", r)
		}
		checking += time.Since(t)
		n, err := l.reap(ctx, appSenders*rounds-reaped, false)
		if reaped += n; err != nil {
			return nil, err
		}
	}
	elapsed := time.Since(start) - checking
	if _, err := l.reap(ctx, appSenders*rounds-reaped, true); err != nil {
		return nil, err
	}
	if n := extra.Load() + int32(len(notified)); n != 0 {
		return nil, fmt.Errorf("NIC: %d notifications more than rounds", n)
	}
	rows = append(rows, AppRow{App: "aggregation", Way: "NIC", Work: work, Ops: rounds, Unit: "rounds/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true})
	for _, qp := range l.b.qps {
		qp.DetachHandlers()
	}

	// Host.
	spoil("host")
	l.reset(sum)
	host := make([]byte, size)
	w0, base := l.written(), l.b.dev.WritesPlaced()
	checking, reaped = 0, 0
	start = time.Now()
	for r := range rounds {
		if err := post(r); err != nil {
			return nil, err
		}
		if err := l.waitPlaced(ctx, base+uint64(appSenders*(r+1))); err != nil {
			return nil, fmt.Errorf("host round %d: %w", r, err)
		}
		v0, v1, v2, v3 := l.b.buf[:size], l.b.buf[size:2*size], l.b.buf[2*size:3*size], l.b.buf[3*size:4*size]
		// The handlers' element loop (apps.AddInt32), so that the two
		// ways differ in where the work runs, not in how it is coded.
		copy(host, v0)
		for _, v := range [][]byte{v1, v2, v3} {
			apps.AddInt32(host, v)
		}
		t := time.Now()
		if !bytes.Equal(host, ref[r%2]) {
			return nil, fmt.Errorf("host round %d: the host's sum differs from the reference", r)
		}
		checking += time.Since(t)
		n, err := l.reap(ctx, appSenders*rounds-reaped, false)
		if reaped += n; err != nil {
			return nil, err
		}
	}
	elapsed = time.Since(start) - checking
	if _, err := l.reap(ctx, appSenders*rounds-reaped, true); err != nil {
		return nil, err
	}
	return append(rows, AppRow{App: "aggregation", Way: "host", Work: work, Ops: rounds, Unit: "rounds/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true}), nil
}

// appReduce: messages of int32 reduced to their int64 sum. NIC:
// apps.NewReduce, 8 bytes per message reach host memory. Host: the
// message lands, the host sums it.
func appReduce(ctx context.Context, cfg AppsConfig) ([]AppRow, error) {
	size, n := cfg.Size, cfg.Messages
	const slots = 64 // result slots: more than the messages a QP has waiting for handlers
	l, err := openApps(1, appSources*size, max(appSources, appSlots)*size)
	if err != nil {
		return nil, err
	}
	defer l.close()
	resMR, res, err := l.b.region(slots * 8)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(2, 2))
	sums := make([]int64, appSources)
	for s := range appSources {
		v := l.a.buf[s*size:][:size]
		fillInt32(rng, v, math.MinInt32, math.MaxInt32)
		for i := 0; i < size; i += 4 {
			sums[s] += int64(int32(le.Uint32(v[i:])))
		}
	}
	spoil := func(way string) {
		if cfg.tamper == way {
			sums[0]++
		}
	}
	src := func(k int) int { return k % appSources * size }
	work := fmt.Sprintf("%d messages of %s, %d in flight", n, sizeName(size), cfg.Depth)
	var rows []AppRow

	// NIC: the handler's Done checks each result, which lands at 8 x (MSN
	// mod slots); the WRITE's address names the source.
	spoil("NIC")
	var bad failure
	var checked atomic.Int64
	if _, err := apps.NewReduce(l.b.qps[0].Handlers(verbs.Match{}), resMR.Region(), apps.Sum, slots, func(msg *hpu.Message, err error) {
		if err != nil {
			bad.set(err)
			return
		}
		s := int((msg.VA - l.b.mr.Addr) / uint64(size))
		if got := int64(le.Uint64(res[8*(msg.MSN%slots):])); got != sums[s] {
			bad.set(fmt.Errorf("NIC: the message of MSN %d: sum %d, want %d", msg.MSN, got, sums[s]))
		}
		checked.Add(1)
	}); err != nil {
		return nil, err
	}
	w0 := l.written()
	elapsed, err := l.stream(ctx, n, size, 1, cfg.Depth, src, src, nil)
	if err != nil {
		return nil, fmt.Errorf("NIC: %w", err)
	}
	if err := bad.get(); err != nil {
		return nil, err
	}
	if c := checked.Load(); c != int64(n) {
		return nil, fmt.Errorf("NIC: %d results checked of %d messages", c, n)
	}
	rows = append(rows, AppRow{App: "reduction (sum)", Way: "NIC", Work: work, Ops: n, Unit: "msgs/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true})
	l.b.qps[0].DetachHandlers()

	// Host.
	spoil("host")
	l.reset(res)
	w0, base := l.written(), l.b.dev.WritesPlaced()
	done := 0
	elapsed, err = l.stream(ctx, n, size, 1, cfg.Depth, src, func(k int) int { return k % appSlots * size }, func(k int) error {
		done++
		if err := l.waitPlaced(ctx, base+uint64(done)); err != nil {
			return err
		}
		s := apps.Reduce(l.b.buf[k%appSlots*size:][:size], apps.Sum) // the handlers' loop
		if want := sums[k%appSources]; s != want {
			return fmt.Errorf("message %d: the host summed %d, want %d", k, s, want)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	return append(rows, AppRow{App: "reduction (sum)", Way: "host", Work: work, Ops: n, Unit: "msgs/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true}), nil
}

// appFilter: every other message matches the drop predicate (its first
// byte). NIC: apps.NewFilter with the NIC's default placement; dropped
// messages never reach host memory. Host: every message lands, the host
// checks the predicate.
func appFilter(ctx context.Context, cfg AppsConfig) ([]AppRow, error) {
	size, n := cfg.Size, cfg.Messages
	const sources = 18                          // even: message k's source has k's parity
	const mark = 0xdd                           // the first byte of a message to drop
	l, err := openApps(1, sources*size, n*size) // a slot per message: checked after the run
	if err != nil {
		return nil, err
	}
	defer l.close()
	rng := rand.New(rand.NewPCG(3, 3))
	want := make([][]byte, sources)
	for s := range sources {
		v := l.a.buf[s*size:][:size]
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		v[0] = 0x11
		if s%2 == 0 {
			v[0] = mark
		}
		want[s] = slices.Clone(v)
	}
	spoil := func(way string) {
		if cfg.tamper == way {
			want[1][7] ^= 1
		}
	}
	drop := func(first []byte) bool { return len(first) > 0 && first[0] == mark }
	kept := n / 2 // the odd messages
	zero := make([]byte, size)
	src := func(k int) int { return k % sources * size }
	dst := func(k int) int { return k * size }
	// check: every message's slot holds it if it landed, else nothing.
	check := func(landed func(k int) bool) error {
		l.b.dev.Fence() // the NIC has finished with what it placed
		for k := range n {
			v := l.b.buf[dst(k):][:size]
			switch {
			case landed(k) && !bytes.Equal(v, want[k%sources]):
				return fmt.Errorf("message %d (kept) differs in host memory", k)
			case !landed(k) && !bytes.Equal(v, zero):
				return fmt.Errorf("message %d (dropped) reached host memory", k)
			}
		}
		return nil
	}
	work := fmt.Sprintf("%d messages of %s, half dropped, %d in flight", n, sizeName(size), cfg.Depth)
	var rows []AppRow

	// NIC.
	spoil("NIC")
	var bad failure
	in, err := apps.NewFilter(l.b.qps[0].Handlers(verbs.Match{}), drop, nil, func(msg *hpu.Message, err error) {
		if err != nil {
			bad.set(err)
		}
	})
	if err != nil {
		return nil, err
	}
	w0 := l.written()
	elapsed, err := l.stream(ctx, n, size, 1, cfg.Depth, src, dst, nil)
	if err != nil {
		return nil, fmt.Errorf("NIC: %w", err)
	}
	if err := bad.get(); err != nil {
		return nil, fmt.Errorf("NIC: %w", err)
	}
	if err := check(func(k int) bool { return k%2 == 1 }); err != nil {
		return nil, fmt.Errorf("NIC: %w", err)
	}
	pkts := uint64((size + 1023) / 1024)
	if p, m := in.Stats.Proceeded.Load(), in.Stats.Messages.Load(); p != uint64(kept)*pkts || m != uint64(n) {
		return nil, fmt.Errorf("NIC: %d packets placed of %d messages, want %d of %d", p, m, uint64(kept)*pkts, n)
	}
	rows = append(rows, AppRow{App: "filtering", Way: "NIC", Work: work, Ops: n, Unit: "msgs/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true})
	l.b.qps[0].DetachHandlers()

	// Host.
	spoil("host")
	l.reset()
	w0, base := l.written(), l.b.dev.WritesPlaced()
	done, hostKept := 0, 0
	elapsed, err = l.stream(ctx, n, size, 1, cfg.Depth, src, dst, func(k int) error {
		done++
		if err := l.waitPlaced(ctx, base+uint64(done)); err != nil {
			return err
		}
		if !drop(l.b.buf[dst(k):][:size]) {
			hostKept++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	if hostKept != kept {
		return nil, fmt.Errorf("host: kept %d messages, want %d", hostKept, kept)
	}
	if err := check(func(int) bool { return true }); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	return append(rows, AppRow{App: "filtering", Way: "host", Work: work, Ops: n, Unit: "msgs/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true}), nil
}

// histRef is a histogram as the benchmark counts it.
type histRef struct {
	bins     []uint64
	count    uint64
	sum      int64
	min, max int32
}

func newHistRef(bins int) histRef {
	return histRef{bins: make([]uint64, bins), min: math.MaxInt32, max: math.MinInt32}
}

// add counts the int32 values of v: the host's work.
func (h *histRef) add(v []byte, lo, hi int32) {
	bins, width := len(h.bins), int64(hi)-int64(lo)
	for i := 0; i+4 <= len(v); i += 4 {
		x := int32(le.Uint32(v[i:]))
		b := 0
		switch {
		case x >= hi:
			b = bins - 1
		case x > lo:
			b = int((int64(x) - int64(lo)) * int64(bins) / width)
		}
		h.bins[b]++
		h.sum += int64(x)
		h.min, h.max = min(h.min, x), max(h.max, x)
	}
	h.count += uint64(len(v) / 4)
}

func (h *histRef) merge(o *histRef) {
	for i, c := range o.bins {
		h.bins[i] += c
	}
	h.count += o.count
	h.sum += o.sum
	h.min, h.max = min(h.min, o.min), max(h.max, o.max)
}

func (h *histRef) equal(o *histRef) bool {
	return slices.Equal(h.bins, o.bins) && h.count == o.count && h.sum == o.sum && h.min == o.min && h.max == o.max
}

// appHistogram: messages of int32 values counted into bins. NIC:
// apps.NewHistogram, whose completion handlers DMA the counts to host
// memory. Host: the message lands, the host bins it.
func appHistogram(ctx context.Context, cfg AppsConfig) ([]AppRow, error) {
	size, n := cfg.Size, cfg.Messages
	const bins, lo, hi = 256, -1 << 20, 1 << 20
	l, err := openApps(1, appSources*size, max(appSources, appSlots)*size)
	if err != nil {
		return nil, err
	}
	defer l.close()
	histMR, hist, err := l.b.region(4*bins + 24)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(4, 4))
	per := make([]histRef, appSources)
	for s := range appSources {
		v := l.a.buf[s*size:][:size]
		fillInt32(rng, v, -3<<19, 3<<19) // a quarter of the values below lo or above hi
		per[s] = newHistRef(bins)
		per[s].add(v, lo, hi)
	}
	ref := newHistRef(bins)
	for k := range n {
		ref.merge(&per[k%appSources])
	}
	spoil := func(way string) {
		if cfg.tamper == way {
			ref.bins[0]++
		}
	}
	src := func(k int) int { return k % appSources * size }
	work := fmt.Sprintf("%d messages of %s, %d bins, %d in flight", n, sizeName(size), bins, cfg.Depth)
	var rows []AppRow

	// NIC.
	spoil("NIC")
	var bad failure
	h, err := apps.NewHistogram(l.b.qps[0].Handlers(verbs.Match{}), histMR.Region(), bins, lo, hi, func(msg *hpu.Message, err error) {
		if err != nil {
			bad.set(err)
		}
	})
	if err != nil {
		return nil, err
	}
	w0 := l.written()
	elapsed, err := l.stream(ctx, n, size, 1, cfg.Depth, src, src, nil)
	if err != nil {
		return nil, fmt.Errorf("NIC: %w", err)
	}
	if err := bad.get(); err != nil {
		return nil, fmt.Errorf("NIC: %w", err)
	}
	snap := h.Snapshot()
	got := histRef{bins: snap.Bins, count: snap.Count, sum: snap.Sum, min: snap.Min, max: snap.Max}
	if !got.equal(&ref) {
		return nil, errors.New("NIC: the histogram in handler memory differs from the reference")
	}
	// And its last picture in host memory.
	l.b.dev.Fence()
	got = histRef{bins: make([]uint64, bins), count: le.Uint64(hist[4*bins:]), sum: int64(le.Uint64(hist[4*bins+8:])),
		min: int32(le.Uint32(hist[4*bins+16:])), max: int32(le.Uint32(hist[4*bins+20:]))}
	for i := range got.bins {
		got.bins[i] = uint64(le.Uint32(hist[4*i:]))
	}
	if !got.equal(&ref) {
		return nil, errors.New("NIC: the histogram in host memory differs from the reference")
	}
	rows = append(rows, AppRow{App: "histogram", Way: "NIC", Work: work, Ops: n, Unit: "msgs/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true})
	l.b.qps[0].DetachHandlers()

	// Host.
	spoil("host")
	l.reset(hist)
	w0, base := l.written(), l.b.dev.WritesPlaced()
	host := newHistRef(bins)
	done := 0
	elapsed, err = l.stream(ctx, n, size, 1, cfg.Depth, src, func(k int) int { return k % appSlots * size }, func(k int) error {
		done++
		if err := l.waitPlaced(ctx, base+uint64(done)); err != nil {
			return err
		}
		host.add(l.b.buf[k%appSlots*size:][:size], lo, hi)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	if !host.equal(&ref) {
		return nil, errors.New("host: the host's histogram differs from the reference")
	}
	return append(rows, AppRow{App: "histogram", Way: "host", Work: work, Ops: n, Unit: "msgs/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true}), nil
}

// appScatter: messages placed into a strided layout (blocks of 64 bytes
// every 128). NIC: apps.NewScatter, one context and layout per QP, appQPs
// QPs with a message in flight each. Host: the same QPs; the message
// lands contiguous and the host copies it into the layout.
func appScatter(ctx context.Context, cfg AppsConfig) ([]AppRow, error) {
	size, n := cfg.Size, cfg.Messages
	const block, stride, gapByte = 64, 128, 0xee
	span := size / block * stride // a message's layout
	l, err := openApps(appQPs, appSources*size, appQPs*size)
	if err != nil {
		return nil, err
	}
	defer l.close()
	strMR, str, err := l.b.region(appQPs * span)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(5, 5))
	want := make([][]byte, appSources)
	for s := range appSources {
		v := l.a.buf[s*size:][:size]
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		want[s] = slices.Clone(v)
	}
	spoil := func(way string) {
		if cfg.tamper == way {
			want[0][3] ^= 1
		}
	}
	gap := bytes.Repeat([]byte{gapByte}, stride-block)
	src := func(k int) int { return k % appSources * size }
	dst := func(k int) int { return k % appQPs * size }
	// check: message k's layout holds it, block by block, and the gaps
	// are untouched. It runs as each message completes, before its
	// layout is reused (other messages are in flight meanwhile), so its
	// time is the run's, the same both ways.
	check := func(k int) error {
		r, w := str[k%appQPs*span:][:span], want[k%appSources]
		for i := 0; i < size; i += block {
			at := i / block * stride
			if !bytes.Equal(r[at:at+block], w[i:i+block]) || !bytes.Equal(r[at+block:at+stride], gap) {
				return fmt.Errorf("message %d differs in its strided layout at block %d", k, i/block)
			}
		}
		return nil
	}
	prefill := func() {
		for i := range str {
			str[i] = gapByte
		}
	}
	work := fmt.Sprintf("%d messages of %s, blocks of %d every %d, %d QPs x 1 in flight", n, sizeName(size), block, stride, appQPs)
	var rows []AppRow

	// NIC.
	spoil("NIC")
	prefill()
	l.b.dev.Fence()
	var bad failure
	for q, qp := range l.b.qps {
		if _, err := apps.NewScatter(qp.Handlers(verbs.Match{}), strMR.Region(), apps.Strided{Block: block, Stride: stride, Offset: q * span},
			func(msg *hpu.Message, err error) {
				if err != nil {
					bad.set(err)
				}
			}); err != nil {
			return nil, err
		}
	}
	w0 := l.written()
	elapsed, err := l.stream(ctx, n, size, appQPs, 1, src, dst, check)
	if err != nil {
		return nil, fmt.Errorf("NIC: %w", err)
	}
	if err := bad.get(); err != nil {
		return nil, fmt.Errorf("NIC: %w", err)
	}
	rows = append(rows, AppRow{App: "strided scatter", Way: "NIC", Work: work, Ops: n, Unit: "msgs/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true})
	for _, qp := range l.b.qps {
		qp.DetachHandlers()
	}

	// Host.
	spoil("host")
	l.reset()
	prefill()
	w0, base := l.written(), l.b.dev.WritesPlaced()
	done := 0
	elapsed, err = l.stream(ctx, n, size, appQPs, 1, src, dst, func(k int) error {
		done++
		if err := l.waitPlaced(ctx, base+uint64(done)); err != nil {
			return err
		}
		v, r := l.b.buf[dst(k):][:size], str[k%appQPs*span:][:span]
		for i := 0; i < size; i += block {
			copy(r[i/block*stride:], v[i:i+block])
		}
		return check(k)
	})
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	return append(rows, AppRow{App: "strided scatter", Way: "host", Work: work, Ops: n, Unit: "msgs/s", Elapsed: elapsed, HostBytes: l.written() - w0, Verified: true}), nil
}

// The key-value rows' buffers.
const (
	kvKeys     = 1024
	kvValue    = 64
	kvReply    = apps.KVHeader + kvValue
	kvSlotBits = 6
	kvSlots    = 1 << kvSlotBits         // A: GETs in flight at most (request buffers); also A's and B's RECVs
	kvReplyAt  = kvSlots * apps.KVHeader // A: the reply buffers, kvSlots of kvReply bytes, after the requests
	kvReqSize  = 64                      // B (host): a RECV buffer for a request
	kvReps     = 128                     // B (host): reply buffers
	kvRepsAt   = kvSlots * kvReqSize     // B (host): where they are, after the RECV buffers
)

// kvKey is the key GET number seq asks for.
func kvKey(seq int) uint64 { return 1 + uint64(seq*7919%kvKeys) }

// kvValueOf is key's value.
func kvValueOf(key uint64) []byte {
	v := make([]byte, kvValue)
	for j := 0; j < kvValue; j += 8 {
		le.PutUint64(v[j:], key*0x9e3779b97f4a7c15+uint64(j))
	}
	return v
}

// kvPostRecv posts A's RECV j (a reply buffer).
func (l *appLink) kvPostRecv(j int) error {
	_, err := l.a.qps[0].PostRecv([]verbs.RecvWR{{WRID: uint64(j), SGL: []verbs.SGE{{Addr: l.a.mr.Addr + uint64(kvReplyAt+j*kvReply), Length: kvReply, LKey: l.a.mr.LKey}}}})
	return err
}

// kvGets issues n GETs from A as SENDs of apps.KVHeader bytes, at most
// outstanding awaiting their reply, and checks every reply against
// values (by key). It returns the time from the first GET to the last
// reply, and each GET's latency (its post to its reply's completion).
func (l *appLink) kvGets(ctx context.Context, n, outstanding int, values map[uint64][]byte) (time.Duration, []time.Duration, error) {
	a, qp := l.a, l.a.qps[0]
	free := make([]int, 0, kvSlots)
	for s := kvSlots - 1; s >= 0; s-- {
		free = append(free, s)
	}
	var sent, replied [kvSlots]bool
	var seqOf [kvSlots]int
	var posted [kvSlots]time.Time
	lat := make([]time.Duration, 0, n)
	wc := make([]verbs.WC, 64)
	issued, got, awaiting := 0, 0, 0
	var end time.Time
	start := time.Now()
	for got < n || len(free) < kvSlots {
		for issued < n && awaiting < outstanding && len(free) > 0 {
			s := free[len(free)-1]
			free = free[:len(free)-1]
			req := a.buf[s*apps.KVHeader:][:apps.KVHeader]
			req[0], req[1], req[2], req[3] = apps.KVGet, 0, 0, 0
			le.PutUint32(req[4:], uint32(issued)<<kvSlotBits|uint32(s))
			le.PutUint64(req[8:], kvKey(issued))
			seqOf[s], sent[s], replied[s] = issued, false, false
			posted[s] = time.Now()
			if _, err := qp.PostSend([]verbs.SendWR{{WRID: uint64(s), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{{Addr: a.mr.Addr + uint64(s*apps.KVHeader), Length: apps.KVHeader, LKey: a.mr.LKey}}}}); err != nil {
				return 0, nil, err
			}
			issued++
			awaiting++
		}
		k := a.cq.Poll(wc)
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				return 0, nil, fmt.Errorf("GET %s completed with %v", map[bool]string{true: "reply", false: "request"}[c.Opcode == verbs.WCRecv], c.Status)
			}
			switch c.Opcode {
			case verbs.WCSend:
				s := int(c.WRID)
				if sent[s] = true; replied[s] {
					free = append(free, s)
				}
			case verbs.WCRecv:
				j := int(c.WRID)
				rep := a.buf[kvReplyAt+j*kvReply:][:kvReply]
				id := le.Uint32(rep[4:])
				s, seq := int(id&(kvSlots-1)), int(id>>kvSlotBits)
				if c.ByteLen != kvReply || seq >= issued || seqOf[s] != seq || replied[s] {
					return 0, nil, fmt.Errorf("a reply of %d bytes, id %#x, to no GET awaiting one", c.ByteLen, id)
				}
				key := kvKey(seq)
				if rep[0] != apps.KVHit || le.Uint64(rep[8:]) != key || !bytes.Equal(rep[apps.KVHeader:], values[key]) {
					return 0, nil, fmt.Errorf("GET %d of key %d: reply status %d key %d value %x, want a hit with %x",
						seq, key, rep[0], le.Uint64(rep[8:]), rep[apps.KVHeader:], values[key])
				}
				lat = append(lat, time.Since(posted[s]))
				if replied[s] = true; sent[s] {
					free = append(free, s)
				}
				awaiting--
				if got++; got == n {
					end = time.Now()
				}
				if err := l.kvPostRecv(j); err != nil {
					return 0, nil, err
				}
			default:
				return 0, nil, fmt.Errorf("a completion of opcode %d", c.Opcode)
			}
		}
		if k == 0 {
			if err := a.cq.Wait(ctx); err != nil {
				return 0, nil, fmt.Errorf("%d replies of %d GETs: %w", got, n, err)
			}
		}
	}
	return end.Sub(start), lat, nil
}

// kvHost is the host baseline's server on B: it answers every GET that
// comes in a RECV from a Go map, with a SEND built by kv.Reply, until ctx
// ends.
func (l *appLink) kvHost(ctx context.Context, kv *apps.KV, table map[uint64][]byte) error {
	b, qp := l.b, l.b.qps[0]
	recv := func(j int) error {
		_, err := qp.PostRecv([]verbs.RecvWR{{WRID: uint64(j), SGL: []verbs.SGE{{Addr: b.mr.Addr + uint64(j*kvReqSize), Length: kvReqSize, LKey: b.mr.LKey}}}})
		return err
	}
	free := make([]int, 0, kvReps)
	for s := range kvReps {
		free = append(free, s)
	}
	var backlog []int // requests waiting for a reply buffer
	serve := func(j int) error {
		s := free[len(free)-1]
		free = free[:len(free)-1]
		req := b.buf[j*kvReqSize:][:apps.KVHeader]
		if req[0] != apps.KVGet {
			return fmt.Errorf("host: a request of op %d", req[0])
		}
		id, key := le.Uint32(req[4:]), le.Uint64(req[8:])
		status := uint8(apps.KVHit)
		v, ok := table[key]
		if !ok {
			status = apps.KVMiss
		}
		at := kvRepsAt + s*kvReply
		kv.Reply(b.buf[at:at+kvReply:at+kvReply], status, id, key, v)
		if _, err := qp.PostSend([]verbs.SendWR{{WRID: uint64(s), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: b.mr.Addr + uint64(at), Length: kvReply, LKey: b.mr.LKey}}}}); err != nil {
			return err
		}
		return recv(j)
	}
	wc := make([]verbs.WC, 64)
	for {
		k := b.cq.Poll(wc)
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				return fmt.Errorf("host: a completion with %v", c.Status)
			}
			switch c.Opcode {
			case verbs.WCRecv:
				if c.ByteLen != apps.KVHeader {
					return fmt.Errorf("host: a request of %d bytes", c.ByteLen)
				}
				if len(free) == 0 {
					backlog = append(backlog, int(c.WRID))
					continue
				}
				if err := serve(int(c.WRID)); err != nil {
					return err
				}
			case verbs.WCSend:
				free = append(free, int(c.WRID))
				for len(backlog) > 0 && len(free) > 0 {
					j := backlog[0]
					backlog = backlog[1:]
					if err := serve(j); err != nil {
						return err
					}
				}
			default:
				return fmt.Errorf("host: a completion of opcode %d", c.Opcode)
			}
		}
		if k == 0 {
			if err := b.cq.Wait(ctx); err != nil {
				return nil // the run is over
			}
		}
	}
}

// appKV: a key-value cache of kvKeys keys, GETs over SEND/RECV, one at a
// time (latency) and Outstanding at once (rate). NIC: apps.NewKV on B's
// QP, every key Set beforehand, hits answered by the handlers with a SEND.
// Host: a goroutine on B answers each GET from a Go map.
func appKV(ctx context.Context, cfg AppsConfig) ([]AppRow, error) {
	l, err := openApps(1, kvReplyAt+kvSlots*kvReply, kvRepsAt+kvReps*kvReply)
	if err != nil {
		return nil, err
	}
	defer l.close()
	missMR, _, err := l.b.region(256 * kvReply)
	if err != nil {
		return nil, err
	}
	table := make(map[uint64][]byte, kvKeys) // the host's, and what the NIC holds
	for k := uint64(1); k <= kvKeys; k++ {
		table[k] = kvValueOf(k)
	}
	expect := table // what the replies must carry
	spoil := func(way string) {
		if cfg.tamper == way {
			expect = maps.Clone(expect)
			v := slices.Clone(expect[kvKey(0)])
			v[0] ^= 1
			expect[kvKey(0)] = v
		}
	}
	for j := range kvSlots {
		if err := l.kvPostRecv(j); err != nil {
			return nil, err
		}
	}
	warm := max(10, min(cfg.GETs/10, 200))
	one := fmt.Sprintf("%d GETs, 1 at a time, values of %d B", cfg.GETs, kvValue)
	many := fmt.Sprintf("%d GETs, %d outstanding", cfg.RateGETs, cfg.Outstanding)
	// run measures both patterns.
	run := func(ctx context.Context, way string) ([]AppRow, error) {
		if _, _, err := l.kvGets(ctx, warm, 1, expect); err != nil {
			return nil, fmt.Errorf("%s: warm-up: %w", way, err)
		}
		var rows []AppRow
		for _, p := range []struct {
			work      string
			n, window int
		}{{one, cfg.GETs, 1}, {many, cfg.RateGETs, cfg.Outstanding}} {
			w0 := l.written()
			el, lat, err := l.kvGets(ctx, p.n, p.window, expect)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", way, err)
			}
			slices.Sort(lat)
			app := "key-value GET, 1 at a time"
			if p.window > 1 {
				app = fmt.Sprintf("key-value GET, %d outstanding", p.window)
			}
			rows = append(rows, AppRow{App: app, Way: way, Work: p.work, Ops: p.n, Unit: "GETs/s", Elapsed: el,
				P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], HostBytes: l.written() - w0, Verified: true})
		}
		return rows, nil
	}

	// NIC.
	spoil("NIC")
	var misses atomic.Int64
	kv, err := apps.NewKV(l.b.qps[0].Handlers(verbs.Match{Ops: verbs.MatchSend}), missMR.Region(),
		apps.KVConfig{Buckets: 4096, ValueSize: kvValue, MissSlots: 256}, func(int) { misses.Add(1) })
	if err != nil {
		return nil, err
	}
	for k, v := range table {
		if err := kv.Set(k, v); err != nil {
			return nil, err
		}
	}
	nic, err := run(ctx, "NIC")
	if err != nil {
		return nil, err
	}
	total := uint64(warm + cfg.GETs + cfg.RateGETs)
	if h, m, s := kv.Stats.Hits.Load(), kv.Stats.Misses.Load(), kv.Stats.Sets.Load(); h != total || m != 0 || s != 0 || misses.Load() != 0 {
		return nil, fmt.Errorf("NIC: %d hits, %d misses, %d SETs; want %d hits", h, m, s, total)
	}
	l.b.qps[0].DetachHandlers()

	// Host.
	spoil("host")
	for j := range kvSlots {
		if _, err := l.b.qps[0].PostRecv([]verbs.RecvWR{{WRID: uint64(j), SGL: []verbs.SGE{{Addr: l.b.mr.Addr + uint64(j*kvReqSize), Length: kvReqSize, LKey: l.b.mr.LKey}}}}); err != nil {
			return nil, err
		}
	}
	hctx, stop := context.WithCancelCause(ctx)
	served := make(chan error, 1)
	go func() {
		err := l.kvHost(hctx, kv, table)
		if err != nil {
			stop(err)
		}
		served <- err
	}()
	host, err := run(hctx, "host") // ends if the server fails
	stop(nil)
	if herr := <-served; herr != nil {
		return nil, herr
	}
	if err != nil {
		return nil, err
	}
	// Pair the rows: each pattern, NIC then host.
	return []AppRow{nic[0], host[0], nic[1], host[1]}, nil
}

// appRuns are the applications, in the table's order.
var appRuns = []struct {
	name string
	run  func(context.Context, AppsConfig) ([]AppRow, error)
}{
	{"aggregation", appAggregate},
	{"reduction", appReduce},
	{"filtering", appFilter},
	{"key-value", appKV},
	{"histogram", appHistogram},
	{"strided scatter", appScatter},
}

// Apps runs every application on a live NIC pair, with its handlers on
// the receiving NIC and then as the host baseline, and checks every
// result; rows come in pairs, NIC then host.
func Apps(cfg AppsConfig) ([]AppRow, error) {
	cfg.defaults()
	if cfg.Size%64 != 0 {
		return nil, fmt.Errorf("hpubench: messages of %d bytes, want a multiple of 64", cfg.Size)
	}
	var rows []AppRow
	for _, a := range appRuns {
		runs := make([][]AppRow, 0, cfg.Repeats)
		for range cfg.Repeats {
			ctx, cancel := context.WithTimeout(context.Background(), appRunMax)
			r, err := a.run(ctx, cfg)
			cancel()
			if err != nil {
				return rows, fmt.Errorf("hpubench: %s: %w", a.name, err)
			}
			runs = append(runs, r)
		}
		rows = append(rows, medianRows(runs)...)
	}
	return rows, nil
}

// medianRows takes the runs of one application (each the same rows, NIC
// and host in turn) and returns, for each row, the run of median rate:
// every figure of a row comes from one run.
func medianRows(runs [][]AppRow) []AppRow {
	if len(runs) == 0 {
		return nil
	}
	out := make([]AppRow, len(runs[0]))
	for j := range out {
		col := make([]AppRow, len(runs))
		for k := range runs {
			col[k] = runs[k][j]
		}
		slices.SortStableFunc(col, func(a, b AppRow) int { return cmp.Compare(a.Rate(), b.Rate()) })
		out[j] = col[len(col)/2]
		out[j].Runs = len(runs)
	}
	return out
}

// ReportApps prints each application of hpu/apps on a live NIC against
// doing the same on the host.
func ReportApps(w io.Writer) error {
	return ReportAppsConfig(w, AppsConfig{})
}

// ReportAppsConfig is ReportApps with cfg's sizes.
func ReportAppsConfig(w io.Writer, cfg AppsConfig) error {
	rows, err := Apps(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "applications (hpu/apps), two NICs over the in-memory port, path MTU 1024: handlers on the receiving NIC (NIC)")
	fmt.Fprintln(w, "against plain WRITEs or SENDs with the receiving host doing the work (host); every result checked against a reference;")
	fmt.Fprintln(w, "time: aggregation leaves out the checks between rounds, scatter holds a check per message (both ways), the others check after the run;")
	fmt.Fprintln(w, "to host mem: bytes the receiving NIC wrote to host memory (data, results, CQEs); NIC/host: the NIC row's figure over the host row's")
	if len(rows) > 0 && rows[0].Runs > 1 {
		fmt.Fprintf(w, "each application ran %d times, both ways in turn; each row is its way's run of median rate\n", rows[0].Runs)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "application\tway\twork\ttime\trate\tp50\tp99\tto host mem\tper op\tNIC/host rate\tNIC/host bytes\tchecked\t")
	for i, r := range rows {
		p50, p99 := "-", "-"
		if r.P50 > 0 {
			p50, p99 = r.P50.Round(100*time.Nanosecond).String(), r.P99.Round(100*time.Nanosecond).String()
		}
		rate, bytesRatio := "-", "-"
		if r.Way == "NIC" && i+1 < len(rows) && rows[i+1].App == r.App {
			h := rows[i+1]
			rate = fmt.Sprintf("%.2f", r.Rate()/h.Rate())
			if h.HostBytes > 0 {
				bytesRatio = fmt.Sprintf("%.3g", float64(r.HostBytes)/float64(h.HostBytes))
			}
		}
		checked := "no"
		if r.Verified {
			checked = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%.0f %s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t\n", r.App, r.Way, r.Work, r.Elapsed.Round(time.Millisecond),
			r.Rate(), r.Unit, p50, p99, byteSize(r.HostBytes), r.HostBytes/uint64(r.Ops), rate, bytesRatio, checked)
	}
	return tw.Flush()
}

// byteSize prints n bytes in binary units.
func byteSize(n uint64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 10<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
