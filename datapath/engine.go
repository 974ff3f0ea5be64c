package datapath

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/hpu"
	"github.com/softrnic/softrnic/reliability"
	"golang.org/x/sys/unix"
)

// EngineStats count one engine's work.
type EngineStats struct {
	RxFrames      atomic.Uint64 // frames taken from its own queue
	HandoffIn     atomic.Uint64 // frames other engines passed to it
	HandoffOut    atomic.Uint64 // frames it passed to other engines
	Doorbells     atomic.Uint64 // send doorbells served
	HandoffQueued atomic.Int64  // frames handed to it, not yet taken
	IdlePolls     atomic.Uint64 // idle turns it polled instead of sleeping
	Sleeps        atomic.Uint64 // times it slept on its port
}

// engine runs the requester, responder and completer for the QPs it owns,
// on one queue of the port. Everything in it is touched by its own
// goroutine only, except the channels and atomics.
type engine struct {
	nic       *NIC       // the NIC it is an engine of: its tables, caches, SRQs, CQ locks and handler stage
	cfg       *NICConfig // the NIC's (fixed once built)
	counters  *Counters  // the NIC's, shared by its engines
	qps       []qpRun    // every QP's running state; it touches only the QPs it owns
	id        int        // its queue, and its pipeline in every context cache
	port      Port
	stats     EngineStats
	path      reliability.PathRTT // the longest round trip its QPs have seen lately (their early timers wait beyond it)
	doorbells chan Doorbell       // send queues
	bells     [bellBatch]Doorbell // serveBells' batch
	warmSink  uintptr             // the sums of the words warm.go reads
	recvBells chan Doorbell       // receive queues: the responder may drain them mid-batch
	cmds      chan func()
	inbox     chan handoff  // frames for its QPs that came in on other queues
	hpuEv     chan hpuEvent // from HPU goroutines: messages done, commands
	hpuAcks   []uint32      // QPs whose messages' handlers finished in this batch: to acknowledge
	hpuHelper *hpu.Helper   // runs short contexts' handler tasks in the engine's turn (helpHPU)
	hpuHelp   bool          // the helper keeps tasks: the engine does not sleep
	spare     chan []byte   // free buffers for inbox, fixed in number

	words                 [32]uint64
	memo                  unitMemo             // the contexts the unit of work at hand resolved (resolve.go)
	cqes                  [cqeQueue]pendingCQE // CQEs waiting for their CQ's context (qp.go)
	cqeHead, cqeN         int
	cqeHeld               []uint16             // per CQ: its CQEs in cqes
	cqeHeldQP             []uint16             // per QP (by number, modulo): its CQEs in cqes
	cqeDue                bool                 // a CQ context CQEs wait for has come
	hpuHeld               [hpuHeldMax]hpuEvent // events from the HPUs waiting for their contexts (hpu.go)
	hpuHeldHead, hpuHeldN int
	hpuHeldQP             []uint16              // per QP: its events in hpuHeld
	hpuDue                bool                  // a context held events wait for has come
	ctxResp               [8]ctxcache.Response  // ctx's answers from the caches
	parkResp              [16]ctxcache.Response // pollParked's
	entry                 [256]byte
	wqe                   [hostmem.SendWQESize]byte
	payload               []byte                            // staging for one packet's payload
	timerWheel            wheel                             // QPs with a retransmission timer running (timers.go)
	rxBacklog             int                               // turns in a row that left received frames in the port
	lastTurn              int64                             // when the last turn began, or ended if it had work (nanotime)
	timersHeld            int64                             // the timers wait until then (nanotime): the engine was starved (starved)
	sinceHold             int                               // turns since the timers were last held
	systemClock           bool                              // the timers run on the system's clock (no test drives it)
	now                   time.Time                         // the turn's time (clock), read once a turn
	nowRead               bool                              // now holds this turn's time
	turnNS                int64                             // the turn's nanotime read, if nowFromNS (0: none; -1: read it when asked): now is made from it when first asked
	nowFromNS             bool                              // the NIC's clock is the SystemClock: a turn's time is its nanotime read
	kicker                Kicker                            // the port, if it is one: kicked before a timer fires
	kicked                bool                              // it was, for the timers due now
	parkPool              *Pool                             // parked packets' copies
	heldRx                [heldRxMax]Frame                  // port frames parked in place (park.go)
	heldFree              []uint16                          // free entries of heldRx
	rxPort                bool                              // receive is taking the port's batch: park may keep its buffers
	inHandoff             bool                              // receive is taking a frame another engine handed over
	parkPID               [hostmem.NumContextTypes][]uint32 // cache ticket -> QP number + 1 of the QP parked on it
	ready                 []uint32                          // parked QPs whose context has come
	sqReady               []uint32                          // QPs whose requester's context has come
	readers               []uint32                          // QPs answering a READ
	laterQPs, laterSpare  []uint32                          // QPs to come back to (retransmissions beyond a burst, pacing)
	laterNow              bool                              // one of them is due at once (later)
	paceWake              time.Time                         // the first time a paced one of them may send (laterAt)
	awaitOut, awaitCap    int                               // answers the QPs await (READ responses, ACKs), and the most they may (half the port's receive capacity)
	readWake              time.Time                         // when the first READ response its pace holds may go (pumpReads)
	ecn                   uint8                             // the ECN field of its packets (NICConfig.ECN)
	roomWaiters           []uint32                          // QPs whose next request waits for awaitOut to fall
	dma                   dmaStage                          // reads in flight: WQE fetches, frames waiting for their payload (dmastage.go)
	noticer               hostmem.Completer                 // tells the host of CQEs in host memory (notice)
	tx                    []Frame                           // frames encoded, not yet handed to the port
	txN                   int
	ackHold               ackHold        // ACKs held for the application's answer (holdACKs)
	postHold              postHold       // a post's frames held for the application's next call (holdPosts)
	postHeld              atomic.Bool    // postHold.held, for the engine's goroutine to see without the lock
	leased                atomic.Bool    // the engine's goroutine waits on its lease's timer (waitLease)
	byPost                bool           // the turn is a post's (PollApp: a doorbell rung by the application)
	unreliablePost        bool           // the turn ran a UC or UD QP's requester: its frames are not held (holdPosts)
	byApp                 bool           // the turn is the application's (PollApp: NIC.Progress, a doorbell's turn)
	sent                  [64]pendingCQE // unreliable sends' completions, written once their frames have left (completeSent)
	sentN                 int
	idleSince             int64 // when the engine's idle polling began (nanotime; 0: it has work)
	appBusy               int64 // PollApp: when the engine's own goroutine last had work, in nanotime
	misses                int   // tickets of this engine's lookups whose answers have not come (look, arrived)

	sleeping    atomic.Bool // the engine is (about to be) asleep in Port.Wait
	done        chan struct{}
	mu          sync.Mutex // held for a turn: by the engine's goroutine, or an application's (NIC.Progress)
	frames      []Frame
	driven      atomic.Int64          // when an application last drove the engine (PollApp), in nanotime
	lease       atomic.Pointer[lease] // PollApp: what the goroutine waits on while the application polls, once it runs (nil: a runtime timer)
	released    chan struct{}         // PollApp: NIC.Release's word to the goroutine waiting on the lease (capacity 1)
	backingOff  uint32                // 1 while the goroutine of a NIC on one CPU sleeps out of the application's way (appBackoff): a futex word, atomic
	drivenStart atomic.Int64          // when the application's last NIC.Progress began, in nanotime
	drivenGap   atomic.Int64          // the period of its last two calls, in ns
}

