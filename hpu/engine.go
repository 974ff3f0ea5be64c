package hpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Config sizes an Engine; every pool is fixed here.
type Config struct {
	Clusters    int // clusters of HPUs (default 4, as PsPIN)
	HPUs        int // HPU goroutines per cluster (default 8)
	Slots       int // packet buffer slots per cluster (its L1; default 64)
	SlotSize    int // bytes per slot: the largest payload (default 4096)
	Messages    int // messages in flight at once, over every context (default 1024)
	ScratchSize int // bytes of each cluster's scratchpad (default 64 KiB)
	// TimeEvery times one task in TimeEvery (default 16; 1: every task):
	// its queueing, its run time, and its handler against the budget. A
	// clock read costs about as much as a short handler.
	TimeEvery int
}

// WithDefaults returns the configuration with every size left zero set
// to its default, as New sets it.
func (c Config) WithDefaults() Config {
	c.defaults()
	return c
}

func (c *Config) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Clusters, 4)
	def(&c.HPUs, 8)
	def(&c.Slots, 64)
	def(&c.SlotSize, 4096)
	def(&c.Messages, 1024)
	def(&c.ScratchSize, 64<<10)
	def(&c.TimeEvery, 16)
}

// The counters are grouped by who writes them, the submitting side or
// the HPUs, each group on its own cache lines: a counter both sides
// wrote would move between the processors at every packet. A group is
// kept apart from its neighbours by a whole line (line), whatever the
// alignment the allocator gives the struct that holds it.

// line is a cache line's bytes: a gap of one keeps the fields on either
// side off each other's lines.
type line [64]byte

// ClusterStats count one cluster's work (Engine.InUse says how many of
// its slots hold a packet now).
type ClusterStats struct {
	_        line
	SpillsIn atomic.Uint64 // packets placed here because their home cluster was full
	_        line
	Tasks    atomic.Uint64 // handler tasks run (a packet's header and payload handlers are one task)
	Timed    atomic.Uint64 // tasks timed (one in Config.TimeEvery)
	QueuedNs atomic.Uint64 // time the timed tasks waited for an HPU
	BusyNs   atomic.Uint64 // time HPUs ran the timed tasks
	_        line
}

// Stats count an Engine's work.
type Stats struct {
	_        line
	Packets  atomic.Uint64 // packets accepted
	Full     atomic.Uint64 // packets refused: no slot free anywhere, or no message entry
	Spills   atomic.Uint64 // packets placed away from their home cluster
	_        line
	Messages atomic.Uint64 // messages completed (with or without a fault)
	Faults   atomic.Uint64 // handlers stopped, over every context
	Overlong atomic.Uint64 // handlers that ran longer than their budget, over every context
	Aborted  atomic.Uint64 // messages ended by Abort before their last packet
	Nudges   atomic.Uint64 // sleeping HPUs the watchdog woke: their queue had not moved for a tick (watchTick)
	Retaken  atomic.Uint64 // tasks the watchdog queued again: taken with one whose handler ran a whole tick
	Helped   atomic.Uint64 // tasks a Helper ran (a NIC engine, on its own goroutine)
	KeptOff  atomic.Uint64 // times a context was kept off the Helpers: a handler faulted, or waited on one
	_        line
}

// ContextStats count one context's work.
type ContextStats struct {
	_         line
	Packets   atomic.Uint64
	_         line
	Messages  atomic.Uint64 // completed
	Dropped   atomic.Uint64 // packets dropped by a handler's Drop, or skipped after one
	Proceeded atomic.Uint64 // packets given to default processing
	Faults    atomic.Uint64 // handlers stopped: panic, memory overrun, DMA outside the region
	Overlong  atomic.Uint64 // handlers that ran longer than the budget
	DMABytes  atomic.Uint64 // bytes handlers wrote to host memory
	Sends     atomic.Uint64 // packets and puts handlers sent
	_         line
}

// Installed is a context installed on an Engine.
type Installed struct {
	ctx        Context
	mem        Memory
	timedShort atomic.Uint32 // tasks timed (on HPUs and Helpers) within inlineMax
	timedLong  atomic.Uint32 // and over it
	offUntil   atomic.Int64  // no Helper keeps its tasks before then (the engine's clock; 0: none): a handler faulted, or one waited on a Helper
	strikes    atomic.Int32  // tasks a Helper ran in a row that took longer than inlineBlock
	Stats      ContextStats
}

// Memory returns the context's handler memory (the host may read the
// results handlers keep there).
func (i *Installed) Memory() Memory { return i.mem }

// Engine schedules handler tasks on clusters of HPU goroutines.
type Engine struct {
	cfg      Config
	clusters []cluster
	Stats    Stats

	shards [msgShards]msgShard // the messages in flight, by (context, QPN, MSN)
	msgs   []msgState
	free   *ring // free message entries

	batches []hpuBatch // each HPU's batch of tasks (the HPU's, and the watchdog's)

	maxSpinners int32
	hpus        int32 // HPU goroutines, over every cluster
	start       time.Time
	stop        chan struct{} // closed when the HPUs are to return
	wg          sync.WaitGroup

	_          line
	closed     atomic.Bool
	submitting atomic.Int32 // Submits under way (Close waits for them)
	_          line         // the submitter's line, apart from the HPUs'
	spinners   atomic.Int32 // idle HPUs looking for work before they sleep
	asleep     atomic.Int32 // HPUs asleep, or about to be, over every cluster
	_          line
}

