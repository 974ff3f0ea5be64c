package ctxcache

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/host/hostmem"
)

// Status is the outcome of a lookup.
type Status uint8

// Lookup outcomes.
const (
	Hit   Status = iota // the entry is in dst
	Miss                // a ticket (PID) was issued; its Response comes on the pipeline's queue
	Stall               // no PID or outstanding-table entry free: counted back-pressure, retry later
	Fault               // the index is beyond the table
)

func (s Status) String() string {
	return [...]string{"hit", "miss", "stall", "fault"}[s]
}

// Response answers a ticket: the entry is at Data(PID) until Release(PID).
type Response struct {
	PID   uint32
	Index uint64
	Err   bool // the host fetch failed; Data holds zeros
	Hit   bool // the entry was cached when looked up, but the answer had to wait its turn (the baseline only)
}

// Cache is what a pipeline needs of a context cache; GCCache and the
// blocking Baseline both provide it.
type Cache interface {
	Lookup(pipe int, idx uint64, dst []uint64) (Status, uint32)
	Poll(pipe int, out []Response) int
	// Answered is Poll without polling the DMA engine: the answers to
	// the fetches it has completed, for a caller that polls it once for
	// several caches.
	Answered(pipe int, out []Response) int
	Data(pid uint32) []uint64
	Release(pid uint32)
	Stats() Stats
}

// Config sizes a cache. Zero values take the defaults.
type Config struct {
	Sets        int // default 512
	Ways        int // default 4
	Outstanding int // outstanding-table entries: host fetches in flight (default 64)
	PIDs        int // tickets in flight, merged ones included (default 256)
	Pipelines   int // pipelines that look up and poll (default 1)
}

func (c *Config) defaults() error {
	if c.Sets == 0 {
		c.Sets = 512
	}
	if c.Ways == 0 {
		c.Ways = 4
	}
	if c.Outstanding == 0 {
		c.Outstanding = 64
	}
	if c.PIDs == 0 {
		c.PIDs = 256
	}
	if c.Pipelines == 0 {
		c.Pipelines = 1
	}
	if c.Sets < 1 || c.Ways < 1 || c.Outstanding < 1 || c.PIDs < c.Outstanding || c.Pipelines < 1 {
		return fmt.Errorf("ctxcache: bad geometry %+v", *c)
	}
	return nil
}

// Stats are a cache's counters.
type Stats struct {
	Lookups, Hits, Misses uint64
	Merged                uint64 // misses linked behind an outstanding fetch of the same line
	HostFetches           uint64
	Evictions, WriteBacks uint64
	Stalls                uint64 // lookups refused: no PID or outstanding entry free
	Faults                uint64 // indices beyond the table, and failed host fetches
}

// pipeStats are one pipeline's counters, on their own cache line. The
// pipeline counts lookups in a plain field and publishes the count every
// 64 lookups and on every Poll: a locked instruction per lookup would cost
// a third of a hit.
type pipeStats struct {
	local   uint64 // touched by the pipeline's goroutine only
	lookups atomic.Uint64
	_       [48]byte
}

