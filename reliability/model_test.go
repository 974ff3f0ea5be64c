package reliability_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/reliability"
)

// A model of an RC connection: a requester's Sender and a responder's
// Receiver joined by two lossy, duplicating, reordering links, driven by
// a stream of events. Messages are one-packet WRITEs, READs of 1 to 4
// response packets and atomics. The model keeps its own reference of
// what was posted, executed and completed, and checks after every event:
//   - no entry of a message the responder has not executed (or whose READ
//     data or atomic result has not all come back) is ever freed;
//   - every message is executed exactly once, in posting order;
//   - completions (Una moving past a message) follow posting order;
//   - the sender fails only with RETRY_EXC_ERR after RetryCnt+1 timeouts
//     in a row without progress (RNR retries are infinite here);
//   - the gate admits a packet only with a free entry inside the
//     congestion window, and a stalled sender resumes when an ACK frees
//     one.
type model struct {
	t      testing.TB
	rng    *rand.Rand
	now    time.Time
	pool   *reliability.Pool
	s      *reliability.Sender
	r      reliability.Receiver
	toResp []pkt // requests on the wire
	toReq  []pkt // answers on the wire

	msgs      []msg // posted, in order
	sentUpTo  int   // messages admitted
	executed  []int // message indices in execution order
	completed int   // messages whose entries have all been retired
	timeouts  int   // consecutive timeouts without progress
	params    reliability.Params
	rnrEvery  int // the responder refuses every n-th new WRITE with an RNR NAK (0: never)
	newWrites int
	psnOf     map[wire.PSN]int        // first PSN -> message index
	ahead     map[wire.PSN]int        // selective repeat: placed ahead of order -> message index
	placed    int                     // packets placed ahead, over the run
	sacked    int                     // packets the sender held as placed ahead, summed over the checks
	stats     reliability.SenderStats // the sender's counters at the last check
	statsGen  uint32                  // its StatsGen then
}

type msg struct {
	kind   reliability.Kind
	span   uint32
	psn    wire.PSN
	got    uint32 // READ responses placed
	recv   map[uint32]bool
	result bool // atomic result placed
	ackReq bool // its entry asked for an ACK (a WRITE or an atomic)
}

type pkt struct {
	op    wire.Opcode
	psn   wire.PSN
	span  uint32 // READ request: responses asked for
	syn   wire.Syndrome
	first wire.PSN // READ response: the READ's first PSN (the model's check only)
	msn   uint32   // a sequence NAK's MSN field: with selective repeat, the packet placed ahead it names
}

func newModel(t testing.TB, seed uint64, alloc int, p reliability.Params) *model {
	m := &model{t: t, rng: rand.New(rand.NewPCG(seed, 1)), now: time.Unix(1000, 0), params: p, psnOf: map[wire.PSN]int{}, ahead: map[wire.PSN]int{}}
	m.pool = reliability.NewPool(alloc + 3)
	a, err := m.pool.Reserve(alloc)
	if err != nil {
		t.Fatal(err)
	}
	start := wire.PSN(seed) & wire.PSNMask
	m.s = reliability.NewSender(a, start, p)
	m.r.Init(start, p.SelectiveRepeat)
	return m
}

func (m *model) post(n int) {
	for range n {
		k := reliability.Kind(m.rng.IntN(3))
		span := uint32(1)
		if k == reliability.Read {
			span = 1 + uint32(m.rng.IntN(4))
		}
		m.msgs = append(m.msgs, msg{kind: k, span: span})
	}
}

// send admits and sends new messages while the gate lets it.
func (m *model) send() {
	for m.sentUpTo < len(m.msgs) {
		free := m.s.Free()
		g := &m.msgs[m.sentUpTo]
		if !m.s.CanSend(g.kind, m.now) {
			if free > 0 && m.s.InFlight() < m.s.Window() && !m.s.Resending() && !m.s.Waiting() && g.kind == reliability.Data && !m.now.Before(m.s.PaceAt()) {
				if f, _ := m.s.Failed(); !f {
					m.t.Fatalf("the gate refused with %d free entries", free)
				}
			}
			return
		}
		if free == 0 || m.s.InFlight() >= m.s.Window() {
			m.t.Fatalf("the gate admitted with %d free entries, %d packets in flight in a window of %d", free, m.s.InFlight(), m.s.Window())
		}
		psn, ack := m.s.Admit(reliability.Entry{Kind: g.kind, Span: g.span, WQE: uint32(m.sentUpTo),
			Placeable: g.kind == reliability.Data && m.params.SelectiveRepeat}, m.now)
		g.psn, g.ackReq = psn, ack
		m.psnOf[psn] = m.sentUpTo
		m.sentUpTo++
		m.wireRequest(g, psn)
	}
}

