package datapath

import (
	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// Parking: a packet whose QP context, or whose request's MPT entry or
// first MTT line, misses in the cache is copied aside with the cache's
// ticket, and so is every later packet of that QP, in order; packets of
// other QPs go on. When the context arrives the QP's
// packets are handled in the order they came. Parking has fixed capacity:
// a QP holds at most parkDepth packets and the NIC parkBuffers in all;
// beyond that a packet is dropped and counted (RC retransmits it).
const (
	parkDepth   = 8
	parkBuffers = 256
)

type parkedFrame struct {
	handle uint32
	n      int
	noICRC bool
}

// park copies a frame aside for its QP.
func (n *NIC) park(qpn uint32, fr *Frame) {
	r := &n.qps[qpn]
	h, ok := n.parkPool.Take()
	if !ok || r.parkN == parkDepth || len(fr.Data) > len(n.parkPool.Buf(0)) {
		if ok {
			n.parkPool.Return(h)
		}
		n.counters.ParkDropped.Add(1)
		return
	}
	r.parked[(r.parkHead+r.parkN)%parkDepth] = parkedFrame{handle: h, n: copy(n.parkPool.Buf(h), fr.Data), noICRC: fr.NoICRC}
	r.parkN++
	n.counters.Parked.Add(1)
}

// parkTypes are the contexts a packet can wait for: its QP's context, and
// for a request naming remote memory (RDMA WRITE first/only, READ,
// atomics), the R_Key's MPT entry and the MTT line of its first page.
var parkTypes = [...]host.ContextType{host.QPC, host.MPT, host.MTT}

// arrived handles an answer of the cache of type t: the ticket of a
// parked QP makes that QP ready; any other ticket is released.
func (n *NIC) arrived(t host.ContextType, resp ctxcache.Response) {
	n.caches[t].Release(resp.PID)
	if n.parkPID[t] == nil {
		return
	}
	qpn := n.parkPID[t][resp.PID]
	n.parkPID[t][resp.PID] = 0
	if qpn != 0 {
		n.ready = append(n.ready, qpn-1)
	}
}

// memoryMiss looks up, without waiting, the MPT entry and the first MTT
// line a request's remote access will need. On a miss it records the
// ticket for QP qpn and reports true: the packet must be parked.
func (n *NIC) memoryMiss(qpn uint32, p *wire.Packet) bool {
	var key uint32
	var va uint64
	switch {
	case p.Info.Has(wire.HdrRETH):
		key, va = p.RETH().RKey(), p.RETH().VA()
	case p.Info.Has(wire.HdrAtomicETH):
		key, va = p.AtomicETH().RKey(), p.AtomicETH().VA()
	default:
		return false
	}
	words := n.words[:8]
	st, pid := n.caches[host.MPT].Lookup(0, uint64(key>>8), words)
	switch st {
	case ctxcache.Miss:
		n.parkPID[host.MPT][pid] = qpn + 1
		return true
	case ctxcache.Hit:
	default: // a fault or no ticket free: the responder will wait or refuse
		return false
	}
	for i, w := range words {
		le.PutUint64(n.entry[8*i:], w)
	}
	var m host.MPTEntry
	m.Decode(n.entry[:64])
	if !m.Valid || va < m.VA || va-m.VA >= m.Length {
		return false // the responder refuses it
	}
	st, pid = n.caches[host.MTT].Lookup(0, m.FirstMTT+(va-m.VA)>>m.PageShift, n.words[:1])
	if st == ctxcache.Miss {
		n.parkPID[host.MTT][pid] = qpn + 1
		return true
	}
	return false
}

// unparkReady polls the caches packets wait for and handles, in order,
// the packets of every QP whose contexts have come. A packet that misses
// again (its request's memory, or a context evicted meanwhile) stays at
// the head of its QP's queue with a new ticket.
func (n *NIC) unparkReady() {
	var resp [16]ctxcache.Response
	for _, t := range parkTypes {
		c := n.caches[t]
		for k := c.Poll(0, resp[:]); k > 0; k = c.Poll(0, resp[:]) {
			for _, r := range resp[:k] {
				n.arrived(t, r)
			}
		}
	}
	for len(n.ready) > 0 {
		qpn := n.ready[len(n.ready)-1]
		n.ready = n.ready[:len(n.ready)-1]
		r := &n.qps[qpn]
		for r.parkN > 0 {
			pf := r.parked[r.parkHead]
			frame := n.parkPool.Buf(pf.handle)[:pf.n]
			var p wire.Packet
			var err error
			if pf.noICRC {
				err = wire.ParseNoICRC(frame, &p)
			} else {
				err = wire.Parse(frame, &p)
			}
			if err == nil && n.mustWait(qpn, &p) {
				break
			}
			r.parkHead = (r.parkHead + 1) % parkDepth
			r.parkN--
			if err == nil {
				n.dispatch(qpn, &p)
			}
			n.parkPool.Return(pf.handle)
		}
	}
}

// mustWait looks up, without waiting, the contexts packet p of QP qpn
// needs first; on a miss it records the ticket and reports true.
func (n *NIC) mustWait(qpn uint32, p *wire.Packet) bool {
	if st, pid := n.caches[host.QPC].Lookup(0, uint64(qpn), n.words[:16]); st == ctxcache.Miss {
		n.parkPID[host.QPC][pid] = qpn + 1
		return true
	}
	return p.Info.Flags&wire.OpRequest != 0 && n.memoryMiss(qpn, p)
}