// GCCache is the non-blocking context cache. Lookups from any number of
// pipelines take no lock on a hit: each set is guarded by a sequence
// counter that writers bump around every change, and readers retry if it
// moved. A miss takes a ticket (PID) and returns at once; the fetch goes
// through the DMA engine, and misses on a line already being fetched are
// linked behind the first (the next-PID chain) instead of fetching again.
// When the data arrives the line is installed and every linked ticket is
// answered, in arrival order, on its pipeline's response queue.
//
//	Lookup ─► set (seqlock) ─ hit ─► copy entry ─► Hit
//	             │ miss
//	             ▼
//	     outstanding table ── same line in flight? ─ yes ─► link PID (Merged) ─► Miss
//	             │ no
//	             ▼
//	     DMA read (async) ─► DMADone: install line, walk PID chain ─► response queues
type GCCache struct {
	ad         Adapter
	dma        *hostmem.DMA
	cfg        Config
	entryWords int
	lineWords  int
	// hdr holds each set's header in one cache line (for up to six
	// ways; stride words a set): its sequence counter, its recently
	// used bits and its ways' tags, so that a lookup reads one line
	// before the entry's own (setSeq, setMRU, tag).
	hdr    []atomic.Uint64
	stride int
	locks  []sync.Mutex  // each set's writers
	dirty  []atomic.Bool // sets × ways: the way's line differs from host memory
	data   []uint64      // sets × ways × lineWords, guarded by the sets' sequence counters (see seqCopy)
	pipes  []pipeStats
	resp   []*queue[Response]
	done   *queue[int32] // outstanding entries whose fetch has arrived

	mu      sync.Mutex // the miss path: outstanding table and PIDs; taken before a set's lock
	ot      []otEntry
	otLine  []uint64 // line+1 of each valid outstanding entry, 0 if free: a compact array to scan
	otFree  []int32
	pids    *queue[uint32] // free PIDs: taken under mu, given back by Release without it
	pidNext []int32        // next PID in a chain, or -1
	pidPipe []uint16       // pipeline of each PID
	pidIdx  []uint64       // index looked up
	pidData []uint64       // PIDs × entryWords
	lineBuf []uint64       // scratch of the response handler, under mu
	wbBuf   []uint64       // scratch of write-backs, under mu
	byteBuf []byte

	misses, merged, fetches       atomic.Uint64
	evictions, writeBacks, stalls atomic.Uint64
	faults                        atomic.Uint64
}

// A set's header, at hdr[si*stride:]: setSeq, odd while a writer
// changes the set; setMRU, a bit per recently used way (bit pseudo-LRU:
// a hit sets its way's bit, and when every bit is set only the newest
// stays; the victim is the first way without one; a hit on a way
// already marked writes nothing); then each way's tag, its line+1 (0:
// invalid).
const (
	setSeq = iota
	setMRU
	setTags
)

// seq is set si's sequence counter.
func (c *GCCache) seq(si int) *atomic.Uint64 { return &c.hdr[si*c.stride+setSeq] }

// mru is set si's recently used bits.
func (c *GCCache) mru(si int) *atomic.Uint64 { return &c.hdr[si*c.stride+setMRU] }

// tag is way wi's tag (wi counts over every set's ways).
func (c *GCCache) tag(wi int) *atomic.Uint64 {
	return &c.hdr[wi/c.cfg.Ways*c.stride+setTags+wi%c.cfg.Ways]
}

type otEntry struct {
	valid      bool
	drop       bool // invalidated while in flight: serve, do not install
	line       uint64
	head, tail int32
	buf        []byte   // the fetched line
	err        error    // the fetch's outcome
	overlay    []uint64 // writes made while in flight
	written    uint32   // entries in overlay (bit per entry of the line)
}

var _ Cache = (*GCCache)(nil)

