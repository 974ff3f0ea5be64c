// Package apps holds sPIN applications built on package hpu, after PsPIN's
// benchmarks: aggregation of vectors from many senders (NewAggregate;
// NewAggregateRounds keeps it installed for round after round),
// reduction of a message to a scalar (NewReduce), filtering of messages
// (NewFilter), a key-value cache whose GET hits are answered on the NIC
// (NewKV), a histogram of streams of values (NewHistogram), and the
// scatter of messages into a strided layout in host memory, an MPI vector
// datatype (NewScatter). Each installs one execution context through an
// hpu.Installer (an hpu.Engine, or a QP of a live NIC: verbs.QP.Handlers)
// and checks its own input; none allocates per packet.
package apps

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/softrnic/softrnic/hpu"
)

var le = binary.LittleEndian

// ErrShape: a message whose length or offsets do not fit the application.
var ErrShape = errors.New("apps: message does not fit the application's layout")

// Aggregate sums vectors that Senders peers WRITE to one receiver. Each
// message (one sender's vector) takes a partial sum of its own in handler
// memory, the first time one of its packets comes: its payload handlers
// copy their elements into it, since the packets of one message cover
// disjoint elements (an atomic add per element, a locked instruction
// each, cost the NIC several times what the host's loop does). The
// completion handler of the round's last message adds the partials
// together, DMAs the sum into host memory once and notifies.
type Aggregate struct {
	Elements int
	Senders  int
	Float    bool // float32 elements, else int32
	In       *hpu.Installed
}

// NewAggregate installs the aggregation on e: the sum lands at offset 0 of
// host (Elements x 4 bytes), then notify runs. At most senders messages
// take part; a message beyond them fails (ErrShape).
func NewAggregate(e hpu.Installer, host hpu.Region, elements, senders int, float bool, notify func()) (*Aggregate, error) {
	return newAggregate(e, host, elements, senders, float, notify, false)
}

// NewAggregateRounds is NewAggregate for the rounds of one aggregation, as
// a synchronous allreduce's steps: once a round's sum has gone to host
// memory and notify has run, the partial sums, the messages' places and
// the count start again from zero (the completion handler of the round's
// last message clears them: no other handler of the context runs then),
// and the context stays installed for the next round. A sender's vector
// of the next round must not come before this round's notification.
func NewAggregateRounds(e hpu.Installer, host hpu.Region, elements, senders int, float bool, notify func()) (*Aggregate, error) {
	return newAggregate(e, host, elements, senders, float, notify, true)
}

// newAggregate's handler memory: the senders' partial sums (count bytes
// each; the first becomes the sum), the messages counted (4 bytes), then,
// 8-byte aligned, one key per partial: the message that took it (its QPN
// and MSN, plus one; 0: free).
func newAggregate(e hpu.Installer, host hpu.Region, elements, senders int, float bool, notify func(), rounds bool) (*Aggregate, error) {
	if elements <= 0 || senders <= 0 || host.Len() < uint64(elements*4) {
		return nil, ErrShape
	}
	a := &Aggregate{Elements: elements, Senders: senders, Float: float}
	count := elements * 4
	counted := senders * count
	keys := (counted + 4 + 7) &^ 7
	// place returns the offset of msg's partial sum, taking a free one
	// the first time the message is seen.
	place := func(t *hpu.Task) int {
		key := uint64(t.Message.QPN)<<32 | uint64(t.Message.MSN) + 1
		for i := range senders {
			off := keys + 8*i
			switch k := t.Mem.Load64(off); {
			case k == key:
				return i * count
			case k == 0:
				if t.Mem.CAS64(off, 0, key) || t.Mem.Load64(off) == key {
					return i * count
				}
			}
		}
		panic(ErrShape) // more messages than senders: the message is stopped, in error
	}
	in, err := e.Install(hpu.Context{
		Name:       "aggregate",
		MemorySize: keys + 8*senders,
		Host:       host,
		Payload: func(t *hpu.Task) hpu.Action {
			p := t.Packet.Payload
			off := int(t.Packet.Offset)
			if off%4 != 0 || len(p)%4 != 0 || off+len(p) > count {
				panic(ErrShape) // the message is stopped, in error
			}
			// The partial is the message's own and its packets cover
			// disjoint elements: each element's sum so far is the
			// packet's, a copy (an add into the zeroed partial did the
			// same work twice over; a packet handed over again writes the
			// same again).
			copy(t.Mem.Bytes(place(t)+off, len(p)), p)
			return hpu.Success
		},
		Completion: func(t *hpu.Task) hpu.Action {
			place(t) // a message without payload still takes its place
			if int(t.Mem.AddInt32(counted, 1)) == senders {
				sum := t.Mem.Bytes(0, count)
				for i := 1; i < senders; i++ {
					addInto(sum, t.Mem.Bytes(i*count, count), float)
				}
				t.DMAToHost(0, sum)
				if rounds {
					clear(t.Mem.Bytes(0, counted))
					t.Mem.Store32(counted, 0)
					for i := range senders {
						t.Mem.Store64(keys+8*i, 0)
					}
				}
				if notify != nil {
					notify()
				}
			}
			return hpu.Success
		},
	})
	a.In = in
	return a, err
}