func newEngine(n *NIC, id int, p Port) *engine {
	e := &engine{nic: n, cfg: &n.cfg, counters: &n.counters, qps: n.qps, id: id, port: p,
		doorbells: make(chan Doorbell, 4096), recvBells: make(chan Doorbell, 4096), cmds: make(chan func(), 16), hpuEv: make(chan hpuEvent, 4096),
		payload: make([]byte, 4096), tx: make([]Frame, 64), done: make(chan struct{}), frames: make([]Frame, 32), released: make(chan struct{}, 1),
		parkPool: NewPool(parkBuffers, 9216), cqeHeld: make([]uint16, n.cfg.MaxCQs), cqeHeldQP: make([]uint16, max(len(n.qps), 1)), hpuHeldQP: make([]uint16, len(n.qps)),
		ready: make([]uint32, 0, len(n.qps)), sqReady: make([]uint32, 0, len(n.qps)), roomWaiters: make([]uint32, 0, len(n.qps)), hpuAcks: make([]uint32, 0, len(n.qps))}
	pids := n.cfg.Cache.PIDs
	if pids == 0 {
		pids = 256
	}
	for _, t := range parkTypes {
		e.parkPID[t] = make([]uint32, pids)
	}
	e.heldFree = make([]uint16, heldRxMax)
	for i := range e.heldFree {
		e.heldFree[i] = uint16(heldRxMax - 1 - i)
	}
	e.timerWheel.start = n.cfg.Clock.Now()
	_, e.systemClock = n.cfg.Clock.(hostmem.SystemClock)
	e.nowFromNS = e.systemClock
	e.kicker, _ = p.(Kicker)
	e.awaitCap = max(1, recvCapacity(p)/2)
	e.ecn = n.cfg.ECN.field(n.cfg.NoCongestionControl)
	e.dma.init()
	if n.cfg.Notify != nil {
		e.noticer = noticer{n.cfg.Notify}
	}
	if bufs := handoffBuffers; len(n.cfg.Ports) > 1 || n.cfg.KernelRx && id == 0 {
		if len(n.cfg.Ports) == 1 {
			bufs = KernelRxBuffers // only what Deliver brings
		}
		e.inbox = make(chan handoff, bufs)
		e.spare = make(chan []byte, bufs)
		for range bufs {
			e.spare <- make([]byte, p.MaxFrameLen())
		}
	}
	return e
}