// msgShards is the number of independently locked parts of the message
// table: the NIC's engines look up their messages while HPUs complete
// others.
const msgShards = 64

type msgShard struct {
	mu sync.Mutex // guards the index
	msgIndex
	_ [24]byte // a line a shard: the shards' array starts a line after Stats' last
}

// msgIndex finds a message in flight by its key: a shard's (under its
// lock), or a Submitter's own.
type msgIndex struct {
	index   map[msgKey]int32
	lastKey msgKey // the message last looked up or added: the next packet is most often its
	lastMI  int32
}

// find looks a message up.
func (x *msgIndex) find(k msgKey) (int32, bool) {
	if k == x.lastKey && k.ctx != nil {
		return x.lastMI, true
	}
	mi, ok := x.index[k]
	if ok {
		x.lastKey, x.lastMI = k, mi
	}
	return mi, ok
}

// add indexes a message.
func (x *msgIndex) add(k msgKey, mi int32) {
	x.index[k] = mi
	x.lastKey, x.lastMI = k, mi
}

// remove drops a message from the index.
func (x *msgIndex) remove(k msgKey) {
	delete(x.index, k)
	if x.lastKey == k {
		x.lastKey = msgKey{}
	}
}

type cluster struct {
	// Read by both sides at every packet, written only by New.
	id      int
	slots   []slot
	bufs    []byte        // the slots' packet buffers, SlotSize bytes each
	free    *ring         // free slot numbers
	queue   *ring         // slots whose task is ready for an HPU
	wake    chan struct{} // wakes sleeping HPUs
	scratch Memory
	// Apart from the slots: one in Config.TimeEvery, and the HPUs' own.
	queued []int64 // when a timed slot was queued (nanoseconds from the engine's start; the submitter's)
	next   []int32 // the next slot waiting for the same message's header (cluster<<16|slot), or -1 (the HPUs')

	_        line
	sleepers atomic.Int32 // HPUs asleep, or about to be
	stats    ClusterStats // begins and ends with a line of its own
}

// slot is a packet buffer's descriptor: what Submit writes and the HPU
// that runs the task reads, half a cache line (32 bytes), so that the
// descriptors of a Submitter's line of tasks (popBatch, taken in the
// order the HPUs gave them back) move between the processors as four
// lines, not eight. The message's own fields are its entry's (msgState),
// read by the HPU at every packet anyway; the HPU builds the handler's
// Task in memory of its own.
type slot struct {
	length uint32 // the message's length as known at this packet (Message.Length)
	offset uint32
	index  int32
	psn    uint32
	imm    uint32
	n      int32 // payload bytes
	mi     int32 // the message entry
	opcode uint8
	flags  uint8 // slotFirst, slotLast, slotTimed
}

const (
	slotFirst = 1 << iota
	slotLast
	slotTimed
)

type msgKey struct {
	ctx *Installed
	qpn uint32
	msn uint32
}

func (k msgKey) shard() int { return int((k.qpn*0x9e3779b1 ^ k.msn) % msgShards) }

// msgState is a message in flight. refs counts down the packets the
// HPUs have handled from 0; when its last packet comes (or Abort ends
// it), the submitting side adds the number of packets it accepted
// (submitted), before the last packet is queued: refs reaches 0 once,
// after every packet has been handled, and whoever brings it there
// completes the message. So a packet costs the submitting side no write
// to the line the HPUs update at every packet (only its own, submitted),
// and the message one.
type msgState struct {
	// Set with the first packet, before it is queued; read by both sides.
	id      int32 // its index in the table
	key     msgKey
	msg     Message // as its first packet gave it: the HPUs read it at every packet (Length is length's)
	indexed bool    // in the table (a message of more than one packet)

	// The submitting side's, at every packet.
	_         line
	length    uint32 // Message.Length as its packets last gave it (read at the message's end)
	home      int
	submitted int32       // packets accepted
	lastSeen  atomic.Bool // its last packet came, or Abort ended it
	_         line

	// The HPUs'.
	refs       atomic.Int32
	headerDone atomic.Bool // the header handler finished (or the context has none)
	skip       atomic.Bool // dropped by the header handler, or stopped by a fault: later packets skip their handlers
	mu         sync.Mutex  // guards waitHead, fault, dropped, and the header's outcome
	dropped    bool
	headerAct  Action // what the header handler returned (set before headerDone): the action of packets without a payload handler
	fault      error  // the first fault of one of its handlers
	waitHead   int32  // slots waiting for the header handler (cluster<<16|slot), or -1
	_          line
}

// setFault records a handler's fault (the first one counts); later
// packets skip their handlers.
func (m *msgState) setFault(err error) {
	m.mu.Lock()
	if m.fault == nil {
		m.fault = err
	}
	m.skip.Store(true)
	m.mu.Unlock()
}

// ErrTooLarge: a payload larger than a slot.
var ErrTooLarge = errors.New("hpu: payload larger than a packet buffer slot")

// ErrClosed: the engine is closed.
var ErrClosed = errors.New("hpu: engine closed")