func (m *model) wireRequest(g *msg, from wire.PSN) {
	switch g.kind {
	case reliability.Data:
		m.toResp = append(m.toResp, pkt{op: wire.RCRDMAWriteOnly, psn: from})
	case reliability.Read:
		m.toResp = append(m.toResp, pkt{op: wire.RCRDMAReadRequest, psn: from, span: g.span - uint32(from.Diff(g.psn)), first: g.psn})
	case reliability.Atomic:
		m.toResp = append(m.toResp, pkt{op: wire.RCFetchAdd, psn: from})
	}
}

// resend sends up to burst retransmissions.
func (m *model) resend(burst int) {
	for range burst {
		e, from, ok := m.s.Resend(m.now)
		if !ok {
			return
		}
		g := &m.msgs[e.WQE]
		if g.psn != e.PSN || !e.PSN.Add(e.Span-1).After(from.Sub(1)) {
			m.t.Fatalf("resend of message %d from PSN %d, its entry at %d span %d", e.WQE, from, e.PSN, e.Span)
		}
		if !e.AckReq {
			m.t.Fatalf("a retransmission of message %d asks for no ACK", e.WQE)
		}
		g.ackReq = true
		m.wireRequest(g, from)
		m.s.Resent(m.now)
	}
}

// respond is the responder taking one request.
func (m *model) respond(p pkt) {
	c, nak := m.r.Classify(p.psn, m.now)
	exp := m.r.Expected()
	switch c {
	case reliability.AlreadyPlaced:
	case reliability.Ahead, reliability.OutOfSequence:
		if c == reliability.Ahead && p.op == wire.RCRDMAWriteOnly {
			i, ok := m.psnOf[p.psn]
			if !ok {
				m.t.Fatalf("a WRITE ahead at PSN %d that no message was given", p.psn)
			}
			m.r.Placed(p.psn)
			m.ahead[p.psn] = i
			m.placed++
			// As the datapath's responder: each packet placed ahead is
			// NAKed, the NAK naming it.
			m.toReq = append(m.toReq, pkt{op: wire.RCAcknowledge, psn: m.r.Expected(), syn: wire.NAKSyndrome(wire.NAKPSNSequenceError), msn: uint32(p.psn)})
			return
		}
		if nak {
			m.toReq = append(m.toReq, m.seqNAK())
		}
	case reliability.Duplicate:
		switch p.op {
		case wire.RCRDMAReadRequest:
			if rr, ok := m.r.FindRead(p.psn, uint64(p.psn.Diff(p.first)), 7, p.span); ok {
				for i := range p.span {
					m.toReq = append(m.toReq, pkt{op: wire.RCRDMAReadResponseMiddle, psn: p.psn.Add(i), first: rr.PSN})
				}
			}
		case wire.RCFetchAdd:
			if _, ok := m.r.FindAtomic(p.psn); ok {
				m.toReq = append(m.toReq, pkt{op: wire.RCAtomicAcknowledge, psn: p.psn})
			}
		default:
			m.toReq = append(m.toReq, pkt{op: wire.RCAcknowledge, psn: m.r.Expected().Sub(1), syn: wire.ACKSyndrome(wire.CreditsInvalid)})
		}
	case reliability.New:
		i, ok := m.psnOf[p.psn]
		if !ok {
			m.t.Fatalf("a new request at PSN %d that no message was given", p.psn)
		}
		switch p.op {
		case wire.RCRDMAWriteOnly:
			if m.newWrites++; m.rnrEvery > 0 && m.newWrites%m.rnrEvery == 0 {
				m.toReq = append(m.toReq, pkt{op: wire.RCAcknowledge, psn: p.psn, syn: wire.RNRNAKSyndrome(uint8(1 + m.rng.IntN(4)))})
				return
			}
			m.r.Executed(1, true)
		case wire.RCRDMAReadRequest:
			if p.psn != p.first {
				m.t.Fatalf("a new READ from its middle (PSN %d, first %d)", p.psn, p.first)
			}
			m.r.ExecutedRead(reliability.ReadRecord{Packets: p.span, VA: 0, RKey: 7, Length: p.span})
			for k := range p.span {
				m.toReq = append(m.toReq, pkt{op: wire.RCRDMAReadResponseMiddle, psn: p.psn.Add(k), first: p.psn})
			}
		case wire.RCFetchAdd:
			m.r.ExecutedAtomic(uint64(i))
			m.toReq = append(m.toReq, pkt{op: wire.RCAtomicAcknowledge, psn: p.psn})
		}
		first := len(m.executed)
		m.executed = append(m.executed, i)
		// Selective repeat: the packets placed ahead that now follow in
		// order were executed with it.
		span := uint32(1)
		if p.op == wire.RCRDMAReadRequest {
			span = p.span
		}
		for q := exp.Add(span); q != m.r.Expected(); q = q.Next() {
			j, ok := m.ahead[q]
			if !ok {
				m.t.Fatalf("the expected PSN moved past %d, which was not placed ahead", q)
			}
			delete(m.ahead, q)
			m.executed = append(m.executed, j)
		}
		for n := first; n < len(m.executed); n++ {
			if m.executed[n] != n {
				m.t.Fatalf("executions %v: not each once in posting order", m.executed)
			}
		}
		if p.op == wire.RCRDMAWriteOnly {
			if m.r.PlacedAhead() {
				m.toReq = append(m.toReq, m.seqNAK())
			} else {
				m.toReq = append(m.toReq, pkt{op: wire.RCAcknowledge, psn: m.r.Expected().Sub(1), syn: wire.ACKSyndrome(wire.CreditsInvalid)})
			}
		}
	}
}