// wake wakes the engine if it sleeps on its port.
func (e *engine) wake() {
	if e.sleeping.Load() {
		e.port.Wake()
	}
}

// nanotime is a monotonic clock in nanoseconds: the SystemClock's reading
// (hostmem.Monotonic), so that a turn's one read serves both.
func nanotime() int64 { return int64(hostmem.Monotonic()) }

// command runs fn in the engine's turn and waits for it. When the
// application's polling drives the engine (PollApp), the caller's thread
// runs the turns itself while it waits, as the application would: its
// engine's goroutine stays out of the way of a polling application.
func (e *engine) command(fn func()) {
	done := make(chan struct{})
	e.cmds <- func() { fn(); close(done) }
	e.wake()
	if e.cfg.Poll != PollApp {
		<-done
		return
	}
	for {
		select {
		case <-done:
			return
		case <-e.nic.stop:
			<-done // the engine's goroutine runs what is queued before it stops
			return
		default:
		}
		if e.mu.TryLock() {
			e.turn()
			e.mu.Unlock()
		} else {
			runtime.Gosched()
		}
	}
}

// run is the engine's loop; it returns when the NIC is closed.
func (e *engine) run() {
	runtime.LockOSThread()
	// Sleeps as short as asked (the default slack is 50 us): appIdle's,
	// and those until a paced packet's time (laterAt).
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	if e.cfg.Poll == PollApp {
		if l, err := newLease(); err == nil { // without one, waitLease uses a runtime timer
			e.lease.Store(l)
			defer l.close()
		}
	}
	defer close(e.done)
	idle := 0 // turns since the engine last had work
	backoff := appBackoffMin
	for {
		select {
		case <-e.nic.stop:
			return
		default:
		}
		if e.cfg.Poll == PollApp {
			if !e.appIdle(&backoff) {
				return
			}
			continue
		}
		e.mu.Lock()
		busy, err := e.turn()
		// Read under the lock: NIC.Progress may run the next turn. Handler
		// tasks this engine queued are its to run (helpHPU).
		pending := e.dma.busy() || e.hpuHelp
		wait := e.sleepFor()
		e.mu.Unlock()
		if err != nil {
			return
		}
		if busy || e.cfg.DMA.Busy() || pending { // transfers in flight (a context fetch, a write): poll on for them
			idle, e.idleSince = 0, 0
			continue
		}
		// Idle: poll on for the budget (adaptive), or for ever (spin),
		// before sleeping, as an RNIC driver polls before it arms an
		// interrupt: a wake-up costs more than a round trip on a fast
		// link. The clock is read once per 64 idle turns.
		if idle++; e.cfg.Poll == PollSpin || e.cfg.Poll == PollAdaptive && (idle < 64 || idle%64 != 0 || e.idleFor(idle)) {
			e.stats.IdlePolls.Add(1)
			continue
		}
		idle = 0
		// Sleep on the port until a frame, a doorbell or a handed-off
		// frame (Wake) or the timers' next tick.
		e.stats.Sleeps.Add(1)
		e.sleepOnPort(wait)
	}
}