// maxSpinners is how many idle HPUs may spin: one fewer than the
// processors the program may run on, whatever its GOMAXPROCS (a program
// that runs NICs sets twice the processors, datapath.SpareProcs, so that
// threads asleep in system calls keep their Ps: with a spinner per P,
// three spinners took two processors' time from the NICs' engines, and
// the handlers' applications ran 0.78-0.80x the host's rate, 0.92-1.02x
// with GOMAXPROCS=2).
func maxSpinners() int32 {
	return int32(max(1, min(runtime.GOMAXPROCS(0), runtime.NumCPU())-1))
}

// New starts an engine: Clusters x HPUs goroutines. Close stops them.
func New(cfg Config) *Engine {
	cfg.defaults()
	e := &Engine{cfg: cfg, start: time.Now(), maxSpinners: maxSpinners(),
		msgs: make([]msgState, cfg.Messages), free: newRing(cfg.Messages), stop: make(chan struct{})}
	for i := range e.shards {
		e.shards[i].index = make(map[msgKey]int32, cfg.Messages/msgShards+1)
	}
	for i := range cfg.Messages {
		e.free.put(int32(i))
		e.msgs[i].id = int32(i)
	}
	e.clusters = make([]cluster, cfg.Clusters)
	for c := range e.clusters {
		cl := &e.clusters[c]
		cl.id = c
		cl.slots = make([]slot, cfg.Slots)
		cl.free = newRing(cfg.Slots)
		cl.queue = newRing(cfg.Slots)
		cl.wake = make(chan struct{}, cfg.HPUs)
		cl.scratch = NewMemory(cfg.ScratchSize)
		cl.bufs = make([]byte, cfg.Slots*cfg.SlotSize)
		cl.queued = make([]int64, cfg.Slots)
		cl.next = make([]int32, cfg.Slots)
		for s := range cl.slots {
			cl.free.put(int32(s))
		}
	}
	e.batches = make([]hpuBatch, cfg.Clusters*cfg.HPUs)
	e.hpus = int32(cfg.Clusters * cfg.HPUs)
	e.wg.Add(1)
	go e.watch()
	for c := range e.clusters { // once every cluster is built: a spinning HPU looks at them all
		for h := range cfg.HPUs {
			e.wg.Add(1)
			go e.hpu(&e.clusters[c], &e.batches[c*cfg.HPUs+h])
		}
	}
	return e
}

// now is the engine's clock: nanoseconds from its start, never 0.
func (e *Engine) now() int64 { return int64(time.Since(e.start)) + 1 }

// Config returns the engine's sizes.
func (e *Engine) Config() Config { return e.cfg }

// InUse is the number of cluster c's slots holding a packet now.
func (e *Engine) InUse(c int) int { return len(e.clusters[c].slots) - e.clusters[c].free.len() }

// Cluster returns cluster c's counters.
func (e *Engine) Cluster(c int) *ClusterStats { return &e.clusters[c].stats }

// Install installs an execution context: its handler memory is allocated
// here, once.
func (e *Engine) Install(c Context) (*Installed, error) {
	if c.MemorySize < 0 {
		return nil, fmt.Errorf("hpu: context %q: negative handler memory", c.Name)
	}
	if c.Budget <= 0 {
		c.Budget = 100 * time.Microsecond
	}
	return &Installed{ctx: c, mem: NewMemory(c.MemorySize)}, nil
}

// Close stops the HPUs after the tasks accepted have run (Submit refuses
// new ones from the start of Close).
func (e *Engine) Close() {
	if e.closed.Swap(true) {
		return
	}
	for e.submitting.Load() > 0 { // a Submit that saw the engine open queues its task first
		time.Sleep(10 * time.Microsecond)
	}
	for c := range e.clusters { // every slot back: no task can queue another
		for e.clusters[c].free.len() < len(e.clusters[c].slots) {
			time.Sleep(100 * time.Microsecond)
		}
	}
	close(e.stop)
	e.wg.Wait()
}

// home is a message's home cluster.
func (e *Engine) home(k msgKey) int {
	h := uint64(k.qpn)*0x9e3779b97f4a7c15 ^ uint64(k.msn)*0xc2b2ae3d27d4eb4f
	return int(h>>33) % len(e.clusters)
}

// Submit hands a packet of a message to its context's handlers: it goes
// to the message's home cluster, or, when that cluster's buffer is full,
// to the least loaded one. Packets of a message come in order (the
// transport's), its first with pkt.First and its last with pkt.Last, from
// one goroutine at a time. When no slot is free anywhere Submit returns
// ErrFull and keeps nothing: the NIC then does not acknowledge the
// packet, and the peer sends it again.
func (e *Engine) Submit(in *Installed, msg Message, pkt Packet) error {
	return e.submit(in, &msg, &pkt, nil, nil)
}