// seqNAK is the responder's sequence NAK of the expected PSN, naming the
// newest packet placed ahead (or, with none, the PSN before the hole).
func (m *model) seqNAK() pkt {
	exp := m.r.Expected()
	msn := uint32(exp.Sub(1))
	if newest, ok := m.r.NewestPlaced(); ok {
		msn = uint32(newest)
	}
	return pkt{op: wire.RCAcknowledge, psn: exp, syn: wire.NAKSyndrome(wire.NAKPSNSequenceError), msn: msn}
}

// complete is the requester taking one answer.
func (m *model) complete(p pkt) {
	before := m.s.Una()
	var v reliability.Verdict
	switch p.op {
	case wire.RCAcknowledge:
		switch s := p.syn; {
		case s.IsACK():
			v = m.s.OnAck(p.psn, m.now)
		case s.IsRNRNAK():
			v = m.s.OnRNR(p.psn, s.Value(), m.now)
		default:
			if s.Value() == wire.NAKPSNSequenceError {
				m.s.OnPlaced(p.psn, wire.PSN(p.msn), m.now)
			}
			v = m.s.OnNAK(p.psn, s.Value(), m.now)
		}
	case wire.RCAtomicAcknowledge:
		if e, ok := m.s.AtomicSlot(p.psn); ok {
			m.msgs[e.WQE].result = true
			m.s.AtomicPlaced(e, m.now)
			v = reliability.Accepted
		}
	default:
		if e, k, ok := m.s.ReadSlot(p.psn, m.now); ok {
			g := &m.msgs[e.WQE]
			if g.recv == nil {
				g.recv = map[uint32]bool{}
			}
			if g.recv[k] || e.PSN != p.first && !m.params.SelectiveRepeat || !m.params.SelectiveRepeat && k != g.got {
				m.t.Fatalf("READ response %d placed as packet %d of message %d (%d placed)", p.psn, k, e.WQE, g.got)
			}
			g.recv[k] = true
			g.got++
			m.s.ReadPlaced(e, p.psn, g.got == g.span && k == g.span-1, m.now)
			v = reliability.Accepted
		}
	}
	if v == reliability.Failed {
		m.t.Fatalf("the sender failed on %+v", p)
	}
	if m.s.Una().Diff(before) > 0 {
		m.timeouts = 0
	}
}

