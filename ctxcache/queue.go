package ctxcache

import (
	"runtime"
	"sync/atomic"
)

// queue is a bounded lock-free multi-producer multi-consumer queue (the
// sequence-number design): a producer or consumer claims a cell with one
// compare-and-swap and never waits for another to finish.
type queue[T any] struct {
	mask  uint64
	cells []cell[T]
	_     [56]byte
	head  atomic.Uint64 // next cell to read
	_     [56]byte
	tail  atomic.Uint64 // next cell to write
}

type cell[T any] struct {
	seq atomic.Uint64
	v   T
}

// newQueue returns a queue of at least n cells (rounded up to a power of two).
func newQueue[T any](n int) *queue[T] {
	size := 1
	for size < n {
		size <<= 1
	}
	q := &queue[T]{mask: uint64(size - 1), cells: make([]cell[T], size)}
	for i := range q.cells {
		q.cells[i].seq.Store(uint64(i))
	}
	return q
}

// push adds v and reports false if the queue is full.
func (q *queue[T]) push(v T) bool {
	for {
		pos := q.tail.Load()
		c := &q.cells[pos&q.mask]
		switch seq := c.seq.Load(); {
		case seq == pos:
			if q.tail.CompareAndSwap(pos, pos+1) {
				c.v = v
				c.seq.Store(pos + 1)
				return true
			}
		case seq < pos:
			return false
		}
	}
}

// mustPush pushes v into a queue sized for more values than can ever be in
// it at once. A push can still find the queue full for an instant, while a
// consumer that is freeing a cell has not finished: it then retries.
func (q *queue[T]) mustPush(v T) {
	for !q.push(v) {
		runtime.Gosched()
	}
}

// pop removes the oldest value, reporting false if the queue is empty.
func (q *queue[T]) pop() (T, bool) {
	for {
		pos := q.head.Load()
		c := &q.cells[pos&q.mask]
		switch seq := c.seq.Load(); {
		case seq == pos+1:
			if q.head.CompareAndSwap(pos, pos+1) {
				v := c.v
				c.seq.Store(pos + q.mask + 1)
				return v, true
			}
		case seq < pos+1:
			var zero T
			return zero, false
		}
	}
}
