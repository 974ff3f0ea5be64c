package datapath

// The timer stage: each engine's timing wheel of the QPs whose senders
// have a timer running (local ACK, early retransmission, RNR wait) or
// whose receivers wait on a NAKed go-back-N gap (its sender gone quiet,
// reliability.GapQuiet), and the QPs to come back to on the next pass (retransmissions beyond a
// burst, packets held by pacing).
//
// The wheel has wheelSlots slots of wheelTick each; a QP waits in the
// slot of its sender's deadline, linked through its own running state
// (no allocation, a QP in one slot at most). A deadline beyond the
// wheel's span waits in its slot for the rounds it needs, looked at once
// a round. Each turn the engine runs the slots whose time has come
// (tick): a QP whose deadline passed has its timer handled; one whose
// deadline moved later goes to the slot of its new one; one whose timer
// stopped leaves. A deadline that moves earlier (an early retransmission
// timer set) moves the QP (timeQP, after the sender's calls).

import (
	"time"

	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/reliability"
)

// The wheel's geometry: 4096 slots of 65.536 us, about 268 ms a round.
const (
	wheelTickShift = 16 // ns per slot: 1 << 16
	wheelSlots     = 4096
)

// wheel is an engine's timing wheel. Slot heads and the QPs' links hold
// QP numbers + 1 (0: none).
type wheel struct {
	head  [wheelSlots]uint32
	now   int64 // the last tick run
	n     int   // QPs on the wheel
	start time.Time
}

// wheelLink is a QP's place on its engine's wheel.
type wheelLink struct {
	on         bool
	at         int64  // the tick it waits for (its slot: at mod wheelSlots)
	next, prev uint32 // QP number + 1
}

// tickOf is the wheel tick of a time.
func (w *wheel) tickOf(t time.Time) int64 { return int64(t.Sub(w.start)) >> wheelTickShift }

// span is the ticks a pass at now runs: those after the last one run, up
// to now's (after a long pause, every slot once).
func (w *wheel) span(now time.Time) (from, to int64) {
	to = w.tickOf(now)
	return max(w.now+1, to-wheelSlots+1), to
}

// later puts a QP on the engine's list of QPs to come back to on its next
// pass: retransmissions left beyond a burst, a failed WQE fetch.
func (e *engine) later(qpn uint32, r *qpRun) {
	e.laterNow = true
	e.onLaterList(qpn, r)
}

// laterAt puts a QP whose packet pacing holds until t on the list: the
// engine comes back to it then (paceWake), and sleeps meanwhile if it
// has nothing else to do. A wait it spun through took a core from the
// peer's engine and the applications on a machine of two (an incast's
// link idled in millisecond gaps while the receiving engine waited for
// a CPU).
func (e *engine) laterAt(qpn uint32, r *qpRun, t time.Time) {
	if e.paceWake.IsZero() || t.Before(e.paceWake) {
		e.paceWake = t
	}
	e.onLaterList(qpn, r)
}

func (e *engine) onLaterList(qpn uint32, r *qpRun) {
	if !r.onLater {
		r.onLater = true
		e.laterQPs = append(e.laterQPs, qpn)
	}
}

// paceSpin is how near its time a paced packet keeps its engine polling
// rather than sleeping: a sleep's wake-up costs about as much.
const paceSpin = 20 * time.Microsecond

// laterDue reports whether the QPs to come back to are due at now: one
// is due at once (later), or the first paced packet's time comes within
// paceSpin.
func (e *engine) laterDue(now time.Time) bool {
	return len(e.laterQPs) > 0 && (e.laterNow || e.paceWake.Sub(now) <= paceSpin)
}

// pumpLater comes back to the QPs that had retransmissions left beyond a
// burst or packets held by pacing.
func (e *engine) pumpLater() {
	list := e.laterQPs
	e.laterQPs = e.laterSpare[:0]
	e.laterNow, e.paceWake = false, time.Time{}
	for _, qpn := range list {
		e.qps[qpn].onLater = false
		e.counters.LaterRuns.Add(1)
		e.begin()
		e.request(qpn)
	}
	e.laterSpare = list[:0]
}

// deadline is the QP's next timer: its sender's, or its receiver's for a
// quiet go-back-N gap, whichever comes first (zero: none).
func (r *qpRun) deadline() time.Time {
	d, q := r.snd.Deadline(), time.Time{}
	if r.rcvStarted {
		q = r.rcv.QuietDeadline()
	}
	if d.IsZero() || !q.IsZero() && q.Before(d) {
		return q
	}
	return d
}

// timeQP puts a QP on the wheel at its deadline (deadline), or moves it
// there if the deadline moved earlier than its slot; a QP whose timer is
// off leaves.
func (e *engine) timeQP(qpn uint32, r *qpRun) {
	d := r.deadline()
	if d.IsZero() || r.errored {
		e.unwheel(qpn, r)
		return
	}
	t := max(e.timerWheel.tickOf(d), e.timerWheel.now+1)
	if r.wheel.on {
		if r.wheel.at <= t {
			return // its tick comes first: from there it moves on to its deadline
		}
		e.unwheel(qpn, r)
	}
	e.wheelAt(qpn, r, t)
}

