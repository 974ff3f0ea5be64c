package hpu

import (
	"errors"
	"fmt"
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
}

// ClusterStats count one cluster's work.
type ClusterStats struct {
	Tasks    atomic.Uint64 // handler tasks run (a packet's header and payload handlers are one task)
	QueuedNs atomic.Uint64 // time tasks waited for an HPU
	BusyNs   atomic.Uint64 // time HPUs ran handlers
	SpillsIn atomic.Uint64 // packets placed here because their home cluster was full
	InUse    atomic.Int64  // slots holding a packet now
}

// Stats count an Engine's work.
type Stats struct {
	Packets  atomic.Uint64 // packets accepted
	Full     atomic.Uint64 // packets refused: no slot free anywhere, or no message entry
	Spills   atomic.Uint64 // packets placed away from their home cluster
	Messages atomic.Uint64 // messages completed (with or without a fault)
	Faults   atomic.Uint64 // handlers stopped, over every context
	Overlong atomic.Uint64 // handlers that ran longer than their budget, over every context
	Aborted  atomic.Uint64 // messages ended by Abort before their last packet
}

// ContextStats count one context's work.
type ContextStats struct {
	Messages  atomic.Uint64 // completed
	Packets   atomic.Uint64
	Dropped   atomic.Uint64 // packets dropped by a handler's Drop, or skipped after one
	Proceeded atomic.Uint64 // packets given to default processing
	Faults    atomic.Uint64 // handlers stopped: panic, memory overrun, DMA outside the region
	Overlong  atomic.Uint64 // handlers that ran longer than the budget
	DMABytes  atomic.Uint64 // bytes handlers wrote to host memory
	Sends     atomic.Uint64 // packets and puts handlers sent
}

// Installed is a context installed on an Engine.
type Installed struct {
	ctx   Context
	mem   Memory
	Stats ContextStats
}

// Memory returns the context's handler memory (the host may read the
// results handlers keep there).
func (i *Installed) Memory() Memory { return i.mem }

// Engine schedules handler tasks on clusters of HPU goroutines.
type Engine struct {
	cfg      Config
	clusters []cluster
	Stats    Stats

	mu    sync.Mutex // guards the message table
	index map[msgKey]int32
	msgs  []msgState
	free  []int32

	wg     sync.WaitGroup
	closed atomic.Bool
}

type cluster struct {
	id      int
	slots   []slot
	free    chan int32 // free slot numbers
	queue   chan int32 // slots whose task is ready for an HPU
	scratch Memory
	stats   ClusterStats
}

type slot struct {
	buf    []byte
	task   Task
	msg    int32
	n      int
	queued time.Time
	next   int32 // the next slot waiting for the same message's header (cluster<<16|slot), or -1
}

type msgKey struct {
	ctx *Installed
	qpn uint32
	msn uint32
}

type msgState struct {
	mu         sync.Mutex
	id         int32 // its index in the table
	key        msgKey
	msg        Message
	home       int
	headerDone bool   // the header handler finished (or the context has none)
	dropped    bool   // the header handler dropped the message
	headerAct  Action // what the header handler returned: the action of packets without a payload handler
	fault      error  // the first fault of one of its handlers
	submitted  int
	finished   int
	lastSeen   bool
	waitHead   int32 // slots waiting for the header handler (cluster<<16|slot), or -1
}

// ErrTooLarge: a payload larger than a slot.
var ErrTooLarge = errors.New("hpu: payload larger than a packet buffer slot")

// New starts an engine: Clusters x HPUs goroutines. Close stops them.
func New(cfg Config) *Engine {
	cfg.defaults()
	e := &Engine{cfg: cfg, index: make(map[msgKey]int32, cfg.Messages), msgs: make([]msgState, cfg.Messages),
		free: make([]int32, 0, cfg.Messages)}
	for i := cfg.Messages - 1; i >= 0; i-- {
		e.free = append(e.free, int32(i))
		e.msgs[i].id = int32(i)
	}
	e.clusters = make([]cluster, cfg.Clusters)
	for c := range e.clusters {
		cl := &e.clusters[c]
		cl.id = c
		cl.slots = make([]slot, cfg.Slots)
		cl.free = make(chan int32, cfg.Slots)
		cl.queue = make(chan int32, cfg.Slots)
		cl.scratch = NewMemory(cfg.ScratchSize)
		backing := make([]byte, cfg.Slots*cfg.SlotSize)
		for s := range cl.slots {
			cl.slots[s].buf = backing[s*cfg.SlotSize : (s+1)*cfg.SlotSize : (s+1)*cfg.SlotSize]
			cl.free <- int32(s)
		}
		for range cfg.HPUs {
			e.wg.Add(1)
			go e.hpu(cl)
		}
	}
	return e
}

