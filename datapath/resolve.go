package datapath

// The resolve stage: every unit of work the engine takes up (a received
// packet, a doorbell, a parked packet's turn, a QP's timer, a READ to
// pump, a CQE to write) looks up the contexts it needs here, without
// waiting, before the later stages use them.
//
// The flow: a unit begins (begin clears what the last one resolved);
// each context it needs is looked up once through its cache (look): a hit
// is kept for the rest of the unit, so the stage that probes an entry and
// the stage that uses it share one lookup; a miss gives a ticket, the
// unit parks for its QP (park.go: the packet, the requester, the CQE) and
// the engine goes on with other QPs; the ticket's answer (arrived) makes
// the QP ready and the unit runs again, in order. Only where the cache
// has no ticket to give (every outstanding-table entry taken) does a
// stage wait for the entry (fetch), and that is counted (ctx_waits).
//
// The CQ context is the exception to "kept for the unit": its producer
// index moves with every CQE, and CQs are shared between engines, so
// the CQE stage (complete) looks it up under the CQ's lock, once per CQE.

import (
	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/host/hostmem"
)

// memoSlots is how many contexts one unit of work keeps: its QP's, an
// SRQ's, and the MPT entries and MTT lines of a packet's memory.
const memoSlots = 8

// unitMemo holds the context entries a unit of work has looked up.
type unitMemo struct {
	n     int
	next  int // the slot to reuse when all are taken
	t     [memoSlots]hostmem.ContextType
	idx   [memoSlots]uint64
	words [memoSlots][16]uint64
}

// begin starts a unit of work: nothing it resolved before holds.
func (e *engine) begin() { e.memo.n, e.memo.next = 0, 0 }

// look looks up entry idx of context type t without waiting: from what
// the unit has already resolved, or through the cache (one lookup,
// counted). On a hit it returns the entry's words, valid until the unit
// ends (decode them at once); on a miss, the ticket.
func (e *engine) look(t hostmem.ContextType, idx uint64) (ctxcache.Status, uint32, []uint64) {
	m := &e.memo
	w := hostmem.EntrySizes[t] / 8
	if t != hostmem.CQC {
		for i := range m.n {
			if m.t[i] == t && m.idx[i] == idx {
				return ctxcache.Hit, 0, m.words[i][:w]
			}
		}
	}
	words := e.words[:w]
	e.counters.CtxLookups[t].Add(1)
	st, pid := e.nic.caches[t].Lookup(e.id, idx, words)
	if st == ctxcache.Miss {
		e.misses++ // its answer comes on the engine's pipe (pollParked, waitTicket)
	}
	if st != ctxcache.Hit || t == hostmem.CQC {
		return st, pid, words
	}
	return st, pid, e.remember(t, idx, words)
}

// remember keeps an entry for the rest of the unit (a CQ context is not
// kept) and returns the kept copy.
func (e *engine) remember(t hostmem.ContextType, idx uint64, words []uint64) []uint64 {
	if t == hostmem.CQC {
		return words
	}
	m := &e.memo
	i := m.n
	if i == memoSlots {
		i = m.next
		m.next = (m.next + 1) % memoSlots
	} else {
		m.n++
	}
	m.t[i], m.idx[i] = t, idx
	copy(m.words[i][:len(words)], words)
	return m.words[i][:len(words)]
}

// resolveQPC looks up QP qpn's context for its requester (or its timer)
// without waiting. On a miss the requester waits for the ticket (its
// answer restarts it, park.go) and resolveQPC reports false with ok
// true; ok false means there is no valid context to act on.
func (e *engine) resolveQPC(qpn uint32, q *hostmem.QPCEntry) (hit, ok bool) {
	st, pid, words := e.look(hostmem.QPC, uint64(qpn))
	switch st {
	case ctxcache.Hit:
		putWords(e.entry[:128], words)
		q.Decode(e.entry[:128])
		return true, q.Valid
	case ctxcache.Miss:
		e.parkPID[hostmem.QPC][pid] = (qpn + 1) | sendWait
		e.qps[qpn].sqWaiting = true
		e.counters.SendWaits.Add(1)
		return false, true
	}
	return true, e.qpc(qpn, q) // no ticket free: wait (counted), or find it invalid
}