// sleepOnPort sleeps on the port for wait at most, unless work is queued
// for the engine (doorbells, commands, frames handed over, events from
// the HPUs), and reports whether it slept. The sleep is said before the
// queues are looked at: whoever queues work after the look finds it said
// and wakes the port (NIC.bell, engine.wake).
func (e *engine) sleepOnPort(wait time.Duration) bool {
	e.sleeping.Store(true)
	slept := len(e.doorbells) == 0 && len(e.recvBells) == 0 && len(e.cmds) == 0 && len(e.inbox) == 0 && len(e.hpuEv) == 0
	if slept {
		e.port.Wait(wait)
	}
	e.sleeping.Store(false)
	return slept
}

// While an application polls (NIC.Progress), its engines' goroutines stay
// out of its way: each waits on a lease (lease.go) whose timer the
// application's polls push back, and takes the NIC over only when the
// timer runs out, appLease after the application's last poll, or when the
// application releases the NIC at once (NIC.Release: it sleeps on a
// completion channel, or a poll that lingered for its peer's frame saw
// none and it may spin on a buffer next). While the application polls,
// the goroutine does not wake at all: a wake-up preempts a spinning
// thread on a machine whose cores spinning threads hold (with a backoff
// of 5 ms in each of two programs, 0.4 % of write-lat's iterations took
// over 15 us for it).
//
// appActive is how long after its last poll the application still counts
// as polling, long enough that a poll the scheduler interrupts does not
// look like one that stopped: on two vCPUs a thread woken on the
// program's CPU holds it off for tens of microseconds, and an engine
// that took that gap for a stop would take the NIC over, sleep on its
// port and be woken by every frame after (read-lat's p99 40-60 us, a
// tenth of its iterations over 15 us; 28-34 us and 2-4 % with 200 us).
const (
	appActive    = 200 * time.Microsecond
	appActiveMax = time.Millisecond
	appLease     = 5 * time.Millisecond
	// On one CPU (NIC.oneCPU) the goroutine sleeps instead, for a backoff
	// that doubles from appBackoffMin to appLease while the application
	// polls (appBackoff): with the lease, write-bw with both ends pinned
	// to one core moved 0.8-1.2 Gbit/s where it moved 3.0-3.4.
	appBackoffMin = 10 * time.Microsecond
)

