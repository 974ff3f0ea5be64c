package apps

import (
	"math"
	"runtime"

	"github.com/softrnic/softrnic/hpu"
)

// Histogram counts the int32 values of a stream of messages into bins on
// the NIC (after PsPIN's histogram benchmark): bin (v-Lo)*Bins/(Hi-Lo),
// values below Lo in bin 0, values at or above Hi in the last; it also
// keeps their count, sum, minimum and maximum. The counts live in handler
// memory; after every message the completion handler DMAs them to offset
// 0 of host, little-endian:
//
//	[0, 4*Bins)              the bins, uint32 each
//	[4*Bins, 4*Bins+8)       the count of values, uint64
//	[4*Bins+8, 4*Bins+16)    their sum, int64
//	[4*Bins+16, 4*Bins+20)   their minimum, int32 (MaxInt32 before any value)
//	[4*Bins+20, 4*Bins+24)   their maximum, int32 (MinInt32 before any value)
//
// A bin's count wraps at 2^32.
type Histogram struct {
	Bins   int
	Lo, Hi int32
	In     *hpu.Installed

	stats int // offset of count, sum, min, max in handler memory
}

// HistogramSnapshot is a histogram as the host reads it.
type HistogramSnapshot struct {
	Bins     []uint64
	Count    uint64
	Sum      int64
	Min, Max int32 // MaxInt32 and MinInt32 before any value
}

// Handler memory layout after the bins (8-aligned): count, sum, min, max
// (encoded: see order),
// the lock of the staging buffer, then the staging buffer, where the
// completion handler assembles the host's picture.
const (
	hCount = 0
	hSum   = 8
	hMin   = 16
	hMax   = 20
	hLock  = 24
	hStage = 32
)

// NewHistogram installs the histogram on e: every message is a stream of
// little-endian int32 values (a packet of a length or at an offset not a
// multiple of 4 stops the handler with ErrShape: the message fails). host
// must hold 4*bins+24 bytes; done, if set, runs after each message.
func NewHistogram(e hpu.Installer, host hpu.Region, bins int, lo, hi int32, done func(msg *hpu.Message, err error)) (*Histogram, error) {
	if bins <= 0 || bins > 1<<24 || lo >= hi || host == nil || host.Len() < uint64(4*bins+24) {
		return nil, ErrShape
	}
	h := &Histogram{Bins: bins, Lo: lo, Hi: hi, stats: (4*bins + 7) &^ 7}
	st, out := h.stats, 4*bins+24 // where the stats are; the bytes DMAed
	width := int64(hi) - int64(lo)
	in, err := e.Install(hpu.Context{
		Name:       "histogram",
		MemorySize: st + hStage + out,
		Host:       host,
		Done:       done,
		Payload: func(t *hpu.Task) hpu.Action {
			p := t.Packet.Payload
			if len(p)%4 != 0 || t.Packet.Offset%4 != 0 {
				panic(ErrShape)
			}
			// The bins one atomic step per value; the packet's count, sum,
			// minimum and maximum first, then one step each.
			var sum int64
			small, large := int32(math.MaxInt32), int32(math.MinInt32)
			for i := 0; i < len(p); i += 4 {
				v := int32(le.Uint32(p[i:]))
				b := 0
				switch {
				case v >= hi:
					b = bins - 1
				case v > lo:
					b = int((int64(v) - int64(lo)) * int64(bins) / width)
				}
				t.Mem.AddInt32(4*b, 1)
				sum += int64(v)
				small, large = min(small, v), max(large, v)
			}
			if len(p) > 0 {
				t.Mem.AddInt64(st+hCount, int64(len(p)/4))
				t.Mem.AddInt64(st+hSum, sum)
				raise(t.Mem, st+hMin, ^order(small))
				raise(t.Mem, st+hMax, order(large))
			}
			return hpu.Success
		},
		Completion: func(t *hpu.Task) hpu.Action {
			// One picture at a time: the last one DMAed is read after
			// every message completed so far.
			for !t.Mem.CAS32(st+hLock, 0, 1) {
				runtime.Gosched()
			}
			defer t.Mem.Store32(st+hLock, 0)
			s := t.Mem.Bytes(st+hStage, out)
			for i := range bins {
				le.PutUint32(s[4*i:], t.Mem.Load32(4*i))
			}
			le.PutUint64(s[4*bins:], t.Mem.Load64(st+hCount))
			le.PutUint64(s[4*bins+8:], t.Mem.Load64(st+hSum))
			le.PutUint32(s[4*bins+16:], uint32(unorder(^t.Mem.Load32(st+hMin))))
			le.PutUint32(s[4*bins+20:], uint32(unorder(t.Mem.Load32(st+hMax))))
			t.DMAToHost(0, s)
			return hpu.Success
		},
	})
	h.In = in
	return h, err
}

// Snapshot reads the histogram from handler memory (each word atomically;
// the whole is consistent once no message is in flight).
func (h *Histogram) Snapshot() HistogramSnapshot {
	m := h.In.Memory()
	s := HistogramSnapshot{Bins: make([]uint64, h.Bins)}
	for i := range s.Bins {
		s.Bins[i] = uint64(m.Load32(4 * i))
	}
	s.Count = m.Load64(h.stats + hCount)
	s.Sum = int64(m.Load64(h.stats + hSum))
	s.Min = unorder(^m.Load32(h.stats + hMin))
	s.Max = unorder(m.Load32(h.stats + hMax))
	return s
}

// The minimum and maximum are kept as unsigned words that only grow, so
// that handler memory's zeros are their start (no value yet) and no
// store at install races the first messages: the maximum as order(v),
// the minimum as ^order(v).

// order maps int32 to uint32 keeping the order: MinInt32 to 0.
func order(v int32) uint32 { return uint32(v) ^ 1<<31 }

// unorder is order's inverse.
func unorder(u uint32) int32 { return int32(u ^ 1<<31) }

// raise sets the word at off to v if v is larger (unsigned).
func raise(m hpu.Memory, off int, v uint32) {
	for {
		o := m.Load32(off)
		if v <= o || m.CAS32(off, o, v) {
			return
		}
	}
}
