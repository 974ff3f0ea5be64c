package datapath

// The timer stage: the QPs whose senders have a timer running (local ACK,
// early retransmission, RNR wait) and the QPs to come back to on the next
// pass (retransmissions beyond a burst, packets held by pacing).

import (
	"time"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/reliability"
)

// later puts a QP on the engine's list of QPs to come back to on its next
// pass: retransmissions left beyond a burst, or packets pacing holds.
func (e *engine) later(qpn uint32, r *qpRun) {
	if !r.onLater {
		r.onLater = true
		e.laterQPs = append(e.laterQPs, qpn)
	}
}

// pumpLater comes back to the QPs that had retransmissions left beyond a
// burst or packets held by pacing.
func (e *engine) pumpLater() {
	list := e.laterQPs
	e.laterQPs = e.laterSpare[:0]
	for _, qpn := range list {
		e.qps[qpn].onLater = false
		e.begin()
		e.request(qpn)
	}
	e.laterSpare = list[:0]
}

// timeQP puts a QP on the engine's timer list.
func (e *engine) timeQP(qpn uint32, r *qpRun) {
	if !r.timed {
		r.timed = true
		e.timers = append(e.timers, qpn)
	}
}

// tick runs the timers of the QPs on the list: an RNR wait that ended
// or a local ACK timeout makes the QP send again; retries exhausted
// fail it. A QP whose timer is off leaves the list.
func (e *engine) tick(now time.Time) {
	kept := e.timers[:0]
	for _, qpn := range e.timers {
		r := &e.qps[qpn]
		if r.errored || r.snd.Deadline().IsZero() {
			r.timed = false
			continue
		}
		kept = append(kept, qpn)
		if now.Before(r.snd.Deadline()) {
			continue
		}
		e.begin()
		var q host.QPCEntry
		if hit, ok := e.resolveQPC(qpn, &q); !hit || !ok {
			continue // a miss: the timer runs when the QP's context comes and the next tick finds it due
		}
		switch r.snd.Tick(now) {
		case reliability.Failed:
			e.counters.RetryExceededErr.Add(1)
			e.failed(qpn, &q, r)
		case reliability.Accepted:
			if r.snd.Resending() {
				e.counters.Retransmits.Add(1)
			}
			e.request(qpn)
		}
		e.senderStats(r)
	}
	e.timers = kept
}