// submit is Submit; with sub, the task waits for sub.Publish
// (Submitter.Submit), and with h too, a short context's task is h's
// (Helper.Submit).
func (e *Engine) submit(in *Installed, msg *Message, pkt *Packet, sub *Submitter, h *Helper) error {
	if len(pkt.Payload) > e.cfg.SlotSize {
		return ErrTooLarge
	}
	if sub == nil {
		e.submitting.Add(1)
		defer e.submitting.Add(-1)
	} else {
		sub.enter()
		defer sub.leave()
	}
	if e.closed.Load() {
		return ErrClosed
	}
	k := msgKey{in, msg.QPN, msg.MSN}
	var mi int32
	found := false
	if !pkt.First { // a first packet starts its message: nothing to look up
		if sub != nil {
			mi, found = sub.find(k)
		} else {
			sh := &e.shards[k.shard()]
			sh.mu.Lock()
			mi, found = sh.find(k)
			sh.mu.Unlock()
		}
	}
	var m *msgState
	var home int
	if found {
		m = &e.msgs[mi]
		home = m.home
	} else if !pkt.First {
		return fmt.Errorf("hpu: packet %d of message %d of QP %d, whose first packet was not accepted", pkt.Index, msg.MSN, msg.QPN)
	} else {
		home = e.home(k)
	}
	cl, s, ok := e.take(home)
	if !ok {
		e.Stats.Full.Add(1)
		return ErrFull
	}
	if !found {
		if mi, ok = e.free.pop(); !ok {
			cl.free.put(s)
			e.Stats.Full.Add(1)
			return ErrFull
		}
		m = &e.msgs[mi]
		m.key, m.msg, m.length, m.home, m.submitted = k, *msg, msg.Length, home, 0
		m.refs.Store(0)
		m.lastSeen.Store(false)
		m.skip.Store(false)
		m.dropped, m.fault, m.headerAct, m.waitHead = false, nil, Proceed, -1
		m.headerDone.Store(in.ctx.Header == nil)
		m.indexed = false
		switch {
		case pkt.Last: // nothing will look for it
		case sub != nil: // its later packets, and Abort, look in sub's own index
			sub.add(k, mi)
		default:
			m.indexed = true
			sh := &e.shards[k.shard()]
			sh.mu.Lock()
			sh.add(k, mi)
			sh.mu.Unlock()
		}
	}
	if msg.Length != 0 {
		m.length = msg.Length
	}
	m.submitted++
	if pkt.Last {
		if sub != nil && !pkt.First {
			sub.remove(k)
		}
		m.lastSeen.Store(true)
		m.refs.Add(m.submitted) // before the packet is queued: refs stays above 0 until it is handled
	}

	sl := &cl.slots[s]
	flags := uint8(0)
	if pkt.First {
		flags |= slotFirst
	}
	if pkt.Last {
		flags |= slotLast
	}
	var n uint64
	if sub != nil {
		n = sub.count(in)
	} else {
		n = e.Stats.Packets.Add(1)
		in.Stats.Packets.Add(1)
	}
	if n%uint64(e.cfg.TimeEvery) == 0 {
		flags |= slotTimed
		cl.queued[s] = e.now() // the HPU reads it after the queue hands it the slot
	}
	*sl = slot{length: m.length, offset: pkt.Offset, index: int32(pkt.Index), psn: pkt.PSN, imm: pkt.Imm,
		n: int32(copy(cl.buf(s, e.cfg.SlotSize), pkt.Payload)), mi: mi, opcode: pkt.Opcode, flags: flags}
	switch {
	case h != nil && e.short(in):
		h.keep(cl, s)
	case sub != nil:
		sub.hold(cl, s)
	default:
		e.queue(cl, s)
	}
	return nil
}

// buf is slot s's packet buffer.
func (cl *cluster) buf(s int32, size int) []byte {
	return cl.bufs[int(s)*size : int(s+1)*size : int(s+1)*size]
}

// queue makes a slot's task ready for the cluster's HPUs, waking one if
// they sleep and no HPU spins (a spinning HPU looks at every queue), or
// if the queue has grown deep: the spinners do not keep up. The queue
// has room: it holds at most the cluster's slots.
func (e *Engine) queue(cl *cluster, s int32) {
	deep := cl.queue.put(s)
	e.wake(cl, deep)
}

// queueN is queue for several slots of one cluster at once
// (Submitter.Publish). The queue has grown deep when the tasks queued
// before them are still there.
func (e *Engine) queueN(cl *cluster, s []int32) {
	cl.queue.putN(s)
	e.wake(cl, cl.queue.len() > len(s))
}

// wake wakes one of cl's sleeping HPUs for tasks just queued: when no
// HPU spins (a spinner looks at every queue), or when the queue has
// grown deep and fewer HPUs are awake than the processors can run beside
// the submitter (maxSpinners): one more would only take the processor
// from the submitter or from an HPU already running tasks (on two
// processors, a third HPU woken at every deep queue moved the scheduler
// from 5.1-5.2 Mpps to 4.4). An awake HPU stuck in a long handler leaves
// its queue to the watchdog (watch).
func (e *Engine) wake(cl *cluster, deep bool) {
	if cl.sleepers.Load() == 0 {
		return
	}
	if e.spinners.Load() == 0 || deep && e.hpus-e.asleep.Load() < e.maxSpinners {
		wakeOne(cl)
	}
}

// wakeOne wakes one of cl's sleeping HPUs.
func wakeOne(cl *cluster) {
	select {
	case cl.wake <- struct{}{}:
	default: // every sleeper has a wake-up coming
	}
}

