package datapath

import (
	"encoding/binary"
	"net/netip"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// ctx copies entry idx of a context type into dst through its cache. On a
// miss it waits for the fetch. Packets avoid this wait where it matters:
// receive parks a QP whose QPC, CQ or SRQ context, or the MPT entry or MTT
// lines its payload needs, is not cached, and the requester stops a QP
// whose L_Key's MPT entry or MTT line is not (park.go); ctx waits for the
// rest (the receive WQE a message's first packet takes, READ responses'
// memory, a context evicted between the probe and its use).
func (n *engine) ctx(t host.ContextType, idx uint64, dst []byte) bool {
	c := n.caches[t]
	words := n.words[:host.EntrySizes[t]/8]
	var resp [8]ctxcache.Response
	for {
		st, pid := c.Lookup(n.id, idx, words)
		switch st {
		case ctxcache.Fault:
			return false
		case ctxcache.Stall:
			k := c.Poll(n.id, resp[:])
			for _, r := range resp[:k] {
				n.arrived(t, r)
			}
			continue
		case ctxcache.Miss:
			for got := false; !got; {
				k := c.Poll(n.id, resp[:])
				for _, r := range resp[:k] {
					switch {
					case r.PID == pid:
						copy(words, c.Data(pid))
						got = true
						c.Release(r.PID)
					default:
						n.arrived(t, r) // perhaps a parked QP's ticket
					}
				}
			}
		}
		putWords(dst, words)
		return true
	}
}

var le = binary.LittleEndian

// putWords writes a context entry's words into dst, little-endian, as
// the entry lies in host memory.
func putWords(dst []byte, words []uint64) {
	for i, w := range words {
		le.PutUint64(dst[8*i:], w)
	}
}

// qpc reads a QP's context.
func (n *engine) qpc(qpn uint32, q *host.QPCEntry) bool {
	if !n.ctx(host.QPC, uint64(qpn), n.entry[:128]) {
		return false
	}
	q.Decode(n.entry[:128])
	return q.Valid
}

// allowed checks, through the MPT, that key grants need on [va, va+length)
// to protection domain pd.
func (n *engine) allowed(key, pd uint32, va uint64, length uint64, need int) bool {
	var m host.MPTEntry
	if !n.ctx(host.MPT, uint64(key>>8), n.entry[:64]) {
		return false
	}
	m.Decode(n.entry[:64])
	return m.Valid && m.Key == uint8(key) && m.PD == pd && int(m.Access)&need == need &&
		va >= m.VA && length <= m.Length && va-m.VA <= m.Length-length
}

// memory moves len(buf) bytes between buf and registered memory at va
// under key, checking the region's validity, key, protection domain,
// access rights and bounds through the MPT and translating pages through
// the MTT. write means into registered memory. It returns a WC-style
// reason on failure (false).
func (n *engine) memory(key uint32, pd uint32, va uint64, buf []byte, need int, write bool) bool {
	if len(buf) == 0 {
		return true // a zero-length access touches no memory and needs no key (IBTA C9-88)
	}
	if !n.allowed(key, pd, va, uint64(len(buf)), need) {
		return false
	}
	var m host.MPTEntry
	m.Decode(n.entry[:64]) // the entry allowed just read
	off := va - m.VA
	page := uint64(1) << m.PageShift
	for done := 0; done < len(buf); {
		p := (off + uint64(done)) >> m.PageShift
		in := (off + uint64(done)) & (page - 1)
		chunk := min(uint64(len(buf)-done), page-in)
		if !n.ctx(host.MTT, m.FirstMTT+p, n.entry[:8]) {
			return false
		}
		addr := le.Uint64(n.entry[:8])
		var err error
		if write {
			err = n.cfg.DMA.Write(addr+in, buf[done:done+int(chunk)])
		} else {
			err = n.cfg.DMA.Read(addr+in, buf[done:done+int(chunk)])
		}
		if err != nil {
			return false
		}
		done += int(chunk)
	}
	return true
}

// gidAddr is the IP address of a GID (unmapped for IPv4).
func gidAddr(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// frameTo fills the addressing of a frame for a QP's peer. Its packets
// are marked ECN-capable (ECT(0)), as RoCEv2 NICs mark them, so that an
// ECN switch marks them instead of dropping them; rxe ignores the field,
// which the ICRC masks.
func (n *engine) frameTo(f *wire.FrameFields, q *host.QPCEntry, op wire.Opcode, psn wire.PSN) {
	*f = wire.FrameFields{}
	f.Ethernet = wire.EthernetFields{Dst: wire.MAC(q.DestMAC), Src: n.cfg.MAC}
	dst := gidAddr(q.DestGID)
	if dst.Is4() {
		f.IP4 = wire.IPv4Fields{TOS: wire.ECT0, Flags: wire.IPv4FlagDF, TTL: 64, Src: n.cfg.IP, Dst: dst}
	} else {
		f.IPv6 = true
		f.IP6 = wire.IPv6Fields{TrafficClass: wire.ECT0, HopLimit: 64, Src: n.cfg.IP, Dst: dst}
	}
	f.UDP = wire.UDPFields{SrcPort: q.SrcPort, DstPort: wire.RoCEv2Port}
	f.BTH = wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: q.DestQPN, PSN: psn & wire.PSNMask}
}

// send encodes one frame into a transmit buffer and queues it; frames go
// out in batches (flushTX), one system call for many.
func (n *engine) send(f *wire.FrameFields) {
	if n.txN == len(n.tx) {
		n.flushTX()
	}
	fr := n.tx[n.txN : n.txN+1]
	for n.port.Alloc(fr) == 0 {
		n.flushTX()
		n.port.Flush()
	}
	k, err := wire.Encode(fr[0].Data, f)
	if err != nil {
		n.port.Free(fr)
		n.counters.SendErr.Add(1)
		return
	}
	fr[0].Data = fr[0].Data[:k]
	n.txN++
}

// flushTX sends the queued frames, waiting while the port's ring is full.
func (n *engine) flushTX() {
	sent := 0
	for sent < n.txN {
		k, err := n.port.Send(n.tx[sent:n.txN])
		sent += k
		if err != nil {
			n.counters.SendErr.Add(uint64(n.txN - sent))
			n.port.Free(n.tx[sent:n.txN])
			break
		}
		if k == 0 {
			n.port.Flush()
		}
	}
	n.counters.SentPkts.Add(uint64(min(sent, n.txN)))
	n.txN = 0
}