// wheelAt links a QP into the slot of tick t.
func (e *engine) wheelAt(qpn uint32, r *qpRun, t int64) {
	w := &e.timerWheel
	slot := t % wheelSlots
	r.wheel = wheelLink{on: true, at: t, next: w.head[slot]}
	if h := w.head[slot]; h != 0 {
		e.qps[h-1].wheel.prev = qpn + 1
	}
	w.head[slot] = qpn + 1
	w.n++
}

// unwheel takes a QP off the wheel.
func (e *engine) unwheel(qpn uint32, r *qpRun) {
	if !r.wheel.on {
		return
	}
	w := &e.timerWheel
	l := r.wheel
	if l.prev != 0 {
		e.qps[l.prev-1].wheel.next = l.next
	} else {
		w.head[l.at%wheelSlots] = l.next
	}
	if l.next != 0 {
		e.qps[l.next-1].wheel.prev = l.prev
	}
	r.wheel = wheelLink{}
	w.n--
}

// tick runs the wheel's slots up to now: an RNR wait that ended or a
// local ACK timeout makes the QP send again, retries exhausted fail it;
// a go-back-N gap whose sender went quiet is NAKed again.
func (e *engine) tick(now time.Time) {
	w := &e.timerWheel
	from, to := w.span(now)
	for t := from; t <= to; t++ {
		w.now = t
		for h := w.head[t%wheelSlots]; h != 0; {
			qpn := h - 1
			r := &e.qps[qpn]
			h = r.wheel.next
			if r.wheel.at > t {
				continue // a later round's
			}
			e.unwheel(qpn, r)
			e.expire(qpn, r, now)
		}
	}
	w.now = to
}

// due reports whether a QP's timer in the slots tick would run at now
// has passed its deadline (tick's scan, changing nothing).
func (e *engine) due(now time.Time) bool {
	w := &e.timerWheel
	from, to := w.span(now)
	for t := from; t <= to; t++ {
		for h := w.head[t%wheelSlots]; h != 0; {
			r := &e.qps[h-1]
			h = r.wheel.next
			if r.wheel.at > t || r.errored {
				continue
			}
			if d := r.deadline(); !d.IsZero() && !now.Before(d) {
				return true
			}
		}
	}
	return false
}

// expire handles a QP whose slot came: its timer, if due, or a place at
// its deadline.
func (e *engine) expire(qpn uint32, r *qpRun, now time.Time) {
	d := r.deadline()
	if r.errored || d.IsZero() {
		return
	}
	if now.Before(d) {
		e.timeQP(qpn, r)
		return
	}
	e.counters.TimerRuns.Add(1)
	e.begin()
	var q hostmem.QPCEntry
	if hit, ok := e.resolveQPC(qpn, &q); !hit || !ok {
		if !hit && ok {
			// A miss: the timer runs when the QP's context comes, with
			// the requester that waits for it too (drainReady), while
			// the context is in its cache line: a timer that looked
			// again at the next tick would find it evicted again when
			// more QPs' timers run than the cache has lines, and fetch
			// it at every tick. The next tick stays as a fallback.
			r.timerWaiting = true
			e.wheelAt(qpn, r, e.timerWheel.now+1)
		}
		return
	}
	k := reliability.QuietNone // a receiver not started has no timer
	if r.rcvStarted {
		if r.readN > 0 {
			r.rcv.ReadsSent(now) // still answering READs: the requester's quiet has not begun
		}
		k = r.rcv.Quiet(now)
	}
	switch k {
	case reliability.QuietGap, reliability.QuietTail, reliability.QuietIdle:
		if r.rcv.RepairsReads() {
			e.repeatReads(&q, r, qpn) // the READs first: a retrying rxe ignores the NAK until one comes in order
		}
		e.quietNAK(&q, r, k)
	case reliability.QuietRead:
		if n := e.repeatReads(&q, r, qpn); n > 0 && n <= smallReadRepair && r.idleExpected() {
			// Small READs: their requester may wait on the next READ's
			// request, lost on its way, as well as on a response; the
			// probe's NAK of the next PSN asks for that.
			e.quietNAK(&q, r, reliability.QuietIdle)
		}
		if r.rcv.QuietDeadline().IsZero() {
			// The repairs ran out: then the idle probe, for a READ
			// request lost on its way (a requester waiting on it sends
			// nothing before its local ACK timeout).
			e.expecting(qpn, r, now)
		}
	case reliability.QuietACK:
		// The sender went quiet after the last ACK, on a QP that has
		// seen loss: that ACK may have been lost and the sender wait
		// its local ACK timeout for it. A second costs a frame.
		e.counters.ACKsRepeated.Add(1)
		e.acknowledge(&q, r)
		e.expecting(qpn, r, now) // then the idle probe, if the application may wait (idleExpected)
	}
	if d := r.snd.Deadline(); !d.IsZero() && !now.Before(d) {
		switch r.snd.Tick(now) {
		case reliability.Failed:
			e.counters.RetryExceededErr.Add(1)
			e.failed(qpn, &q, r)
		case reliability.Accepted:
			if r.snd.Resending() {
				e.counters.Retransmits.Add(1)
				r.rcv.NoteLoss()
			}
			e.request(qpn)
		}
		e.senderStats(r)
	}
	e.timeQP(qpn, r)
}