// take finds a free slot: in the home cluster, else in the least loaded.
func (e *Engine) take(home int) (*cluster, int32, bool) {
	cl := &e.clusters[home]
	if s, ok := cl.free.pop(); ok {
		return cl, s, true
	}
	for range 2 { // a slot freed between the look and the take: look again
		best, most := -1, 0
		for c := range e.clusters {
			if n := e.clusters[c].free.len(); c != home && n > most {
				best, most = c, n
			}
		}
		if best < 0 {
			return nil, 0, false
		}
		b := &e.clusters[best]
		if s, ok := b.free.pop(); ok {
			b.stats.SpillsIn.Add(1)
			e.Stats.Spills.Add(1)
			return b, s, true
		}
	}
	return nil, 0, false
}

// hpu is one HPU: it runs the tasks of its cluster, and, while it spins
// for work, those of any cluster.
func (e *Engine) hpu(cl *cluster, b *hpuBatch) {
	defer e.wg.Done()
	t := new(Task) // the handlers' view of the task this HPU runs
	var freed [popBatch]int32
	spinning := false
	seq := uint64(0)
	for {
		run := cl
		n := 0
		if !spinning {
			n = cl.queue.popN(b.tasks[:])
		}
		if n == 0 {
			run, n, spinning = e.spin(cl, spinning, b.tasks[:])
		}
		for n == 0 { // sleep: announce it, look once more, then wait to be woken
			run = cl
			cl.sleepers.Add(1)
			e.asleep.Add(1)
			if n = cl.queue.popN(b.tasks[:]); n == 0 {
				select {
				case <-cl.wake:
				case <-e.stop:
					cl.sleepers.Add(-1)
					e.asleep.Add(-1)
					return // every slot is free: no task is left
				}
				n = cl.queue.popN(b.tasks[:])
			}
			cl.sleepers.Add(-1)
			e.asleep.Add(-1)
		}
		// The slots' lines, read at once: their misses overlap instead of
		// coming one at each task.
		var mi int32
		for _, s := range b.tasks[:n] {
			mi |= run.slots[s].mi
		}
		if mi < 0 {
			panic("hpu: a queued slot without its message")
		}
		b.cl = run
		seq++
		b.word.Store(seq<<40 | uint64(n)<<32) // the batch, for the watchdog
		f := 0
		var d settling
		for {
			i := uint32(b.word.Add(1)) - 1 // the task it claims
			if i >= uint32(n) {
				if i >= batchTaking { // the watchdog took the rest: the batch is its until it has queued them
					for uint32(b.word.Load()) < batchTaken {
						runtime.Gosched()
					}
				}
				break
			}
			s := b.tasks[i]
			if e.runTask(run, s, t, &d) {
				freed[f] = s
				f++
			}
		}
		e.settle(run, &d, t)
		run.free.putN(freed[:f])
		run.stats.Tasks.Add(uint64(f))
	}
}

// hpuBatch is the tasks an HPU took from a queue at once. It claims
// them one at a time in word, so that the watchdog can take back those
// it has not started when it runs one task for a whole tick (a handler
// that waits): a long handler holds up its own task only, as without
// batches.
type hpuBatch struct {
	_     line
	cl    *cluster
	tasks [popBatch]int32
	// word is the batch's number (bits 40 up), its size (32-39) and the
	// tasks claimed (0-31); the watchdog sets the claimed count to
	// batchTaking while it queues the rest again, then to batchTaken.
	word atomic.Uint64
	last uint64 // the word at the watchdog's last tick (the watchdog's)
	_    line
}

const (
	batchTaking = 1 << 30
	batchTaken  = 1 << 31
)

// retake gives the queues back the tasks of b that its HPU has not
// started, if it has run one task since the last tick (watch).
func (e *Engine) retake(b *hpuBatch) {
	w := b.word.Load()
	last := b.last
	b.last = w
	n, claimed := uint32(w>>32)&0xff, uint32(w)
	if w != last || claimed == 0 || claimed >= n {
		return
	}
	if !b.word.CompareAndSwap(w, w&^0xffffffff|batchTaking) {
		return // it moved meanwhile
	}
	cl := b.cl
	for _, s := range b.tasks[claimed:n] {
		e.queue(cl, s)
	}
	e.Stats.Retaken.Add(uint64(n - claimed))
	b.word.Store(w&^0xffffffff | batchTaken)
	if cl.sleepers.Load() > 0 {
		wakeOne(cl)
	}
}

// settling is the packets an HPU has handled of one message and not yet
// counted down in its refs: the tasks of a batch are most often one
// message's, and their count goes down in one atomic add (settle).
type settling struct {
	m *msgState
	k int32
}

// settle counts down the packets d holds in their message's refs, and
// completes the message (in t) if they were its last.
func (e *Engine) settle(cl *cluster, d *settling, t *Task) {
	if d.m != nil && d.m.refs.Add(-d.k) == 0 {
		e.complete(cl, d.m, t)
	}
	d.m, d.k = nil, 0
}

// popBatch is the most tasks an HPU takes from a queue at once: one
// cache line of its cells, which then moves between the processors once
// for them all, as does the line of the free list it hands their slots
// back to.
const popBatch = 8

// spinRounds is how many times an idle HPU looks at the queues before it
// sleeps (with the pauses and yields between: about 20-50 us in all).
const spinRounds = 256