// Config returns the engine's sizes.
func (e *Engine) Config() Config { return e.cfg }

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
	e.mu.Lock()
	was := e.closed.Swap(true)
	e.mu.Unlock()
	if was {
		return
	}
	for c := range e.clusters { // every slot back: no task can queue another
		for len(e.clusters[c].free) < len(e.clusters[c].slots) {
			time.Sleep(100 * time.Microsecond)
		}
	}
	for c := range e.clusters {
		close(e.clusters[c].queue)
	}
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
// transport's), its first with pkt.First and its last with pkt.Last. When
// no slot is free anywhere Submit returns ErrFull and keeps nothing: the
// NIC then does not acknowledge the packet, and the peer sends it again.
func (e *Engine) Submit(in *Installed, msg Message, pkt Packet) error {
	if len(pkt.Payload) > e.cfg.SlotSize {
		return ErrTooLarge
	}
	if e.closed.Load() {
		return errors.New("hpu: engine closed")
	}
	k := msgKey{in, msg.QPN, msg.MSN}
	home := e.home(k)
	cl, s, ok := e.take(home)
	if !ok {
		e.Stats.Full.Add(1)
		return ErrFull
	}
	e.mu.Lock()
	mi, found := e.index[k]
	if e.closed.Load() { // Close set it under e.mu: it waits for this slot, or we give it back
		e.mu.Unlock()
		cl.free <- s
		cl.stats.InUse.Add(-1)
		return errors.New("hpu: engine closed")
	}
	if !found {
		if len(e.free) == 0 {
			e.mu.Unlock()
			cl.free <- s
			cl.stats.InUse.Add(-1)
			e.Stats.Full.Add(1)
			return ErrFull
		}
		mi = e.free[len(e.free)-1]
		e.free = e.free[:len(e.free)-1]
		e.index[k] = mi
		m := &e.msgs[mi]
		m.mu.Lock()
		m.key, m.msg, m.home = k, msg, home
		m.headerDone, m.dropped, m.fault, m.headerAct = in.ctx.Header == nil, false, nil, Proceed
		m.submitted, m.finished, m.lastSeen, m.waitHead = 0, 0, false, -1
		m.mu.Unlock()
	}
	m := &e.msgs[mi]
	m.mu.Lock()
	m.submitted++
	if pkt.Last {
		m.lastSeen = true
	}
	if msg.Length != 0 {
		m.msg.Length = msg.Length
	}
	m.mu.Unlock()
	e.mu.Unlock()

	sl := &cl.slots[s]
	sl.n = copy(sl.buf, pkt.Payload)
	pkt.Payload = sl.buf[:sl.n:sl.n]
	sl.task = Task{Packet: pkt, Message: msg, Mem: in.mem, Scratch: cl.scratch, Cluster: cl.id, ctx: in}
	sl.msg, sl.queued, sl.next = mi, time.Now(), -1
	e.Stats.Packets.Add(1)
	in.Stats.Packets.Add(1)
	cl.queue <- s // never blocks: the queue holds at most the cluster's slots
	return nil
}

// take finds a free slot: in the home cluster, else in the least loaded.
func (e *Engine) take(home int) (*cluster, int32, bool) {
	cl := &e.clusters[home]
	select {
	case s := <-cl.free:
		cl.stats.InUse.Add(1)
		return cl, s, true
	default:
	}
	for range 2 { // a slot freed between the look and the take: look again
		best := -1
		for c := range e.clusters {
			if c != home && len(e.clusters[c].free) > 0 && (best < 0 || len(e.clusters[c].free) > len(e.clusters[best].free)) {
				best = c
			}
		}
		if best < 0 {
			return nil, 0, false
		}
		select {
		case s := <-e.clusters[best].free:
			b := &e.clusters[best]
			b.stats.InUse.Add(1)
			b.stats.SpillsIn.Add(1)
			e.Stats.Spills.Add(1)
			return b, s, true
		default:
		}
	}
	return nil, 0, false
}

// hpu is one HPU: it runs the tasks of its cluster.
func (e *Engine) hpu(cl *cluster) {
	defer e.wg.Done()
	for s := range cl.queue {
		e.runTask(cl, s)
	}
}