// New returns a GCCache for one context type, fetching through dma.
func New(ad Adapter, dma *hostmem.DMA, cfg Config) (*GCCache, error) {
	if err := ad.check(); err != nil {
		return nil, err
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if ad.EntriesPerLine > 32 {
		return nil, errors.New("ctxcache: at most 32 entries per line")
	}
	c := &GCCache{
		ad: ad, dma: dma, cfg: cfg,
		entryWords: ad.entryWords(), lineWords: ad.lineWords(),
		stride:  (setTags + cfg.Ways + 7) &^ 7, // whole cache lines
		locks:   make([]sync.Mutex, cfg.Sets),
		dirty:   make([]atomic.Bool, cfg.Sets*cfg.Ways),
		data:    make([]uint64, cfg.Sets*cfg.Ways*ad.lineWords()),
		pipes:   make([]pipeStats, cfg.Pipelines),
		resp:    make([]*queue[Response], cfg.Pipelines),
		ot:      make([]otEntry, cfg.Outstanding),
		otLine:  make([]uint64, cfg.Outstanding),
		pids:    newQueue[uint32](2 * cfg.PIDs),
		pidNext: make([]int32, cfg.PIDs),
		pidPipe: make([]uint16, cfg.PIDs),
		pidIdx:  make([]uint64, cfg.PIDs),
		pidData: make([]uint64, cfg.PIDs*ad.entryWords()),
		lineBuf: make([]uint64, ad.lineWords()),
		wbBuf:   make([]uint64, ad.lineWords()),
		byteBuf: make([]byte, ad.lineBytes()),
	}
	c.hdr = make([]atomic.Uint64, cfg.Sets*c.stride)
	for i := range c.resp {
		c.resp[i] = newQueue[Response](2 * cfg.PIDs)
	}
	c.done = newQueue[int32](2 * cfg.Outstanding)
	for i := range c.ot {
		c.ot[i].buf = make([]byte, ad.lineBytes())
		c.ot[i].overlay = make([]uint64, ad.lineWords())
		c.otFree = append(c.otFree, int32(cfg.Outstanding-1-i))
	}
	for i := range cfg.PIDs {
		c.pids.mustPush(uint32(i))
	}
	return c, nil
}

// setOf spreads lines over sets (Fibonacci hashing, so that runs of
// consecutive QP numbers do not crowd a few sets).
func (c *GCCache) setOf(line uint64) int { return setIndex(line, c.cfg.Sets) }

// setIndex hashes a line to one of sets sets, without a division when sets
// is a power of two.
func setIndex(line uint64, sets int) int {
	h := line * 0x9e3779b97f4a7c15 >> 32
	if sets&(sets-1) == 0 {
		return int(h & uint64(sets-1))
	}
	return int(h % uint64(sets))
}

// read copies entry words at off of a cached line into dst, lock-free. It
// reports whether the line was there.
func (c *GCCache) read(line uint64, off int, dst []uint64) bool {
	si := c.setOf(line)
	h := c.hdr[si*c.stride : si*c.stride+setTags+c.cfg.Ways]
	base := si * c.cfg.Ways
	for {
		v := h[setSeq].Load()
		if v&1 != 0 {
			continue // a writer is changing the set
		}
		w := -1
		for i := range c.cfg.Ways {
			if h[setTags+i].Load() == line+1 {
				w = i
				break
			}
		}
		if w >= 0 {
			seqCopy(dst, c.data[(base+w)*c.lineWords+off:])
		}
		if h[setSeq].Load() != v {
			continue
		}
		if w >= 0 {
			c.touch(si, w)
		}
		return w >= 0
	}
}

// Lookup looks up entry idx for a pipeline. On a hit the entry is copied
// into dst (EntrySize/8 words). On a miss the returned PID's Response
// arrives on the pipeline's queue.
//
// Preconditions: one goroutine at a time per pipeline.
func (c *GCCache) Lookup(pipe int, idx uint64, dst []uint64) (Status, uint32) {
	ps := &c.pipes[pipe]
	if ps.local++; ps.local&63 == 0 {
		ps.lookups.Store(ps.local)
	}
	if idx >= uint64(c.ad.Table.Count) {
		c.faults.Add(1)
		return Fault, 0
	}
	line, off := c.ad.line(idx)
	if c.read(line, off, dst[:c.entryWords]) {
		return Hit, 0
	}
	return c.miss(pipe, idx, line, off, dst)
}

// miss is the miss path.
func (c *GCCache) miss(pipe int, idx, line uint64, off int, dst []uint64) (Status, uint32) {
	c.mu.Lock()
	// The line may have been installed since the lock-free read: fills
	// happen under c.mu, so this second look is final.
	if c.read(line, off, dst[:c.entryWords]) {
		c.mu.Unlock()
		return Hit, 0
	}
	e := c.findOT(line)
	pid, ok := uint32(0), e >= 0 || len(c.otFree) > 0
	if ok {
		pid, ok = c.pids.pop()
	}
	if !ok {
		c.mu.Unlock()
		c.stalls.Add(1)
		return Stall, 0
	}
	c.pidNext[pid], c.pidPipe[pid], c.pidIdx[pid] = -1, uint16(pipe), idx
	c.misses.Add(1)
	if e >= 0 { // the line is on its way: link behind the last ticket
		ot := &c.ot[e]
		c.pidNext[ot.tail] = int32(pid)
		ot.tail = int32(pid)
		c.merged.Add(1)
		c.mu.Unlock()
		return Miss, pid
	}
	e = c.otFree[len(c.otFree)-1]
	c.otFree = c.otFree[:len(c.otFree)-1]
	ot := &c.ot[e]
	ot.valid, ot.drop, ot.line, ot.head, ot.tail, ot.written = true, false, line, int32(pid), int32(pid), 0
	c.otLine[e] = line + 1
	addr, n := c.ad.lineAddr(line)
	buf := ot.buf[:n]
	c.fetches.Add(1)
	c.mu.Unlock()
	if err := c.dma.ReadAsync(addr, buf, c, uint64(e)); err != nil {
		c.DMADone(uint64(e), err)
	}
	return Miss, pid
}

// DMADone hears from the DMA engine that the fetch for outstanding entry
// tag has arrived; the response handler (run by Poll, on the pipelines'
// side) does the rest.
func (c *GCCache) DMADone(tag uint64, err error) {
	c.ot[tag].err = err // published by the queue's release
	c.done.mustPush(int32(tag))
}

// serveDone is the response handler: for each fetch that has arrived
// (the DMA engine, polled, completed it) the line is installed (unless
// invalidated meanwhile) and every ticket linked to it is answered in
// arrival order.
func (c *GCCache) serveDone() {
	tag, ok := c.done.pop()
	if !ok {
		return
	}
	c.mu.Lock() // once for every fetch that has come
	for ; ok; tag, ok = c.done.pop() {
		c.serve(int(tag))
	}
	c.mu.Unlock()
}

// serve answers one arrived fetch.
//
// Preconditions: c.mu is held.
func (c *GCCache) serve(tag int) {
	ot := &c.ot[tag]
	err := ot.err
	words := c.lineBuf
	wordsFromBytes(words, ot.buf)
	for i := range c.ad.EntriesPerLine {
		if ot.written&(1<<i) != 0 {
			copy(words[i*c.entryWords:(i+1)*c.entryWords], ot.overlay[i*c.entryWords:])
		}
	}
	if err == nil && !ot.drop {
		c.install(ot.line, words, ot.written != 0)
	} else if ot.written != 0 { // not installed: the writes made in flight go to host memory
		first := ot.line * uint64(c.ad.EntriesPerLine)
		for i := range c.ad.EntriesPerLine {
			if ot.written&(1<<i) != 0 {
				c.writeHost(first+uint64(i), words[i*c.entryWords:])
			}
		}
	}
	if err != nil {
		c.faults.Add(1)
	}
	for pid := ot.head; pid >= 0; pid = c.pidNext[pid] {
		_, off := c.ad.line(c.pidIdx[pid])
		d := c.pidData[int(pid)*c.entryWords : (int(pid)+1)*c.entryWords]
		if err == nil {
			copy(d, words[off:])
		} else {
			clear(d)
		}
		c.resp[c.pidPipe[pid]].mustPush(Response{PID: uint32(pid), Index: c.pidIdx[pid], Err: err != nil})
	}
	ot.valid, ot.err = false, nil
	c.otLine[tag] = 0
	c.otFree = append(c.otFree, int32(tag))
}

// install puts a line into its set, evicting the least recently used way
// (and writing it back if dirty).
//
// Preconditions: c.mu is held.
func (c *GCCache) install(line uint64, words []uint64, dirty bool) {
	si := c.setOf(line)
	base := si * c.cfg.Ways
	c.locks[si].Lock()
	defer c.locks[si].Unlock()
	victim := -1
	for i := range c.cfg.Ways {
		t := c.tag(base + i).Load()
		if t == line+1 {
			victim = i // already there (installed by a write): refresh it
			break
		}
		if t == 0 && victim < 0 {
			victim = i
		}
	}
	if victim < 0 {
		m := c.mru(si).Load()
		victim = 0
		for i := range c.cfg.Ways {
			if m&(1<<i) == 0 {
				victim = i
				break
			}
		}
		c.evict(base+victim, c.tag(base+victim).Load()-1)
	}
	c.seq(si).Add(1)
	c.tag(base + victim).Store(line + 1)
	seqCopy(c.data[(base+victim)*c.lineWords:], words)
	c.dirty[base+victim].Store(dirty)
	c.touch(si, victim)
	c.seq(si).Add(1)
}

// touch marks way w of a set as recently used.
func (c *GCCache) touch(si, w int) {
	mru := c.mru(si)
	bit := uint64(1) << w
	m := mru.Load()
	if m&bit != 0 {
		return
	}
	if m|bit == uint64(1)<<c.cfg.Ways-1 {
		mru.Store(bit) // every way was recent: start a new round
		return
	}
	mru.Or(bit)
}

// evict writes back a dirty way and invalidates it.
//
// Preconditions: c.mu and the way's set lock are held.
func (c *GCCache) evict(wi int, line uint64) {
	c.evictions.Add(1)
	c.writeBack(wi, line)
	si := wi / c.cfg.Ways
	c.seq(si).Add(1)
	c.tag(wi).Store(0)
	c.seq(si).Add(1)
}

// writeBack posts a dirty way's line to host memory and marks it clean.
//
// Preconditions: c.mu and the way's set lock are held.
func (c *GCCache) writeBack(wi int, line uint64) {
	if !c.dirty[wi].Load() {
		return
	}
	addr, n := c.ad.lineAddr(line)
	seqCopy(c.wbBuf, c.data[wi*c.lineWords:(wi+1)*c.lineWords])
	bytesFromWords(c.byteBuf, c.wbBuf)
	if err := c.dma.Write(addr, c.byteBuf[:n]); err != nil {
		c.faults.Add(1)
		return
	}
	c.dirty[wi].Store(false)
	c.writeBacks.Add(1)
}

// Poll answers the fetches that have arrived, then takes up to len(out)
// responses for a pipeline.
func (c *GCCache) Poll(pipe int, out []Response) int {
	c.dma.Poll()
	return c.Answered(pipe, out)
}

// Answered implements Cache.
func (c *GCCache) Answered(pipe int, out []Response) int {
	ps := &c.pipes[pipe]
	ps.lookups.Store(ps.local)
	c.serveDone()
	q := c.resp[pipe]
	n := 0
	for n < len(out) {
		r, ok := q.pop()
		if !ok {
			break
		}
		out[n] = r
		n++
	}
	return n
}

// Data returns the entry a response answered; valid until Release.
func (c *GCCache) Data(pid uint32) []uint64 {
	return c.pidData[int(pid)*c.entryWords : (int(pid)+1)*c.entryWords]
}

// Release returns a PID once its response has been used.
func (c *GCCache) Release(pid uint32) { c.pids.mustPush(pid) }

// findOT returns the outstanding entry fetching line, or -1.
//
// Preconditions: c.mu is held.
func (c *GCCache) findOT(line uint64) int32 {
	for i, l := range c.otLine {
		if l == line+1 {
			return int32(i)
		}
	}
	return -1
}

// EntriesPerLine is how many consecutive entries share a cache line (and
// one fetch): 8 for the MTT, 1 for the other contexts.
func (c *GCCache) EntriesPerLine() int { return c.ad.EntriesPerLine }

// Config returns the cache's geometry, defaults filled in.
func (c *GCCache) Config() Config { return c.cfg }

// Stats returns the counters. Lookups and hits are exact once every
// pipeline has polled after its last lookup; until then they may lag by
// up to 63 lookups per pipeline.
func (c *GCCache) Stats() Stats {
	s := Stats{
		Misses: c.misses.Load(), Merged: c.merged.Load(), HostFetches: c.fetches.Load(),
		Evictions: c.evictions.Load(), WriteBacks: c.writeBacks.Load(), Stalls: c.stalls.Load(), Faults: c.faults.Load(),
	}
	for i := range c.pipes {
		s.Lookups += c.pipes[i].lookups.Load()
	}
	if other := s.Misses + s.Stalls + s.Faults; s.Lookups > other {
		s.Hits = s.Lookups - other
	}
	return s
}

// findWay returns the way holding line in set si, or -1.
//
// Preconditions: the set's lock is held.
func (c *GCCache) findWay(si int, line uint64) int {
	base := si * c.cfg.Ways
	for i := range c.cfg.Ways {
		if c.tag(base+i).Load() == line+1 {
			return base + i
		}
	}
	return -1
}

// writeCached stores src as the entry at off of a cached line, marking the
// line dirty if asked; it reports whether the line was cached.
func (c *GCCache) writeCached(line uint64, off int, src []uint64, dirty bool) bool {
	si := c.setOf(line)
	c.locks[si].Lock()
	defer c.locks[si].Unlock()
	wi := c.findWay(si, line)
	if wi < 0 {
		return false
	}
	c.seq(si).Add(1)
	seqCopy(c.data[wi*c.lineWords+off:], src[:c.entryWords])
	if dirty {
		c.dirty[wi].Store(true)
	}
	c.seq(si).Add(1)
	return true
}

// overlay records a write to a line that is being fetched, to be applied
// to the fetched data; it reports whether the line was outstanding.
//
// Preconditions: c.mu is held.
func (c *GCCache) overlay(line uint64, idx uint64, off int, src []uint64) bool {
	e := c.findOT(line)
	if e < 0 {
		return false
	}
	ot := &c.ot[e]
	copy(ot.overlay[off:off+c.entryWords], src)
	ot.written |= 1 << (idx % uint64(c.ad.EntriesPerLine))
	return true
}

// Update is a NIC-side change to an entry (a QP's PSN state, a CQ's
// producer index). A cached entry is changed in place and written back to
// host memory when evicted or flushed; an entry being fetched gets the
// change when it arrives; any other is written straight to host memory.
// It returns Hit if the entry was cached.
func (c *GCCache) Update(idx uint64, src []uint64) Status {
	if idx >= uint64(c.ad.Table.Count) {
		c.faults.Add(1)
		return Fault
	}
	line, off := c.ad.line(idx)
	if c.writeCached(line, off, src, true) {
		return Hit
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writeCached(line, off, src, true) {
		return Hit
	}
	if !c.overlay(line, idx, off, src) {
		c.writeHost(idx, src)
	}
	return Miss
}

// writeHost writes one entry to host memory through the DMA engine.
//
// Preconditions: c.mu is held.
func (c *GCCache) writeHost(idx uint64, src []uint64) {
	addr, _ := c.ad.Table.Addr(idx)
	buf := c.byteBuf[:c.ad.Table.EntrySize]
	bytesFromWords(buf, src[:c.entryWords])
	if err := c.dma.Write(addr, buf); err != nil {
		c.faults.Add(1)
	}
}

// HostWrite is the command through which the host changes an entry
// (modify QP, register MR): host memory and any cached or in-flight copy
// are updated together, so they never disagree.
func (c *GCCache) HostWrite(idx uint64, src []uint64) error {
	if idx >= uint64(c.ad.Table.Count) {
		return fmt.Errorf("ctxcache: %w", hostmem.ErrIndex)
	}
	line, off := c.ad.line(idx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeHost(idx, src)
	if !c.writeCached(line, off, src, false) {
		c.overlay(line, idx, off, src)
	}
	return nil
}

// Invalidate is the command that drops an entry's line from the cache
// (deregister MR, destroy QP), writing it back first if dirty. A fetch in
// flight is still answered but not installed.
func (c *GCCache) Invalidate(idx uint64) {
	if idx >= uint64(c.ad.Table.Count) {
		return
	}
	line, _ := c.ad.line(idx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.findOT(line); e >= 0 {
		c.ot[e].drop = true
	}
	si := c.setOf(line)
	c.locks[si].Lock()
	defer c.locks[si].Unlock()
	if wi := c.findWay(si, line); wi >= 0 {
		c.writeBack(wi, line)
		c.seq(si).Add(1)
		c.tag(wi).Store(0)
		c.seq(si).Add(1)
	}
}

// Flush writes every dirty line back to host memory.
func (c *GCCache) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for si := range c.locks {
		c.locks[si].Lock()
		for wi := si * c.cfg.Ways; wi < (si+1)*c.cfg.Ways; wi++ {
			if t := c.tag(wi).Load(); t != 0 {
				c.writeBack(wi, t-1)
			}
		}
		c.locks[si].Unlock()
	}
}

// seqCopy copies cached words in or out of the data array. The data array
// is guarded by each set's sequence counter, not by atomics: a reader copies
// with plain loads and throws the copy away if the counter moved, and a
// writer holds the set's lock and makes the counter odd around its plain
// stores. Those deliberate unsynchronized accesses are hidden from the race
// detector, as in every seqlock; the counters and tags it still checks.
//
// It is a loop, not the copy builtin, whose runtime routine the race
// detector would still see.
//
//go:norace
func seqCopy(dst, src []uint64) {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	for i := range dst {
		dst[i] = src[i]
	}
}