// spin looks for a task for a while before the HPU sleeps: waking a
// sleeping goroutine costs more than a short handler, so under a steady
// stream a few HPUs (one fewer than the processors, at least one) keep
// looking, at every cluster's queue, and while one does, queueing a task
// wakes no HPU (queue): the busy path has no wake-up per packet. An HPU
// that found a task stays counted while it runs it and looks again after
// it (counted: it is one), so the count does not move at every packet.
// It reports whether it found a task, and whether the HPU is still
// counted.
//
// What keeps a task from waiting with no HPU awake: an HPU counted in
// spinners looks at every queue again after each task, and once more
// after it leaves the count (it found nothing for a while); a queue that
// grows deep while the spinners run tasks wakes a sleeper (queue); and
// one that does not move for a watchdog tick, its HPUs asleep, has them
// woken (watch): a spinner's handler that runs long holds up only its
// own task.
func (e *Engine) spin(cl *cluster, counted bool, dst []int32) (*cluster, int, bool) {
	if counted || e.spinners.Add(1) <= e.maxSpinners {
		for r := range spinRounds {
			if c, n := e.popAny(cl, dst); n > 0 {
				return c, n, true
			}
			if r%spinYield == spinYield-1 {
				runtime.Gosched()
			} else {
				pause()
			}
		}
	}
	e.spinners.Add(-1)
	c, n := e.popAny(cl, dst)
	return c, n, false
}

// spinYield: a spinning HPU yields its processor at one empty look in
// spinYield, and between the others pauses without touching memory: a
// yield takes the scheduler's lock and, where the program has more Ps
// than processors (datapath.SpareProcs), wakes another thread to steal
// the yielding goroutine, which then takes a processor from the
// submitter (4.1-4.4 Mpps with GOMAXPROCS 4 on two processors,
// yielding at every look; 4.5-4.6 at one in eight).
const spinYield = 8

// pauseSink keeps pause's loop from being optimised away.
var pauseSink uint32

// pause waits a few dozen nanoseconds without a memory access or a
// system call, as a spin loop's PAUSE instruction would.
func pause() {
	x := uint32(1)
	for i := range uint32(64) {
		x = x*1664525 + i
	}
	if x == 0 {
		pauseSink = x
	}
}

// watchTick is how long a task may wait in a queue that does not move,
// its HPUs asleep, before the watchdog wakes them.
const watchTick = time.Millisecond

// watch is the engine's watchdog: every tick it wakes an HPU of each
// cluster whose queue holds tasks, has not moved since the last tick and
// has HPUs asleep (a spinner ran a long handler meanwhile: see spin).
func (e *Engine) watch() {
	defer e.wg.Done()
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	last := make([]uint32, len(e.clusters))
	for {
		select {
		case <-e.stop:
			return
		case <-tick.C:
		}
		for i := range e.batches {
			e.retake(&e.batches[i])
		}
		for i := range e.clusters {
			c := &e.clusters[i]
			head := c.queue.head.Load()
			if head == last[i] && c.queue.len() > 0 && c.sleepers.Load() > 0 {
				e.Stats.Nudges.Add(1)
				wakeOne(c)
			}
			last[i] = head
		}
	}
}

// Helper runs handler tasks on its caller's goroutine, as one more HPU:
// a NIC engine that submits packets runs the handlers of short contexts
// itself, in its own turn, instead of handing each packet to an HPU
// goroutine, which on a host whose cores the engines hold (two NICs
// polling on two cores) waits long for a processor, and whose hand-off
// moves the packet between processors. A context is short once the
// tasks timed (one in Config.TimeEvery, on an HPU or a Helper) ran
// within inlineMax, inlineWarmup of them at least, and no more than one
// in inlineSlack longer (a processor taken away meanwhile, a
// collection); one whose handler faults, or whose tasks a Helper ran
// longer than inlineBlock inlineStrikes times in a row (a handler that
// waits), is kept off the Helpers for inlineOff: the caller's other work
// waits for what its Helper runs. Tasks of other
// contexts go to the HPUs as Engine.Submit sends them. Its handlers see
// a Task as an HPU's do; what they call (Done, Net, Default) runs on the
// caller's goroutine. The tasks of other contexts wait as a Submitter's
// do, until Run or Publish. A Helper is used by one goroutine at a time,
// which must Run or Flush what it kept before the engine closes.
type Helper struct {
	Submitter
	t          Task
	own        []int32 // its tasks, cluster<<16|slot, a ring of every slot
	head, tail uint32
}

// The bounds of a short context (Helper); inlineMax is a variable for
// the tests.
var inlineMax = 2 * time.Microsecond

const (
	inlineWarmup = 32
	inlineSlack  = 8
	inlineBlock  = 100 * time.Microsecond
	inlineOff    = time.Second
	// inlineStrikes is how many tasks of a context in a row must run
	// longer than inlineBlock on Helpers to keep it off them: one alone
	// may be the processor taken away, which a handler that waits does
	// at every task.
	inlineStrikes = 2
)

// NewHelper returns a Helper for one goroutine.
func (e *Engine) NewHelper() *Helper {
	n := 1
	for n < e.cfg.Clusters*e.cfg.Slots {
		n <<= 1
	}
	return &Helper{Submitter: *e.NewSubmitter(), own: make([]int32, n)}
}

// Submit is Submitter.Submit, except that a task of a short context is
// kept for Run, on this goroutine, instead of going to an HPU.
func (h *Helper) Submit(in *Installed, msg Message, pkt Packet) error {
	return h.e.submit(in, &msg, &pkt, &h.Submitter, h)
}

// Pending is the number of tasks kept for Run.
func (h *Helper) Pending() int { return int(h.tail - h.head) }

