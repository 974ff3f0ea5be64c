package datapath

// The memory stage: contexts through their caches, protection checks
// through the MPT, and data through the MTT and the DMA engine.

import (
	"encoding/binary"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// ctx copies entry idx of a context type into dst: what the unit of work
// already resolved, or through the cache; on a miss it waits for the
// fetch, and the wait is counted (ctx_waits). The stages resolve what
// they need first (resolve.go, park.go), so that a wait happens only
// where the cache had no ticket to give or no stage resolved the entry
// ahead (see the counter).
func (e *engine) ctx(t hostmem.ContextType, idx uint64, dst []byte) bool {
	c := e.nic.caches[t]
	resp := e.ctxResp[:] // a field: through the cache interface a stack array would escape
	waited := false
	for {
		st, pid, words := e.look(t, idx)
		switch st {
		case ctxcache.Hit:
			putWords(dst, words)
			return true
		case ctxcache.Fault:
			return false
		}
		if !waited {
			waited = true
			e.counters.CtxWaits.Add(1)
		}
		if st == ctxcache.Stall {
			k := c.Poll(e.id, resp)
			if k == 0 {
				e.cfg.DMA.Pass()
			}
			for _, r := range resp[:k] {
				e.arrived(t, r)
			}
			continue
		}
		e.waitTicket(t, pid, words)
		e.remember(t, idx, words)
		putWords(dst, words)
		return true
	}
}

// waitTicket waits for the answer to ticket pid of the cache of type t
// and copies the entry into words; the answers to other tickets that come
// meanwhile go where they belong (perhaps a parked QP's).
func (e *engine) waitTicket(t hostmem.ContextType, pid uint32, words []uint64) {
	c := e.nic.caches[t]
	resp := e.ctxResp[:]
	for got := false; !got; {
		k := c.Poll(e.id, resp)
		if k == 0 {
			e.cfg.DMA.Pass() // a driven clock moves on to the fetch's answer
		}
		for _, r := range resp[:k] {
			if r.PID == pid {
				copy(words, c.Data(pid))
				got = true
				c.Release(r.PID)
				e.misses--
			} else {
				e.arrived(t, r)
			}
		}
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
func (e *engine) qpc(qpn uint32, q *hostmem.QPCEntry) bool {
	if !e.ctx(hostmem.QPC, uint64(qpn), e.entry[:128]) {
		return false
	}
	q.Decode(e.entry[:128])
	return q.Valid
}

// contexts is what the memory checks read contexts through: an engine
// (what its unit of work resolved, or its cache pipeline) or an HPU
// cluster's memory path (pipelines of its own).
type contexts interface {
	ctx(t hostmem.ContextType, idx uint64, dst []byte) bool
}

// mptAllows checks, through the MPT, that key grants need on [va,
// va+length) to protection domain pd, and leaves the entry in m. entry
// is the reader's buffer for a context entry.
func mptAllows(c contexts, entry []byte, key, pd uint32, va, length uint64, need ibv.Access, m *hostmem.MPTEntry) bool {
	if !c.ctx(hostmem.MPT, uint64(key>>8), entry[:64]) {
		return false
	}
	m.Decode(entry[:64])
	return m.Valid && m.Key == uint8(key) && m.PD == pd && m.Access&need == need &&
		va >= m.VA && length <= m.Length && va-m.VA <= m.Length-length
}

// moveMemory moves len(buf) bytes between buf and registered memory at
// va under key, checking the region's validity, key, protection domain,
// access rights and bounds through the MPT and translating pages through
// the MTT; write means into registered memory. A zero-length access
// touches no memory and needs no key (IBTA C9-88).
//
// A read with into set is issued, not waited for: into counts it and is
// told when it completes (dmastage.go).
func moveMemory(c contexts, dma *hostmem.DMA, entry []byte, key, pd uint32, va uint64, buf []byte, need ibv.Access, write bool, into *stagedFrame) bool {
	if len(buf) == 0 {
		return true
	}
	var m hostmem.MPTEntry
	if !mptAllows(c, entry, key, pd, va, uint64(len(buf)), need, &m) {
		return false
	}
	off := va - m.VA
	page := uint64(1) << m.PageShift
	for done := 0; done < len(buf); {
		p := (off + uint64(done)) >> m.PageShift
		in := (off + uint64(done)) & (page - 1)
		chunk := min(uint64(len(buf)-done), page-in)
		if !c.ctx(hostmem.MTT, m.FirstMTT+p, entry[:8]) {
			return false
		}
		addr := le.Uint64(entry[:8])
		var err error
		switch {
		case write:
			err = dma.Write(addr+in, buf[done:done+int(chunk)])
		case into != nil:
			err = readInto(dma, addr+in, buf[done:done+int(chunk)], into)
		default:
			err = dma.Read(addr+in, buf[done:done+int(chunk)])
		}
		if err != nil {
			return false
		}
		done += int(chunk)
	}
	return true
}

// allowed checks, through the MPT, that key grants need on [va, va+length)
// to protection domain pd.
func (e *engine) allowed(key, pd uint32, va uint64, length uint64, need ibv.Access) bool {
	var m hostmem.MPTEntry
	return mptAllows(e, e.entry[:], key, pd, va, length, need, &m)
}

// memory moves len(buf) bytes between buf and registered memory at va
// under key (moveMemory), the contexts resolved by the unit of work.
func (e *engine) memory(key uint32, pd uint32, va uint64, buf []byte, need ibv.Access, write bool) bool {
	return moveMemory(e, e.cfg.DMA, e.entry[:], key, pd, va, buf, need, write, nil)
}

// scatter writes payload at logical offset off of a scatter/gather list
// (the regions must grant local write).
func (e *engine) scatter(pd uint32, sges []hostmem.SGE, off uint32, payload []byte) bool {
	return e.sglCopy(pd, sges, off, payload, true, nil)
}

// sglCopy moves buf to (write) or from logical offset off of a
// scatter/gather list; reads for a staged frame (into) are issued, not
// waited for.
func (e *engine) sglCopy(pd uint32, sges []hostmem.SGE, off uint32, buf []byte, write bool, into *stagedFrame) bool {
	need := ibv.Access(0)
	if write {
		need = ibv.AccessLocalWrite
	}
	for _, s := range sges {
		if len(buf) == 0 {
			return true
		}
		if off >= s.Length {
			off -= s.Length
			continue
		}
		take := min(uint32(len(buf)), s.Length-off)
		if !moveMemory(e, e.cfg.DMA, e.entry[:], s.LKey, pd, s.Addr+uint64(off), buf[:take], need, write, into) {
			return false
		}
		buf, off = buf[take:], 0
	}
	return len(buf) == 0
}

// sglLen is the number of bytes a scatter/gather list holds.
func sglLen(sges []hostmem.SGE) uint64 {
	var t uint64
	for _, s := range sges {
		t += uint64(s.Length)
	}
	return t
}

// gather reads len(buf) bytes at logical offset off of a WQE's data: its
// inline bytes, or its scatter/gather list (local reads need no access
// right beyond the region's validity). With into set, the reads land in
// that staged frame's buffer later (dmastage.go).
func (e *engine) gather(pd uint32, w *hostmem.SendWQE, off uint32, buf []byte, into *stagedFrame) bool {
	if w.InlineLen > 0 {
		return copy(buf, w.Inline[min(off, w.InlineLen):w.InlineLen]) == len(buf)
	}
	return e.sglCopy(pd, w.SGE[:min(int(w.NumSGE), hostmem.MaxSendSGE)], off, buf, false, into)
}