// appIdle is one pass of an engine's goroutine when the application's
// polling drives it (PollApp): out of the way while the application
// polls (on a machine with few cores a second thread per NIC costs it
// more than it helps), a turn otherwise, and a sleep on the port, woken
// by a frame or a doorbell, when there is no work. It returns false when
// the engine stops.
func (e *engine) appIdle(backoff *time.Duration) bool {
	if e.postHeld.Load() && e.mu.TryLock() {
		e.postHeldDue() // the lease ran out: no call of the application's came to send them, or not yet
		e.mu.Unlock()
	}
	if time.Duration(nanotime()-e.driven.Load()) < e.appWindow() || !e.mu.TryLock() { // polling, or in a turn right now (NIC.Progress)
		if e.nic.oneCPU {
			return e.appBackoff(backoff)
		}
		return e.waitLease()
	}
	busy, err := e.turn()
	pending := e.dma.busy()
	wait := e.sleepFor()
	e.mu.Unlock()
	if err != nil {
		return false
	}
	if busy || e.cfg.DMA.Busy() || pending {
		*backoff = appBackoffMin
		e.appBusy = nanotime()
		return true
	}
	// No application polls: the engine polls on for the poll budget
	// after its last work before it sleeps, as PollAdaptive does, so
	// that a program that never polls (a WRITE test's server, which
	// waits on its socket) does not pay a wake-up per frame.
	if time.Duration(nanotime()-e.appBusy) < e.cfg.PollBudget {
		e.stats.IdlePolls.Add(1)
		return true
	}
	e.sleepOnPort(wait)
	return true
}

// appWindow is how long after the application last drove the engine it
// still counts as polling: appActive, or twice the period of its last two
// calls (an application that drives several NICs in turn, or does work
// between polls, comes back less often while it still polls), at most
// appActiveMax.
func (e *engine) appWindow() time.Duration {
	return max(appActive, min(2*time.Duration(e.drivenGap.Load()), appActiveMax))
}

// waitLease waits until the application's lease runs out or it releases
// the NIC, and reports false if the engine stops. A timer that ran out
// while the application still drives the engine (its posts run turns,
// which renew nothing) is armed again here.
func (e *engine) waitLease() bool {
	l := e.lease.Load()
	if l == nil { // no timer descriptor: a runtime timer, once a lease
		t := time.NewTimer(appLease)
		defer t.Stop()
		select {
		case <-t.C:
		case <-e.released:
		case <-e.nic.stop:
			return false
		}
		return true
	}
	if now := nanotime(); now-l.at.Load() >= int64(appLease) {
		l.arm(appLease, now)
	}
	e.leased.Store(true) // a post may hold its frames now: the timer reaches the goroutine (holdPosts)
	defer e.leased.Store(false)
	select {
	case <-l.expired:
	case <-e.released:
	case <-e.nic.stop:
		return false
	}
	return true
}

// appBackoff keeps the goroutine of a NIC on one CPU out of the
// application's way for a backoff that doubles while the application
// keeps polling, or until the application releases the NIC: a sleep on a
// futex word that NIC.Release wakes (wakeLease).
func (e *engine) appBackoff(backoff *time.Duration) bool {
	*backoff = min(*backoff*2, appLease)
	ts := unix.NsecToTimespec(int64(*backoff))
	atomic.StoreUint32(&e.backingOff, 1)
	if e.driven.Load() != 0 { // a Release from here on wakes the futex
		futexSleep(&e.backingOff, 1, &ts, false)
	}
	atomic.StoreUint32(&e.backingOff, 0)
	select {
	case <-e.nic.stop:
		return false
	default:
	}
	return true
}

// renewLease pushes the application's lease back (PollApp; now is
// nanotime).
func (e *engine) renewLease(now int64) {
	if l := e.lease.Load(); l != nil {
		l.renew(now)
	}
}

// wakeLease ends the goroutine's wait at once (NIC.Release).
func (e *engine) wakeLease() {
	select {
	case e.released <- struct{}{}:
	default: // a word is there already
	}
	if atomic.CompareAndSwapUint32(&e.backingOff, 1, 0) {
		futexWake(&e.backingOff)
	}
}