// keep takes a task for Run.
func (h *Helper) keep(cl *cluster, s int32) {
	h.own[h.tail&uint32(len(h.own)-1)] = int32(cl.id)<<16 | s
	h.tail++
}

// Run publishes the HPUs' tasks held (Submitter.Publish) and runs the
// tasks kept, in order, until none is left, it ran max, or
// it has run for budget; what is left goes to the HPUs when it stops for
// the budget. Each task is timed (a clock read each): inlineStrikes in a
// row of a context over inlineBlock keep it off the Helpers. It reports
// how many it ran (counted in Stats.Helped).
func (h *Helper) Run(max int, budget time.Duration) int {
	h.Publish() // the HPUs' tasks first: they run meanwhile
	if h.head == h.tail {
		return 0
	}
	e := h.e
	ran := 0
	start := e.now()
	last := start
	for ran < max && h.head != h.tail {
		if time.Duration(last-start) >= budget {
			h.Flush()
			break
		}
		v := h.own[h.head&uint32(len(h.own)-1)]
		h.head++
		cl, s := &e.clusters[v>>16], v&0xffff
		in := e.msgs[cl.slots[s].mi].key.ctx
		var d settling
		if e.runTask(cl, s, &h.t, &d) {
			e.settle(cl, &d, &h.t)
			cl.free.put(s)
			cl.stats.Tasks.Add(1)
		}
		ran++
		now := e.now()
		// A task that waits is a strike (the timed ones count in the
		// context's share of long tasks, in runTask, as on an HPU).
		switch d := time.Duration(now - last); {
		case d > inlineBlock:
			if in.strikes.Add(1) >= inlineStrikes {
				in.strikes.Store(0)
				e.keepOff(in)
			}
		case in.strikes.Load() != 0:
			in.strikes.Store(0)
		}
		last = now
	}
	if ran > 0 {
		e.Stats.Helped.Add(uint64(ran))
	}
	return ran
}

// Flush gives the tasks kept, and those held, to the HPUs (the helper's goroutine stops
// running them: its NIC closes, or its budget ran out).
func (h *Helper) Flush() {
	h.Publish()
	for ; h.head != h.tail; h.head++ {
		v := h.own[h.head&uint32(len(h.own)-1)]
		h.e.queue(&h.e.clusters[v>>16], v&0xffff)
	}
}

// short reports whether a Helper may run the context's tasks.
func (e *Engine) short(in *Installed) bool {
	n := in.timedShort.Load()
	if n < inlineWarmup || in.timedLong.Load()*inlineSlack >= n {
		return false
	}
	if t := in.offUntil.Load(); t != 0 { // the clock is read only then
		if e.now() < t {
			return false
		}
		in.offUntil.CompareAndSwap(t, 0)
	}
	return true
}

// keepOff keeps the Helpers off the context's tasks for inlineOff.
func (e *Engine) keepOff(in *Installed) {
	in.offUntil.Store(e.now() + int64(inlineOff))
	e.Stats.KeptOff.Add(1)
}

// timed notes a timed task (on an HPU or a Helper) that ran for d.
func (in *Installed) timed(d time.Duration) {
	c := &in.timedShort
	if d > inlineMax {
		c = &in.timedLong
	}
	if c.Add(1) >= 1<<20 { // the older samples count half
		in.timedShort.Store(in.timedShort.Load() / 2)
		in.timedLong.Store(in.timedLong.Load() / 2)
	}
}

// popAny takes tasks from cl's queue, else from the other clusters'.
func (e *Engine) popAny(cl *cluster, dst []int32) (*cluster, int) {
	if n := cl.queue.popN(dst); n > 0 {
		return cl, n
	}
	for i := range e.clusters {
		if c := &e.clusters[i]; c != cl {
			if n := c.queue.popN(dst); n > 0 {
				return c, n
			}
		}
	}
	return nil, 0
}

