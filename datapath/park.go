package datapath

import (
	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// Parking: a packet whose QP context misses in the cache is copied aside
// with the cache's ticket, and so is every later packet of that QP, in
// order; packets of other QPs go on. When the context arrives the QP's
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

// qpcArrived handles an answer of the QPC cache: a parked QP's context
// has come.
func (n *NIC) qpcArrived(resp ctxcache.Response) {
	c := n.caches[host.QPC]
	qpn := n.parkPID[resp.PID]
	n.parkPID[resp.PID] = 0
	c.Release(resp.PID)
	if qpn != 0 {
		n.ready = append(n.ready, qpn-1)
	}
}

// unparkReady polls the QPC cache and handles the packets of every QP
// whose context has come.
func (n *NIC) unparkReady() {
	var resp [16]ctxcache.Response
	for k := n.caches[host.QPC].Poll(0, resp[:]); k > 0; k = n.caches[host.QPC].Poll(0, resp[:]) {
		for _, r := range resp[:k] {
			n.qpcArrived(r)
		}
	}
	for len(n.ready) > 0 {
		qpn := n.ready[len(n.ready)-1]
		n.ready = n.ready[:len(n.ready)-1]
		r := &n.qps[qpn]
		for r.parkN > 0 {
			pf := r.parked[r.parkHead]
			r.parkHead = (r.parkHead + 1) % parkDepth
			r.parkN--
			frame := n.parkPool.Buf(pf.handle)[:pf.n]
			var p wire.Packet
			var err error
			if pf.noICRC {
				err = wire.ParseNoICRC(frame, &p)
			} else {
				err = wire.Parse(frame, &p)
			}
			if err == nil {
				n.dispatch(qpn, &p)
			}
			n.parkPool.Return(pf.handle)
		}
	}
}
