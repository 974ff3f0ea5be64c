package datapath

// The HPU clusters' memory path: the handlers' data lands in host memory
// through the MPT and MTT checks the engines make, read through pipelines
// of the context caches of the cluster's own. A miss waits for its own
// ticket, on the cluster's goroutine: no engine's turn is involved, and
// no engine waits.

import (
	"errors"
	"runtime"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/hpu"
)

// memPath is one HPU cluster's way into host memory. The NIC has one per
// cluster (NICConfig.HPU), on cache pipelines after the engines'; an HPU
// takes one for an access and gives it back (NIC.paths).
type memPath struct {
	nic   *NIC
	pipe  int
	words [16]uint64
	entry [128]byte
	resp  [8]ctxcache.Response
}

// ctx reads entry idx of a context type into dst through the path's own
// pipeline, waiting for its ticket on a miss.
func (m *memPath) ctx(t hostmem.ContextType, idx uint64, dst []byte) bool {
	c := m.nic.caches[t]
	w := m.words[:hostmem.EntrySizes[t]/8]
	for {
		st, pid := c.Lookup(m.pipe, idx, w)
		switch st {
		case ctxcache.Hit:
			putWords(dst, w)
			return true
		case ctxcache.Fault:
			return false
		case ctxcache.Miss:
			m.wait(c, pid, w)
			putWords(dst, w)
			return true
		}
		m.poll(c, ^uint32(0), nil) // no ticket free: take what came, and look again
	}
}

// wait takes the answers on the path's pipeline until ticket pid's, whose
// entry it copies into w.
func (m *memPath) wait(c ContextCache, pid uint32, w []uint64) {
	for !m.poll(c, pid, w) {
	}
}

// poll takes the answers on the path's pipeline, copying ticket pid's
// entry into w; it reports whether that one came. With nothing to take
// it lets time pass.
func (m *memPath) poll(c ContextCache, pid uint32, w []uint64) bool {
	k := c.Poll(m.pipe, m.resp[:])
	if k == 0 && !m.nic.cfg.DMA.Pass() {
		runtime.Gosched()
	}
	got := false
	for _, r := range m.resp[:k] {
		if r.PID == pid {
			copy(w, c.Data(pid))
			got = true
		}
		c.Release(r.PID)
	}
	return got
}

// place writes a WRITE's packet data for a QP's handlers as the responder
// would: at va under key, checked against the QP's protection domain.
func (m *memPath) place(qpn, key uint32, va uint64, data []byte) error {
	if !m.ctx(hostmem.QPC, uint64(qpn), m.entry[:128]) {
		return hpu.ErrOutsideRegion
	}
	var q hostmem.QPCEntry
	q.Decode(m.entry[:128])
	if !q.Valid || !moveMemory(m, m.nic.cfg.DMA, m.entry[:], key, q.PD, va, data, ibv.AccessRemoteWrite, true, nil) {
		return hpu.ErrOutsideRegion
	}
	return nil
}

// withPath runs fn with one of the NIC's HPU memory paths.
func (n *NIC) withPath(fn func(m *memPath) error) error {
	select {
	case m := <-n.paths:
		defer func() { n.paths <- m }()
		return fn(m)
	case <-n.stop:
		return errHPUClosed
	}
}

// HostRegion is registered memory as an execution context's host region
// (hpu.Region): length bytes at va under the local key lkey in protection
// domain pd. Handlers' DMAs to it go through an HPU cluster's memory
// path: the MPT's key, PD, access and bounds checks and the MTT's
// translation, as every access of the NIC's.
func (n *NIC) HostRegion(lkey, pd uint32, va, length uint64) hpu.Region {
	return hostRegion{n: n, key: lkey, pd: pd, va: va, length: length}
}

type hostRegion struct {
	n          *NIC
	key, pd    uint32
	va, length uint64
}

func (r hostRegion) Len() uint64 { return r.length }

func (r hostRegion) WriteAt(p []byte, off uint64) error { return r.access(p, off, true) }

func (r hostRegion) ReadAt(p []byte, off uint64) error { return r.access(p, off, false) }

func (r hostRegion) access(p []byte, off uint64, write bool) error {
	if off > r.length || uint64(len(p)) > r.length-off {
		return hpu.ErrOutsideRegion
	}
	need := ibv.Access(0)
	if write {
		need = ibv.AccessLocalWrite
	}
	return r.n.withPath(func(m *memPath) error {
		if !moveMemory(m, r.n.cfg.DMA, m.entry[:], r.key, r.pd, r.va+off, p, need, write, nil) {
			return errRegionRefused
		}
		return nil
	})
}

var errRegionRefused = errors.New("datapath: the host region's key no longer allows the access (deregistered?)")