// turn is one pass of the engine: doorbells and commands, events from
// the HPUs, frames handed over and received, READ responses and resends
// due, transmission, and the timers. It reports whether there was work.
// e.mu is held: the engine's goroutine and NIC.Progress take turns.
func (e *engine) turn() (bool, error) { return e.turnAt(-1) }

// turnAt is turn with the monotonic clock read at ns (nanotime), or read
// here when ns is negative. The engine's time stands for the turn: the
// clock is read once (on the system clock, that read is ns) and every
// stage of the turn sees that time (clock).
func (e *engine) turnAt(ns int64) (bool, error) {
	e.begin()
	held := false
	e.nowRead = false
	if e.systemClock {
		if ns < 0 {
			ns = nanotime()
		}
		if e.nowFromNS {
			e.turnNS = ns // clock makes the time of it, if a stage asks
		}
		held = e.starved(ns)
	}
	busy, err := e.turnStages(held)
	if busy && e.systemClock {
		// A turn that had work may have lasted milliseconds (a burst of
		// doorbells on a slow host): that was work, not time off the
		// CPU (starved).
		e.lastTurn = nanotime()
	}
	e.nowRead, e.turnNS = false, 0 // outside a turn the clock is read afresh
	return busy, err
}

// turnStages is a turn's stages, in order.
func (e *engine) turnStages(held bool) (bool, error) {
	busy := e.doorbellsDue()
	if len(e.hpuEv) > 0 && e.hpuEventsDue() {
		busy = true
	}
	if e.inbox != nil && e.handoffsDue() {
		busy = true
		e.unparkReady()
	}
	frames := e.frames
	k, err := e.port.Recv(frames)
	if err != nil {
		return false, err
	}
	if k > 0 {
		e.clockAtRecv()
	}
	e.stats.RxFrames.Add(uint64(k))
	if k > 1 {
		e.warmFrames(frames[:k])
	}
	e.rxPort = true
	for i := range frames[:k] {
		e.receive(&frames[i])
	}
	e.rxPort = false
	e.releaseBatch(frames[:k])
	e.unparkReady()
	if e.hpuHelp && e.helpHPU() {
		busy = true
	}
	if len(e.readers) > 0 && e.pumpReads() {
		busy = true
	}
	if e.laterDue(e.clock()) {
		e.pumpLater()
		busy = true
	}
	if e.dmaDue() {
		busy = true
	}
	if !e.holdACKs() && !e.holdPosts() {
		e.flushTX()
	}
	e.port.Flush()
	// The timers run once what the port has received is taken: an ACK
	// that sits in the receive ring while the engine was starved of CPU
	// must retire its packets before their timer sends them again. A
	// backlog that lasts (a flood) holds them back for rxBacklogTurns
	// turns at most.
	if len(frames) > 0 && k == len(frames) || e.inbox != nil && len(e.inbox) > 0 {
		e.rxBacklog++
	} else {
		e.rxBacklog = 0
	}
	if e.timerWheel.n > 0 && !held && (e.rxBacklog == 0 || e.rxBacklog >= rxBacklogTurns) {
		if now := e.clock(); e.timerWheel.tickOf(now) > e.timerWheel.now {
			if e.kicker != nil && !e.kicked && e.due(now) {
				// A timer is due: first the port is kicked, and what
				// that brings is taken on the next turn, before it.
				e.kick()
				e.kicked = true
			} else {
				e.kicked = false
				e.tick(now)
				e.flushTX()
			}
		}
	}
	return busy || k > 0, nil
}

// sleepFor is how long an idle engine may sleep on its port: until the
// timers' next tick at most (a millisecond), no later than when a READ
// response or a packet its pace held may go, and not at all while a READ
// waits for anything else (a context: its answer comes without a frame
// to wake the engine) or a QP is due again at once (later).
func (e *engine) sleepFor() time.Duration {
	wait := time.Millisecond
	switch {
	case len(e.readers) == 0:
	case e.readWake.IsZero():
		wait = 0
	default:
		wait = min(wait, max(e.readWake.Sub(e.clock()), 0))
	}
	if len(e.laterQPs) > 0 {
		if e.laterNow {
			return 0
		}
		wait = min(wait, max(e.paceWake.Sub(e.clock()), 0))
	}
	return wait
}