// check compares the sender with the reference.
func (m *model) check() {
	una := m.s.Una()
	done := 0
	for done < m.sentUpTo && m.msgs[done].psn.Add(m.msgs[done].span).Diff(una) <= 0 {
		done++
	}
	if done < m.completed {
		m.t.Fatalf("Una went back to %d: %d messages were complete", una, m.completed)
	}
	for i := m.completed; i < done; i++ {
		g := &m.msgs[i]
		if i >= len(m.executed) {
			m.t.Fatalf("message %d retired before the responder executed it (Una %d)", i, una)
		}
		if g.kind == reliability.Read && g.got != g.span || g.kind == reliability.Atomic && !g.result {
			m.t.Fatalf("%v message %d (PSN %d) retired before its answer came (got %d of %d); Una %d, next %d, outstanding %d", g.kind, i, g.psn, g.got, g.span, una, m.s.Next(), m.s.Outstanding())
		}
	}
	m.completed = done
	st := m.s.Stats()
	if g := m.s.StatsGen(); st.TransportStats != m.stats.TransportStats && g == m.statsGen {
		m.t.Fatalf("the sender's transport counters moved (%+v -> %+v) and StatsGen did not", m.stats.TransportStats, st.TransportStats)
	}
	m.stats, m.statsGen = st, m.s.StatsGen()
	if ts := m.s.TransportStats(); ts != (reliability.TransportStats{Stalls: st.Stalls, Stalled: st.Stalled, Retransmitted: st.Retransmitted,
		Timeouts: st.Timeouts, Early: st.Early, Stale: st.Stale, CreditWaits: st.CreditWaits, NAKsOfRepair: st.NAKsOfRepair}) {
		m.t.Fatalf("TransportStats %+v differ from Stats %+v", ts, st)
	}
	if !failed(m.s) {
		// What the responder may still send: the responses of the READs
		// sent and not retired that have not been placed.
		// With them, an answer for each other packet that asked for one.
		want, acks := 0, 0
		for i := done; i < m.sentUpTo; i++ {
			if g := &m.msgs[i]; g.kind == reliability.Read {
				want += int(g.span - g.got)
			} else if g.ackReq {
				acks++
			}
		}
		if got := m.s.ReadInFlight(); got != want {
			m.t.Fatalf("READ responses in flight %d, want %d", got, want)
		}
		if got := m.s.Awaited(); got != want+acks {
			m.t.Fatalf("answers awaited %d, want %d (READ responses %d, ACKs %d)", got, want+acks, want, acks)
		}
	}
	// What the sender takes as placed ahead the responder placed (or
	// has executed since); the window counts no less than nothing.
	placed := m.s.PlacedPSNs()
	for _, psn := range placed {
		i, ok := m.psnOf[psn]
		if _, ahead := m.ahead[psn]; !ahead && (!ok || i >= len(m.executed)) {
			m.t.Fatalf("the sender takes PSN %d as placed, which the responder never placed", psn)
		}
	}
	if m.s.InFlight() < 0 {
		m.t.Fatalf("%d packets in flight", m.s.InFlight())
	}
	m.sacked += len(placed)
	if int64(m.s.Outstanding()) > m.pool.Stats().Reserved || m.pool.Stats().InUse != int64(m.s.Outstanding()) {
		m.t.Fatalf("pool in use %d, sender outstanding %d", m.pool.Stats().InUse, m.s.Outstanding())
	}
}

// step runs one random event.
func (m *model) step(ev int) {
	switch ev % 10 {
	case 0:
		m.post(1 + m.rng.IntN(4))
	case 1:
		m.send()
	case 2:
		m.resend(1 + m.rng.IntN(4))
	case 3, 4: // deliver a request, perhaps lost, duplicated or reordered
		m.deliver(&m.toResp, m.respond)
	case 5, 6:
		m.deliver(&m.toReq, m.complete)
	case 7: // time passes
		m.now = m.now.Add(time.Duration(m.rng.IntN(5)) * time.Millisecond)
	case 8: // the timer
		if d := m.s.Deadline(); !d.IsZero() && m.rng.IntN(4) == 0 {
			m.now = d
		}
		m.tick()
	case 9: // the wire empties without loss
		for len(m.toResp)+len(m.toReq) > 0 {
			m.deliverClean(&m.toResp, m.respond)
			m.deliverClean(&m.toReq, m.complete)
		}
	}
	m.check()
}

// tick runs the sender's timer at the model's time.
func (m *model) tick() {
	timeouts := m.s.Stats().Timeouts
	switch m.s.Tick(m.now) {
	case reliability.Failed:
		if failed, st := m.s.Failed(); !failed || st != ibv.WCRetryExcErr || m.timeouts != int(m.params.RetryCnt) {
			m.t.Fatalf("failed with status %d after %d timeouts in a row (retry_cnt %d)", st, m.timeouts+1, m.params.RetryCnt)
		}
		m.restart()
	case reliability.Accepted:
		// Only the local ACK timeout counts towards retry_cnt; an RNR wait
		// ending or an early retransmission does not.
		m.timeouts += int(m.s.Stats().Timeouts - timeouts)
	}
}

// restart is what an application does after a retry-exceeded error: a
// new connection (the model restarts both halves).
func (m *model) restart() {
	a := m.s.Allocation()
	m.s.Reset()
	start := wire.PSN(m.rng.Uint32()) & wire.PSNMask
	m.s.Init(a, start, m.params)
	m.msgs, m.executed, m.sentUpTo, m.completed, m.timeouts = nil, nil, 0, 0, 0
	m.toResp, m.toReq = nil, nil
	m.psnOf = map[wire.PSN]int{}
	m.ahead = map[wire.PSN]int{}
	m.r.Init(start, m.params.SelectiveRepeat)
	m.stats, m.statsGen = reliability.SenderStats{}, 0
}

