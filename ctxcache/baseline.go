package ctxcache

import (
	"fmt"
	"sync"

	"github.com/softrnic/softrnic/host/hostmem"
)

// Baseline is the blocking design GCCache is measured against: the same
// sets and ways, but requests are answered strictly in arrival order (first
// request, first response), so a hit behind a miss waits for the miss's
// host fetch, and misses are fetched in arrival order too, at most
// Config.Outstanding at a time, with no merging: a miss fetches for itself,
// even a line already on its way. With Outstanding 1 it is the classic
// blocking cache (SRNIC's and ScalaRNIC's, in the GCCache talk): a miss
// holds up every request behind it for a host round trip, and a miss
// queued behind another is looked up again when its turn comes (the line
// may have come in meanwhile).
type Baseline struct {
	ad         Adapter
	dma        *hostmem.DMA
	cfg        Config
	entryWords int
	lineWords  int
	resp       []*queue[Response]

	mu      sync.Mutex // guards everything below
	tags    []uint64   // line+1 per way; 0 = invalid
	ages    []uint32
	clock   uint32
	data    []uint64
	fifo    []breq // requests in arrival order, a ring
	head, n int
	fetches int // host fetches in flight (at most cfg.Outstanding)
	pidFree []uint32
	pidData []uint64
	pidBuf  [][]byte // the line each PID's fetch reads into
	pidSlot []int    // the FIFO slot of each PID's request
	lineBuf []uint64
	stats   Stats
}

type breq struct {
	pid    uint32
	pipe   uint16
	idx    uint64
	done   bool
	issued bool // its host fetch was issued (a miss waits for a free fetch slot before)
	err    bool
	hit    bool
	stale  bool // the host changed its line while it was fetched: answer, do not install
	fresh  bool // the host wrote its entry since: Data holds it already
}

var _ Cache = (*Baseline)(nil)