// runTask runs one packet's handlers, or parks it until its message's
// header handler has run.
func (e *Engine) runTask(cl *cluster, s int32) {
	sl := &cl.slots[s]
	m := &e.msgs[sl.msg]
	t := &sl.task
	in := t.ctx
	start := time.Now()
	cl.stats.QueuedNs.Add(uint64(start.Sub(sl.queued)))

	m.mu.Lock()
	header := t.Packet.First && !m.headerDone
	if !header && !m.headerDone {
		// A payload packet ahead of its header handler: it waits, holding
		// its slot, and the header's HPU queues it again.
		sl.next, m.waitHead = m.waitHead, int32(cl.id)<<16|s
		m.mu.Unlock()
		return
	}
	skip := m.dropped || m.fault != nil
	hact := m.headerAct
	m.mu.Unlock()

	var fault error
	var act Action
	if header && !skip {
		act, fault = e.call(in.ctx.Header, t)
		m.mu.Lock()
		m.headerDone, m.headerAct, hact = true, act, act
		if act == Drop {
			m.dropped = true
		}
		if fault != nil && m.fault == nil {
			m.fault = fault
		}
		skip = m.dropped || m.fault != nil
		e.release(m)
	} else if header {
		m.mu.Lock()
		m.headerDone = true
		e.release(m)
	}
	if !skip {
		act = hact // no payload handler: the packet goes as the header handler said
		if in.ctx.Payload != nil {
			act, fault = e.call(in.ctx.Payload, t)
		}
		switch {
		case fault != nil:
			m.mu.Lock()
			if m.fault == nil {
				m.fault = fault
			}
			m.mu.Unlock()
		case act == Drop:
			in.Stats.Dropped.Add(1)
		case act == Proceed:
			in.Stats.Proceeded.Add(1)
			if in.ctx.Default != nil {
				if err := in.ctx.Default(&t.Message, &t.Packet); err != nil {
					m.mu.Lock()
					if m.fault == nil {
						m.fault = err
					}
					m.mu.Unlock()
				}
			}
		}
	} else {
		in.Stats.Dropped.Add(1)
	}
	cl.stats.Tasks.Add(1)
	cl.stats.BusyNs.Add(uint64(time.Since(start)))
	e.finish(cl, s, m)
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
		wait = c.slots[w].next
		c.queue <- w
	}
}

// finish gives the slot back and, after the message's last packet, runs
// its completion handler and reports it done.
func (e *Engine) finish(cl *cluster, s int32, m *msgState) {
	cl.slots[s].task = Task{}
	cl.stats.InUse.Add(-1)
	cl.free <- s

	m.mu.Lock()
	m.finished++
	done := m.lastSeen && m.finished == m.submitted
	m.mu.Unlock()
	if done {
		e.complete(cl, m)
	}
}

// complete runs a message's completion handler (unless a handler dropped
// it or faulted), frees its entry and reports it done. Every packet of
// the message has been handled: no other HPU touches it now.
func (e *Engine) complete(cl *cluster, m *msgState) {
	in := m.key.ctx
	if m.fault == nil && !m.dropped && in.ctx.Completion != nil {
		ct := Task{Message: m.msg, Mem: in.mem, Scratch: cl.scratch, Cluster: cl.id, ctx: in}
		if _, err := e.call(in.ctx.Completion, &ct); err != nil {
			m.fault = err
		}
	}
	final, err := m.msg, m.fault
	e.mu.Lock()
	delete(e.index, m.key)
	e.free = append(e.free, m.id)
	m.key = msgKey{}
	e.mu.Unlock()
	in.Stats.Messages.Add(1)
	e.Stats.Messages.Add(1)
	if in.ctx.Done != nil {
		in.ctx.Done(&final, err)
	}
}

// Abort ends a message whose last packet will not come (its QP failed or
// was reset, or an unreliable transport lost a packet): it completes with
// err, as soon as the packets accepted so far have been handled, without
// its completion handler. It reports whether the message was in flight.
func (e *Engine) Abort(in *Installed, qpn, msn uint32, err error) bool {
	k := msgKey{in, qpn, msn}
	e.mu.Lock()
	mi, found := e.index[k]
	if !found {
		e.mu.Unlock()
		return false
	}
	m := &e.msgs[mi]
	m.mu.Lock()
	if m.lastSeen { // its last packet came: it completes on its own
		m.mu.Unlock()
		e.mu.Unlock()
		return true
	}
	m.lastSeen = true
	if m.fault == nil {
		m.fault = err
	}
	done := m.finished == m.submitted
	m.mu.Unlock()
	e.mu.Unlock()
	e.Stats.Aborted.Add(1)
	if done {
		e.complete(&e.clusters[m.home], m)
	}
	return true
}

// call runs a handler, turning a panic into its fault and timing it.
func (e *Engine) call(h Handler, t *Task) (act Action, fault error) {
	start := time.Now()
	defer func() {
		if v := recover(); v != nil {
			act, fault = Drop, faultError(v)
			t.ctx.Stats.Faults.Add(1)
			e.Stats.Faults.Add(1)
		}
		if time.Since(start) > t.ctx.ctx.Budget {
			t.ctx.Stats.Overlong.Add(1)
			e.Stats.Overlong.Add(1)
		}
	}()
	return h(t), nil
}