func (m *model) deliver(q *[]pkt, to func(pkt)) {
	if len(*q) == 0 {
		return
	}
	switch m.rng.IntN(10) {
	case 0: // lost
		*q = (*q)[1:]
	case 1: // duplicated
		to((*q)[0])
	case 2: // reordered
		if len(*q) > 1 {
			(*q)[0], (*q)[1] = (*q)[1], (*q)[0]
		}
	default:
		p := (*q)[0]
		*q = (*q)[1:]
		to(p)
	}
}

func (m *model) deliverClean(q *[]pkt, to func(pkt)) {
	if len(*q) > 0 {
		p := (*q)[0]
		*q = (*q)[1:]
		to(p)
	}
}

// drain ends a run: no loss, timers fire, until every posted message has
// completed.
func (m *model) drain() {
	for i := 0; m.completed < len(m.msgs); i++ {
		if i > 100000 {
			m.t.Fatalf("no progress: %d of %d messages complete, %d admitted, Una %d", m.completed, len(m.msgs), m.sentUpTo, m.s.Una())
		}
		if p := m.s.PaceAt(); m.now.Before(p) {
			m.now = p // time passes for pacing
		}
		m.send()
		m.resend(8)
		if len(m.toResp)+len(m.toReq) == 0 {
			if d := m.s.Deadline(); !d.IsZero() {
				m.now = d
				m.tick() // may end the run: the retries were spent before the drain
			}
		}
		m.deliverClean(&m.toResp, m.respond)
		m.deliverClean(&m.toReq, m.complete)
		m.check()
	}
}

func TestModel(t *testing.T) {
	for _, tc := range []struct {
		alloc    int
		retry    uint8
		rnrEvery int
		sr       bool
	}{{4, 7, 0, false}, {1, 7, 0, false}, {16, 7, 5, false}, {64, 7, 0, false}, {8, 2, 3, false}, {16, 7, 0, true}, {64, 7, 0, true}, {4, 2, 0, true}} {
		placed, sacked := 0, 0
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("alloc%d-retry%d-rnr%d-sr%v-seed%d", tc.alloc, tc.retry, tc.rnrEvery, tc.sr, seed), func(t *testing.T) {
				m := newModel(t, seed*7919+uint64(tc.alloc), tc.alloc, reliability.Params{Timeout: 14, RetryCnt: tc.retry, RNRRetry: 7, MaxRdAtomic: 16, SelectiveRepeat: tc.sr})
				m.rnrEvery = tc.rnrEvery
				for range 3000 {
					m.step(m.rng.IntN(10))
				}
				m.drain()
				if len(m.executed) != len(m.msgs) {
					t.Fatalf("%d of %d messages executed", len(m.executed), len(m.msgs))
				}
				if !tc.sr && m.placed > 0 {
					t.Errorf("%d packets placed ahead without selective repeat", m.placed)
				}
				placed += m.placed
				sacked += m.sacked
			})
		}
		if tc.sr && placed == 0 {
			t.Errorf("alloc %d: selective repeat placed nothing ahead in 20 runs", tc.alloc)
		}
		if tc.sr && sacked == 0 {
			t.Errorf("alloc %d: the sender never took a packet as placed ahead in 20 runs", tc.alloc)
		}
	}
}

// FuzzModel drives the same model with events the fuzzer chooses.
func FuzzModel(f *testing.F) {
	f.Add(uint64(1), uint8(4), []byte{0, 1, 3, 5, 1, 3, 3, 5, 5, 8, 2, 3, 5})
	f.Add(uint64(2), uint8(1), []byte{0, 0, 1, 1, 4, 4, 7, 8, 8, 8, 8, 8, 8, 8, 8, 8})
	f.Fuzz(func(t *testing.T, seed uint64, alloc uint8, events []byte) {
		m := newModel(t, seed, 1+int(alloc%64), reliability.Params{Timeout: 14, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: uint8(seed % 20), SelectiveRepeat: alloc&0x80 != 0})
		m.rnrEvery = int(seed % 4)
		if m.rnrEvery == 1 {
			m.rnrEvery = 0 // every WRITE refused: no progress is right
		}
		for _, ev := range events {
			m.step(int(ev))
		}
		m.drain()
	})
}

func failed(s *reliability.Sender) bool { f, _ := s.Failed(); return f }