// NewBaseline returns a blocking cache with the geometry of cfg;
// cfg.Outstanding bounds its host fetches in flight (1: the classic
// blocking cache).
func NewBaseline(ad Adapter, dma *hostmem.DMA, cfg Config) (*Baseline, error) {
	if err := ad.check(); err != nil {
		return nil, err
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	b := &Baseline{
		ad: ad, dma: dma, cfg: cfg, entryWords: ad.entryWords(), lineWords: ad.lineWords(),
		resp:    make([]*queue[Response], cfg.Pipelines),
		tags:    make([]uint64, cfg.Sets*cfg.Ways),
		ages:    make([]uint32, cfg.Sets*cfg.Ways),
		data:    make([]uint64, cfg.Sets*cfg.Ways*ad.lineWords()),
		fifo:    make([]breq, cfg.PIDs),
		pidData: make([]uint64, cfg.PIDs*ad.entryWords()),
		pidBuf:  make([][]byte, cfg.PIDs),
		pidSlot: make([]int, cfg.PIDs),
		lineBuf: make([]uint64, ad.lineWords()),
	}
	for i := range b.resp {
		b.resp[i] = newQueue[Response](2 * cfg.PIDs)
	}
	for i := range cfg.PIDs {
		b.pidFree = append(b.pidFree, uint32(cfg.PIDs-1-i))
		b.pidBuf[i] = make([]byte, ad.lineBytes())
	}
	return b, nil
}

func (b *Baseline) setOf(line uint64) int { return setIndex(line, b.cfg.Sets) }

// find returns the way holding line, or -1.
//
// Preconditions: b.mu is held.
func (b *Baseline) find(line uint64) int {
	base := b.setOf(line) * b.cfg.Ways
	for i := range b.cfg.Ways {
		if b.tags[base+i] == line+1 {
			return base + i
		}
	}
	return -1
}

// Lookup implements Cache. Only with no request waiting ahead does a hit
// return at once.
func (b *Baseline) Lookup(pipe int, idx uint64, dst []uint64) (Status, uint32) {
	b.mu.Lock()
	b.stats.Lookups++
	if idx >= uint64(b.ad.Table.Count) {
		b.stats.Faults++
		b.mu.Unlock()
		return Fault, 0
	}
	line, off := b.ad.line(idx)
	w := b.find(line)
	if w >= 0 && b.n == 0 {
		copy(dst[:b.entryWords], b.data[w*b.lineWords+off:])
		b.clock++
		b.ages[w] = b.clock
		b.stats.Hits++
		b.mu.Unlock()
		return Hit, 0
	}
	if len(b.pidFree) == 0 {
		b.stats.Stalls++
		b.mu.Unlock()
		return Stall, 0
	}
	pid := b.pidFree[len(b.pidFree)-1]
	b.pidFree = b.pidFree[:len(b.pidFree)-1]
	slot := (b.head + b.n) % len(b.fifo)
	b.fifo[slot] = breq{pid: pid, pipe: uint16(pipe), idx: idx}
	b.pidSlot[pid] = slot
	b.n++
	if w >= 0 { // a hit, but it waits its turn
		copy(b.Data(pid), b.data[w*b.lineWords+off:])
		b.clock++
		b.ages[w] = b.clock
		b.fifo[slot].done, b.fifo[slot].hit = true, true
		b.stats.Hits++
		b.mu.Unlock()
		return Miss, pid
	}
	f, ok := b.issueNext()
	b.mu.Unlock()
	if ok {
		b.fetch(f)
	}
	return Miss, pid
}

// lineFetch is a host read issueNext chose: the PID it answers, the line's
// address and the PID's buffer.
type lineFetch struct {
	pid  uint32
	addr uint64
	buf  []byte
}

// issueNext finds the oldest request that waits for a fetch slot and,
// if a slot is free, looks it up again (an earlier fetch may have brought
// its line: it is a hit, answered in its turn) until one misses: that one
// is counted and its fetch returned, for the caller to issue once b.mu is
// released (the DMA model may answer at once, in DMADone).
//
// Preconditions: b.mu is held.
func (b *Baseline) issueNext() (lineFetch, bool) {
	for i := 0; i < b.n && b.fetches < b.cfg.Outstanding; i++ {
		r := &b.fifo[(b.head+i)%len(b.fifo)]
		if r.done || r.issued {
			continue
		}
		line, off := b.ad.line(r.idx)
		if w := b.find(line); w >= 0 {
			copy(b.Data(r.pid), b.data[w*b.lineWords+off:])
			b.clock++
			b.ages[w] = b.clock
			r.done, r.hit = true, true
			b.stats.Hits++
			continue
		}
		r.issued = true
		b.fetches++
		b.stats.Misses++
		b.stats.HostFetches++
		addr, n := b.ad.lineAddr(line)
		return lineFetch{pid: r.pid, addr: addr, buf: b.pidBuf[r.pid][:n]}, true
	}
	return lineFetch{}, false
}

// fetch reads a line from host memory, without b.mu.
func (b *Baseline) fetch(f lineFetch) {
	if err := b.dma.ReadAsync(f.addr, f.buf, b, uint64(f.pid)); err != nil {
		b.DMADone(uint64(f.pid), err)
	}
}

// DMADone installs a fetched line, answers every request at the head of
// the queue that is ready and issues the next fetch that waits.
func (b *Baseline) DMADone(tag uint64, err error) {
	b.mu.Lock()
	pid := uint32(tag)
	r := &b.fifo[b.pidSlot[pid]]
	b.fetches--
	line, off := b.ad.line(r.idx)
	if err != nil {
		b.stats.Faults++
		clear(b.Data(pid))
		r.err = true
	} else {
		wordsFromBytes(b.lineBuf, b.pidBuf[pid])
		if !r.fresh {
			copy(b.Data(pid), b.lineBuf[off:])
		}
		if !r.stale {
			b.install(line, b.lineBuf)
		}
	}
	r.done = true
	b.answer()
	next, ok := b.issueNext()
	b.mu.Unlock()
	if ok {
		b.fetch(next)
	}
}

// answer hands the answered requests at the head of the queue to their
// pipelines, in order, as long as their response queues have room (a full
// one is drained by its pipeline's next Poll, which answers the rest:
// DMADone may run inside that very Poll, so it must not wait).
//
// Preconditions: b.mu is held.
func (b *Baseline) answer() {
	for b.n > 0 && b.fifo[b.head].done {
		h := b.fifo[b.head]
		if !b.resp[h.pipe].push(Response{PID: h.pid, Index: h.idx, Err: h.err, Hit: h.hit}) {
			return
		}
		b.head = (b.head + 1) % len(b.fifo)
		b.n--
	}
}

// install puts a line into its set over the least recently used way.
//
// Preconditions: b.mu is held.
func (b *Baseline) install(line uint64, words []uint64) {
	base := b.setOf(line) * b.cfg.Ways
	victim := -1
	for i := range b.cfg.Ways {
		if b.tags[base+i] == 0 || b.tags[base+i] == line+1 {
			victim = base + i
			break
		}
		if victim < 0 || b.clock-b.ages[base+i] > b.clock-b.ages[victim] {
			victim = base + i
		}
	}
	if b.tags[victim] != 0 && b.tags[victim] != line+1 {
		b.stats.Evictions++
	}
	b.tags[victim] = line + 1
	copy(b.data[victim*b.lineWords:], words)
	b.clock++
	b.ages[victim] = b.clock
}

// Poll implements Cache.
func (b *Baseline) Poll(pipe int, out []Response) int {
	b.dma.Poll()
	return b.Answered(pipe, out)
}

// Answered implements Cache.
func (b *Baseline) Answered(pipe int, out []Response) int {
	b.mu.Lock()
	b.answer()
	b.mu.Unlock()
	n := 0
	for n < len(out) {
		r, ok := b.resp[pipe].pop()
		if !ok {
			break
		}
		out[n] = r
		n++
	}
	return n
}

// Data implements Cache.
func (b *Baseline) Data(pid uint32) []uint64 {
	return b.pidData[int(pid)*b.entryWords : (int(pid)+1)*b.entryWords]
}

// Release implements Cache.
func (b *Baseline) Release(pid uint32) {
	b.mu.Lock()
	b.pidFree = append(b.pidFree, pid)
	b.mu.Unlock()
}

// HostWrite is the command through which the host changes an entry, as
// GCCache's: host memory and any cached copy change together; a request
// whose fetch of the line is under way gets the new entry and does not
// install the line it fetched.
func (b *Baseline) HostWrite(idx uint64, src []uint64) error {
	if idx >= uint64(b.ad.Table.Count) {
		return fmt.Errorf("ctxcache: %w", hostmem.ErrIndex)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	addr, _ := b.ad.Table.Addr(idx)
	buf := make([]byte, b.ad.Table.EntrySize) // the control path
	bytesFromWords(buf, src[:b.entryWords])
	if err := b.dma.Write(addr, buf); err != nil {
		return err
	}
	line, off := b.ad.line(idx)
	if w := b.find(line); w >= 0 {
		copy(b.data[w*b.lineWords+off:w*b.lineWords+off+b.entryWords], src)
	}
	b.forget(line, idx, src)
	return nil
}

// Invalidate drops an entry's line from the cache (the baseline holds
// nothing dirty); a fetch of it under way is answered but not installed.
func (b *Baseline) Invalidate(idx uint64) {
	if idx >= uint64(b.ad.Table.Count) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	line, _ := b.ad.line(idx)
	if w := b.find(line); w >= 0 {
		b.tags[w] = 0
	}
	b.forget(line, idx, nil)
}

// forget marks the requests waiting for a fetch of line stale; those for
// entry idx get src (if given).
//
// Preconditions: b.mu is held.
func (b *Baseline) forget(line, idx uint64, src []uint64) {
	for i := range b.n {
		r := &b.fifo[(b.head+i)%len(b.fifo)]
		if l, _ := b.ad.line(r.idx); l != line {
			continue
		}
		if !r.done && !r.issued {
			continue // it looks the line up again when its turn comes
		}
		if !r.done {
			r.stale = true
		}
		if src != nil && r.idx == idx {
			copy(b.Data(r.pid), src[:b.entryWords])
			r.fresh = true
		}
	}
}

// Stats implements Cache.
func (b *Baseline) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}
