package hpu

import (
	"runtime"
	"sync/atomic"
)

// ring is a bounded lock-free queue of int32 for many producers and many
// consumers (D. Vyukov's): each cell carries a sequence number that says
// whether it is free for the producer of a given turn or full for its
// consumer, so a push and a pop each cost one compare-and-swap and touch
// no lock. The scheduler's queues and free lists are rings: channels
// serialize their senders and receivers on one lock, which at millions
// of packets a second is most of the scheduler's time.
//
// The producers' tail and the consumers' head are each a whole line away
// from anything else, whatever the alignment the allocator gives the
// ring: a read-only field that shared tail's line (the mask, read at
// every pop) moved that line between the processors at every push.
type ring struct {
	cells []ringCell
	mask  uint32
	_     line
	tail  atomic.Uint32 // next push
	_     line
	head  atomic.Uint32 // next pop
	_     line
}

type ringCell struct {
	seq atomic.Uint32
	val int32
}

// newRing returns an empty ring holding at least n values.
func newRing(n int) *ring {
	size := 1
	for size < n {
		size <<= 1
	}
	r := &ring{cells: make([]ringCell, size), mask: uint32(size - 1)}
	for i := range r.cells {
		r.cells[i].seq.Store(uint32(i))
	}
	return r
}

// push adds v; it reports false if the ring is full. deep says that the
// ring held at least deepRing values after it, as seen for nothing: the
// cell deepRing-1 behind is on the line the push just wrote (seen only
// when v fills a line's last cell; a ring of fewer cells never says so).
func (r *ring) push(v int32) (ok, deep bool) {
	for {
		pos := r.tail.Load()
		c := &r.cells[pos&r.mask]
		switch d := int32(c.seq.Load() - pos); {
		case d == 0:
			if r.tail.CompareAndSwap(pos, pos+1) {
				c.val = v
				c.seq.Store(pos + 1)
				if pos%deepRing == deepRing-1 && r.mask >= deepRing-1 {
					back := pos - (deepRing - 1)
					deep = r.cells[back&r.mask].seq.Load() == back+1 // still full: not taken yet
				}
				return true, deep
			}
		case d < 0:
			return false, false
		}
	}
}

// deepRing is the depth a push reports: the cells of one cache line.
const deepRing = 8

// put adds v to a ring that has room for it (it never holds more values
// than its size: the scheduler's slots, its messages). A cell can still
// look full for a moment, while a consumer that has taken its value has
// not yet handed it back; put waits for that instead of losing v. deep
// is push's.
func (r *ring) put(v int32) (deep bool) {
	for {
		ok, deep := r.push(v)
		if ok {
			return deep
		}
		runtime.Gosched()
	}
}

// pop takes the oldest value; it reports false if the ring is empty.
func (r *ring) pop() (int32, bool) {
	for {
		pos := r.head.Load()
		c := &r.cells[pos&r.mask]
		switch d := int32(c.seq.Load() - (pos + 1)); {
		case d == 0:
			if r.head.CompareAndSwap(pos, pos+1) {
				v := c.val
				c.seq.Store(pos + r.mask + 1)
				return v, true
			}
		case d < 0:
			return 0, false
		}
	}
}

// len is the number of values in the ring (a snapshot).
func (r *ring) len() int { return int(int32(r.tail.Load() - r.head.Load())) }

// popN takes up to len(dst) of the oldest values at once, with one
// compare-and-swap, and reports how many it took (0: the ring is empty).
// The values taken are the ones full in a row from the head.
func (r *ring) popN(dst []int32) int {
	for {
		pos := r.head.Load()
		n := 0
		for n < len(dst) {
			d := int32(r.cells[(pos+uint32(n))&r.mask].seq.Load() - (pos + uint32(n) + 1))
			if d != 0 {
				if n == 0 && d < 0 {
					return 0
				}
				break
			}
			n++
		}
		if n == 0 { // another consumer moved the head: look again
			continue
		}
		if r.head.CompareAndSwap(pos, pos+uint32(n)) {
			for i := range n {
				c := &r.cells[(pos+uint32(i))&r.mask]
				dst[i] = c.val
				c.seq.Store(pos + uint32(i) + r.mask + 1)
			}
			return n
		}
	}
}

// putN adds the values of src to a ring that has room for them (as put),
// with one compare-and-swap when the cells are free in a row.
func (r *ring) putN(src []int32) {
	for len(src) > 0 {
		pos := r.tail.Load()
		n := 0
		for n < len(src) && r.cells[(pos+uint32(n))&r.mask].seq.Load() == pos+uint32(n) {
			n++
		}
		if n == 0 {
			if int32(r.cells[pos&r.mask].seq.Load()-pos) < 0 { // taken, not yet handed back
				runtime.Gosched()
			}
			continue
		}
		if r.tail.CompareAndSwap(pos, pos+uint32(n)) {
			for i := range n {
				c := &r.cells[(pos+uint32(i))&r.mask]
				c.val = src[i]
				c.seq.Store(pos + uint32(i) + 1)
			}
			src = src[n:]
		}
	}
}