// starved reports whether the timers wait this turn. An engine taken off
// the CPU for longer than starvedGap (a loaded host: it sleeps on its port
// a millisecond at most while timers run) may find its timers due while
// the ACKs that would stop them have arrived but are not yet in its
// port's ring: the kernel's receive work for them waits for a CPU too.
// Its timers then wait starveGrace, while it kicks its port (Kicker) and
// takes what comes; after a hold, holdSpacing turns pass before the next
// (an application that drives the engine seldom has every turn look
// starved: its timers lose one turn in holdSpacing at most).
func (e *engine) starved(now int64) bool {
	gap := now - e.lastTurn
	first := e.lastTurn == 0
	e.lastTurn = now
	if now < e.timersHeld {
		e.kick()
		return true
	}
	e.sinceHold++
	if first || gap <= int64(starvedGap) || e.timerWheel.n == 0 {
		return false
	}
	// A host that kept this engine off the CPU that long may keep its
	// peers off as long: what they have not answered meanwhile is not
	// lost. The gap counts as a round trip of the path, so the early
	// timers wait beyond it (PathRTT forgets half of it a second).
	e.path.Sample(time.Duration(gap), e.clock())
	if e.sinceHold <= holdSpacing {
		return false
	}
	e.timersHeld, e.sinceHold = now+int64(starveGrace), 0
	e.counters.TimersHeld.Add(1)
	e.kick()
	return true
}

// kick kicks the engine's port, if it is a Kicker.
func (e *engine) kick() {
	if e.kicker != nil {
		e.kicker.Kick()
	}
}

// The starved engine's hold (starved).
const (
	starvedGap  = 3 * time.Millisecond
	starveGrace = 500 * time.Microsecond
	holdSpacing = 8
)

// rxBacklogTurns is how many turns in a row with received frames left in
// the port the timers wait for (turn).
const rxBacklogTurns = 64

// idleFor reports whether, idle for turns turns, the engine is still
// within its poll budget: it notes when the idle time began at turn 64
// and compares from then on. A turn with work ends the idle time; a sleep
// does not, so an engine the timers' tick wakes with nothing to do sleeps
// again after 64 turns instead of polling another budget (an idle queue
// of a multi-queue port holds no core).
func (e *engine) idleFor(turns int) bool {
	now := nanotime()
	if turns == 64 && e.idleSince == 0 {
		e.idleSince = now // idle from here; a sleep does not start it again
		return true
	}
	return time.Duration(now-e.idleSince) < e.cfg.PollBudget
}

// clock is the engine's time, for the reliability state machines: read
// once a turn (turnAt), its stages all see the time the turn began (a turn
// lasts microseconds; the timers, pacing and round-trip samples work in
// tens of microseconds and more). Outside a turn it reads the clock.
func (e *engine) clock() time.Time {
	if !e.nowRead {
		if e.turnNS != 0 {
			if e.turnNS < 0 { // moved on (clockMoved): read when asked
				e.turnNS = nanotime()
			}
			e.now = hostmem.SystemTimeAt(time.Duration(e.turnNS))
		} else {
			e.now = e.cfg.Clock.Now()
		}
		e.nowRead = true
	}
	return e.now
}

// clockMoved lets the turn's clock move on after a batch of frames went
// to the port: a turn that sends a burst (the doorbells of many QPs at
// once, each its window's worth) lasts milliseconds on a slow host, and
// the frames it queued after the batch leave that much after the time
// the turn began. Dated with it, their round trips would include the
// rest of the turn's work (an incast's first samples read 4-17 ms on a
// 100 us path, and its QPs' early timers waited tens of milliseconds on
// them). The next stage to ask reads the clock afresh (none may: the
// turn's last batch costs no read); with a driven clock (tests) time
// stands as it was.
func (e *engine) clockMoved() {
	if e.nowRead {
		e.clockAtRecv()
	}
}