// runTask runs one packet's handlers, or parks it until its message's
// header handler has run. t is the HPU's own Task, filled here from the
// slot. It reports whether the slot is done with, for the caller to give
// back to its cluster's free list (false: parked); a packet handled is
// held in d, for the caller to settle.
func (e *Engine) runTask(cl *cluster, s int32, t *Task, d *settling) bool {
	sl := &cl.slots[s]
	m := &e.msgs[sl.mi]
	if d.m != nil && d.m != m { // the packets handled before complete before this one runs
		e.settle(cl, d, t)
	}
	in := m.key.ctx
	timed := sl.flags&slotTimed != 0
	var start int64
	if timed {
		start = e.now()
		cl.stats.Timed.Add(1)
		cl.stats.QueuedNs.Add(uint64(start - cl.queued[s]))
	}
	*t = Task{
		Packet: Packet{Payload: cl.buf(s, e.cfg.SlotSize)[:sl.n:sl.n], Offset: sl.offset, Index: int(sl.index),
			Opcode: sl.opcode, PSN: sl.psn, Imm: sl.imm, First: sl.flags&slotFirst != 0, Last: sl.flags&slotLast != 0},
		Message: m.msg, Mem: in.mem, Scratch: cl.scratch, Cluster: cl.id, ctx: in,
	}
	t.Message.Length = sl.length

	header := false
	if !m.headerDone.Load() {
		m.mu.Lock()
		switch {
		case m.headerDone.Load(): // it finished meanwhile
		case t.Packet.First:
			header = true
		default:
			// A payload packet ahead of its header handler: it waits,
			// holding its slot, and the header's HPU queues it again.
			cl.next[s], m.waitHead = m.waitHead, int32(cl.id)<<16|s
			m.mu.Unlock()
			return false
		}
		m.mu.Unlock()
	}

	var fault error
	act := Proceed
	if header {
		if !m.skip.Load() {
			act, fault = e.call(in.ctx.Header, t, timed)
		}
		m.mu.Lock()
		m.headerAct = act
		if act == Drop {
			m.dropped = true
			m.skip.Store(true)
		}
		if fault != nil {
			if m.fault == nil {
				m.fault = fault
			}
			m.skip.Store(true)
		}
		m.headerDone.Store(true)
		e.release(m)
	}
	if !m.skip.Load() {
		act = m.headerAct // no payload handler: the packet goes as the header handler said
		if in.ctx.Payload != nil {
			act, fault = e.call(in.ctx.Payload, t, timed)
		}
		switch {
		case fault != nil:
			m.setFault(fault)
		case act == Drop:
			in.Stats.Dropped.Add(1)
		case act == Proceed:
			in.Stats.Proceeded.Add(1)
			if in.ctx.Default != nil {
				if err := in.ctx.Default(&t.Message, &t.Packet); err != nil {
					m.setFault(err)
				}
			}
		}
	} else {
		in.Stats.Dropped.Add(1)
	}
	if timed {
		d := e.now() - start
		cl.stats.BusyNs.Add(uint64(d))
		in.timed(time.Duration(d))
	}
	*t = Task{}         // nothing of the packet outlives its handlers
	d.m, d.k = m, d.k+1 // counted down with its message's others (settle)
	return true
}

// release queues again the packets that waited for m's header handler;
// m.mu is held and released here. The queues have room: a cluster's
// queue holds at most its slots, and these hold slots already.
func (e *Engine) release(m *msgState) {
	wait := m.waitHead
	m.waitHead = -1
	m.mu.Unlock()
	for wait >= 0 {
		c := &e.clusters[wait>>16]
		w := wait & 0xffff
		wait = c.next[w]
		e.queue(c, w)
	}
}

// complete runs a message's completion handler in t (unless a handler
// dropped it or faulted, or t is nil: Abort), frees its entry and
// reports it done. Every packet of the message has been handled: no
// other HPU touches it now.
func (e *Engine) complete(cl *cluster, m *msgState, t *Task) {
	in := m.key.ctx
	m.msg.Length = m.length // every packet has been handled: no HPU reads it now
	if m.fault == nil && !m.dropped && in.ctx.Completion != nil && t != nil {
		*t = Task{Message: m.msg, Mem: in.mem, Scratch: cl.scratch, Cluster: cl.id, ctx: in}
		if _, err := e.call(in.ctx.Completion, t, true); err != nil {
			m.fault = err
		}
		*t = Task{}
	}
	in.Stats.Messages.Add(1)
	e.Stats.Messages.Add(1)
	if in.ctx.Done != nil {
		in.ctx.Done(&m.msg, m.fault) // the entry is still the message's: nothing is allocated
	}
	if m.indexed {
		sh := &e.shards[m.key.shard()]
		sh.mu.Lock()
		sh.remove(m.key)
		sh.mu.Unlock()
	}
	m.key, m.fault = msgKey{}, nil
	e.free.put(m.id)
}

// Abort ends a message whose last packet will not come (its QP failed or
// was reset, or an unreliable transport lost a packet): it completes with
// err, as soon as the packets accepted so far have been handled, without
// its completion handler. The caller is the message's submitter (Abort
// counts what it submitted) and submits no more of its packets. It
// reports whether the message was in flight.
func (e *Engine) Abort(in *Installed, qpn, msn uint32, err error) bool {
	k := msgKey{in, qpn, msn}
	sh := &e.shards[k.shard()]
	sh.mu.Lock()
	mi, found := sh.find(k)
	sh.mu.Unlock()
	if !found {
		return false
	}
	e.abort(&e.msgs[mi], err)
	return true
}

// abort ends message m (Abort).
func (e *Engine) abort(m *msgState, err error) {
	if m.lastSeen.Swap(true) { // its last packet came: it completes on its own
		return
	}
	m.setFault(err)
	e.Stats.Aborted.Add(1)
	if m.refs.Add(m.submitted) == 0 { // every packet accepted has been handled
		e.complete(&e.clusters[m.home], m, nil)
	}
}

// call runs a handler, turning a panic into its fault, and if timed,
// checks it against its budget.
func (e *Engine) call(h Handler, t *Task, timed bool) (act Action, fault error) {
	var start int64
	if timed {
		start = e.now()
	}
	defer func() {
		if v := recover(); v != nil {
			act, fault = Drop, faultError(v)
			t.ctx.Stats.Faults.Add(1)
			e.Stats.Faults.Add(1)
			e.keepOff(t.ctx) // a context whose handler faults is not short (Helper)
		}
		if timed && time.Duration(e.now()-start) > t.ctx.ctx.Budget {
			t.ctx.Stats.Overlong.Add(1)
			e.Stats.Overlong.Add(1)
		}
	}()
	return h(t), nil
}
