package reliability

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrPoolFull is returned when the NIC's replay pool cannot hold another
// QP's allocation.
var ErrPoolFull = errors.New("reliability: replay pool full")

// Pool is the NIC-wide replay buffer: a fixed number of entries, set at
// start, from which each reliable QP reserves its allocation, a
// contiguous segment it alone uses, when it starts sending, and returns
// it at reset. Reserving and releasing are control-path operations
// (serialized by the caller's lock here); the packet path only counts.
type Pool struct {
	mu      sync.Mutex
	entries []Entry
	free    []segment // free segments, by offset, never adjacent

	reserved atomic.Int64 // entries reserved by QPs
	inUse    atomic.Int64 // entries holding an unacknowledged packet
	high     atomic.Int64 // the most ever in use at once
	refused  atomic.Uint64
}

type segment struct{ off, n int }

// NewPool makes a pool of capacity entries.
func NewPool(capacity int) *Pool {
	p := &Pool{entries: make([]Entry, capacity)}
	if capacity > 0 {
		p.free = []segment{{0, capacity}}
	}
	return p
}

// Cap returns the pool's capacity in entries.
func (p *Pool) Cap() int { return len(p.entries) }

// Allocation is a QP's reserved segment of the pool.
type Allocation struct {
	entries []Entry
	off     int
	pool    *Pool
}

// Len returns the allocation's size in entries.
func (a Allocation) Len() int { return len(a.entries) }

// Reserve takes a segment of n entries for one QP (first fit).
func (p *Pool) Reserve(n int) (Allocation, error) {
	if n <= 0 {
		return Allocation{}, fmt.Errorf("reliability: a replay allocation of %d entries", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.free {
		if s.n < n {
			continue
		}
		seg := p.entries[s.off : s.off+n : s.off+n]
		if s.n == n {
			p.free = append(p.free[:i], p.free[i+1:]...)
		} else {
			p.free[i] = segment{s.off + n, s.n - n}
		}
		clear(seg)
		p.reserved.Add(int64(n))
		return Allocation{entries: seg, off: s.off, pool: p}, nil
	}
	p.refused.Add(1)
	return Allocation{}, fmt.Errorf("%w: %d entries asked, %d of %d reserved", ErrPoolFull, n, p.reserved.Load(), len(p.entries))
}

// Release returns an allocation Reserve gave.
func (p *Pool) Release(a Allocation) {
	if len(a.entries) == 0 {
		return
	}
	if a.pool != p {
		panic("reliability: releasing an allocation of another pool")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := segment{a.off, len(a.entries)}
	i := 0
	for i < len(p.free) && p.free[i].off < s.off {
		i++
	}
	p.free = append(p.free, segment{})
	copy(p.free[i+1:], p.free[i:])
	p.free[i] = s
	// Merge with the neighbours.
	if i+1 < len(p.free) && p.free[i].off+p.free[i].n == p.free[i+1].off {
		p.free[i].n += p.free[i+1].n
		p.free = append(p.free[:i+1], p.free[i+2:]...)
	}
	if i > 0 && p.free[i-1].off+p.free[i-1].n == p.free[i].off {
		p.free[i-1].n += p.free[i].n
		p.free = append(p.free[:i], p.free[i+1:]...)
	}
	p.reserved.Add(-int64(len(a.entries)))
}

// use counts entries taken (k > 0) or freed (k < 0) on the packet path.
func (p *Pool) use(k int) {
	if p == nil || k == 0 {
		return
	}
	v := p.inUse.Add(int64(k))
	for {
		h := p.high.Load()
		if v <= h || p.high.CompareAndSwap(h, v) {
			return
		}
	}
}

// PoolStats are the pool's counters.
type PoolStats struct {
	Capacity, Reserved, InUse, HighWater int64
	Refused                              uint64 // reservations refused for lack of room
}

// Stats returns the pool's counters.
func (p *Pool) Stats() PoolStats {
	return PoolStats{Capacity: int64(len(p.entries)), Reserved: p.reserved.Load(), InUse: p.inUse.Load(),
		HighWater: p.high.Load(), Refused: p.refused.Load()}
}