// clockAtRecv dates the frames a turn has just received, and what they
// answer, by the clock read now, not when the turn began: a turn that
// served doorbells or sent a burst first took hundreds of microseconds
// on a loaded host, and an ACK dated at its start came back "sooner"
// than the path allows (on a 1 ms path, round trips of 560-860 us; the
// least of them set the delay rule's target under the path's own round
// trip, and the window, cut a round trip after another for a queue that
// was not there, held three QPs at 3 packets for 900 ms). With a driven
// clock (tests) time stands as it was. clockMoved is it after a batch
// sent, where only a clock already read is read again.
func (e *engine) clockAtRecv() {
	if !e.systemClock {
		return
	}
	e.nowRead = false
	if e.turnNS != 0 {
		e.turnNS = -1
	}
}

// openQP reserves an RC QP's replay entries (0: the default), returning
// any it held.
func (e *engine) openQP(qpn uint32, r *qpRun, entries int, q *hostmem.QPCEntry) error {
	if entries <= 0 {
		entries = DefaultReplayAllocation
	}
	if r.sndStarted && r.snd.Outstanding() > 0 {
		return errors.New("datapath: a QP with packets outstanding keeps its replay entries")
	}
	a, err := e.nic.replay.Reserve(entries)
	if err != nil {
		return err
	}
	e.nic.replay.Release(r.alloc)
	r.alloc, r.sndStarted = a, false
	r.startReceiver(q)
	r.idleProbe = q.Flags&hostmem.QPFlagIdleProbe != 0
	e.expecting(qpn, r, time.Time{})
	return nil
}

// recvBellsDue takes in the receive doorbells rung so far.
func (e *engine) recvBellsDue() bool {
	for served := false; ; served = true {
		if len(e.recvBells) == 0 {
			return served
		}
		select {
		case d := <-e.recvBells:
			if d.QPN < uint32(len(e.qps)) {
				r := &e.qps[d.QPN]
				r.rqProducer = d.Producer
				e.begin()
				var q hostmem.QPCEntry
				if r.errored && e.qpc(d.QPN, &q) {
					e.flushRecv(d.QPN, &q, r) // a QP in error flushes what is posted to it
				}
				e.expecting(d.QPN, r, time.Time{})
			}
		default:
			return served
		}
	}
}

// bellBatch is how many send doorbells the engine takes from its channel
// before it serves them: their QPs' state is warmed together (warm.go).
const bellBatch = 32

// serveBells serves doorbell d and those queued behind it, up to
// bellBatch, in the order they were rung.
func (e *engine) serveBells(d Doorbell) {
	bells := e.bells[:1]
	bells[0] = d
	for len(bells) < cap(bells) && len(e.doorbells) > 0 {
		bells = append(bells, <-e.doorbells) // the engine is the channel's only reader
	}
	// Even one doorbell's QP is warmed: its lines are then fetched
	// together instead of one after the other as the requester reaches
	// them.
	e.warmBells(bells)
	for _, d := range bells {
		e.stats.Doorbells.Add(1)
		if d.QPN < uint32(len(e.qps)) {
			e.qps[d.QPN].sqProducer = d.Producer
			e.begin()
			e.request(d.QPN)
		}
	}
}

// doorbellsDue serves the doorbells and commands rung so far.
func (e *engine) doorbellsDue() bool {
	served := e.recvBellsDue()
	for {
		if len(e.cmds) == 0 && len(e.doorbells) == 0 {
			return served // nothing queued: no select
		}
		select {
		case fn := <-e.cmds:
			served = true
			e.begin()
			fn()
			e.begin() // a command may have changed contexts
		case d := <-e.doorbells:
			served = true
			e.serveBells(d)
		default:
			return served
		}
	}
}