// addInto adds the little-endian int32 (or float32) elements of p into
// dst's, element by element. Integers go two at a time in a 64-bit word,
// each lane's carry kept out of the next (the top bit of each lane is
// added apart).
func addInto(dst, p []byte, float bool) {
	dst = dst[:len(p)]
	if float {
		for i := 0; i+4 <= len(p); i += 4 {
			le.PutUint32(dst[i:], math.Float32bits(math.Float32frombits(le.Uint32(dst[i:]))+math.Float32frombits(le.Uint32(p[i:]))))
		}
		return
	}
	const top = 0x8000_0000_8000_0000 // each lane's top bit
	for len(p) >= 16 && len(dst) >= 16 {
		a0, b0 := le.Uint64(dst), le.Uint64(p)
		a1, b1 := le.Uint64(dst[8:]), le.Uint64(p[8:])
		le.PutUint64(dst, ((a0&^top)+(b0&^top))^((a0^b0)&top))
		le.PutUint64(dst[8:], ((a1&^top)+(b1&^top))^((a1^b1)&top))
		dst, p = dst[16:], p[16:]
	}
	for ; len(p) >= 4 && len(dst) >= 4; dst, p = dst[4:], p[4:] {
		le.PutUint32(dst, le.Uint32(dst)+le.Uint32(p))
	}
}

// ReduceOp is a reduction's operator.
type ReduceOp uint8

const (
	Sum ReduceOp = iota // int64 sum of int32 elements
	Min                 // int32 minimum
	Max                 // int32 maximum
)

// NewReduce installs a reduction: each message of little-endian int32
// elements is reduced to one scalar by its payload handlers, and only the
// result reaches host memory: 8 bytes (little-endian int64) at
// 8 x (MSN mod slots) of host. done, if set, runs after each.
func NewReduce(e hpu.Installer, host hpu.Region, op ReduceOp, slots int, done func(msg *hpu.Message, err error)) (*hpu.Installed, error) {
	if slots <= 0 || host.Len() < uint64(slots*8) {
		return nil, ErrShape
	}
	return e.Install(hpu.Context{
		Name:       "reduce",
		MemorySize: slots * 8,
		Host:       host,
		Done:       done,
		Header: func(t *hpu.Task) hpu.Action {
			at := int(t.Message.MSN%uint32(slots)) * 8
			switch op {
			case Sum:
				t.Mem.Store64(at, 0)
			case Min:
				t.Mem.Store32(at, uint32(math.MaxInt32))
			case Max:
				t.Mem.Store32(at, 1<<31) // MinInt32
			}
			return hpu.Proceed
		},
		Payload: func(t *hpu.Task) hpu.Action {
			p := t.Packet.Payload
			if len(p)%4 != 0 {
				panic(ErrShape)
			}
			at := int(t.Message.MSN%uint32(slots)) * 8
			// The packet's part first, then one atomic step into the
			// message's result.
			v := reducePacket(p, op)
			switch op {
			case Sum:
				t.Mem.AddInt64(at, v)
			case Min:
				t.Mem.MinInt32(at, int32(v))
			case Max:
				t.Mem.MaxInt32(at, int32(v))
			}
			return hpu.Success
		},
		Completion: func(t *hpu.Task) hpu.Action {
			at := int(t.Message.MSN%uint32(slots)) * 8
			var out [8]byte
			if op == Sum {
				le.PutUint64(out[:], t.Mem.Load64(at))
			} else {
				le.PutUint64(out[:], uint64(int64(int32(t.Mem.Load32(at)))))
			}
			t.DMAToHost(uint64(at), out[:])
			return hpu.Success
		},
	})
}

// AddInt32 adds the little-endian int32 elements of p into dst's (mod
// 2^32), with the loop the aggregation's handlers run: a host that does
// the same work without the NIC (a benchmark's baseline) runs the same.
func AddInt32(dst, p []byte) { addInto(dst, p, false) }

// Reduce reduces the little-endian int32 elements of p with op (the sum,
// as int64, or the least or greatest element), with the loop the
// reduction's handlers run on each packet.
func Reduce(p []byte, op ReduceOp) int64 { return reducePacket(p, op) }

// reducePacket reduces a packet's little-endian int32 elements with op:
// their int64 sum, or their least or greatest. Each reads the elements
// two at a time, into two accumulators.
func reducePacket(p []byte, op ReduceOp) int64 {
	switch op {
	case Min:
		lo0, lo1 := int32(math.MaxInt32), int32(math.MaxInt32)
		for ; len(p) >= 8; p = p[8:] {
			w := le.Uint64(p)
			lo0, lo1 = min(lo0, int32(w)), min(lo1, int32(w>>32))
		}
		if len(p) >= 4 {
			lo0 = min(lo0, int32(le.Uint32(p)))
		}
		return int64(min(lo0, lo1))
	case Max:
		hi0, hi1 := int32(math.MinInt32), int32(math.MinInt32)
		for ; len(p) >= 8; p = p[8:] {
			w := le.Uint64(p)
			hi0, hi1 = max(hi0, int32(w)), max(hi1, int32(w>>32))
		}
		if len(p) >= 4 {
			hi0 = max(hi0, int32(le.Uint32(p)))
		}
		return int64(max(hi0, hi1))
	}
	var s0, s1 int64
	for ; len(p) >= 16; p = p[16:] {
		a, b := le.Uint64(p), le.Uint64(p[8:])
		s0 += int64(int32(a)) + int64(int32(a>>32))
		s1 += int64(int32(b)) + int64(int32(b>>32))
	}
	for ; len(p) >= 4; p = p[4:] {
		s0 += int64(int32(le.Uint32(p)))
	}
	return s0 + s1
}

// NewFilter installs a filter: a message whose first packet matches drop
// is dropped on the NIC, whole; the others land through place (the NIC's
// default processing).
func NewFilter(e hpu.Installer, drop func(first []byte) bool, place hpu.Default, done func(msg *hpu.Message, err error)) (*hpu.Installed, error) {
	return e.Install(hpu.Context{
		Name: "filter",
		Done: done,
		Header: func(t *hpu.Task) hpu.Action {
			if drop(t.Packet.Payload) {
				return hpu.Drop
			}
			return hpu.Proceed
		},
		Default: place,
	})
}
