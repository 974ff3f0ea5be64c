package datapath

import "github.com/softrnic/softrnic/host/hostmem"

// Pool is a fixed set of equal-sized frame buffers in one allocation,
// handed out by index, for ports whose buffers are ordinary memory. It is
// not safe for concurrent use.
type Pool struct {
	bufs [][]byte
	free []uint32
}

// poolWarm is how many of a pool's buffers NewPool faults in: the ones
// handed out first (the free list is a stack, so a port reuses the same
// few), more than a port holds at once in ordinary use. A buffer's first
// use would else pay its page faults on the packet path, 10-20 us a page
// on the hypervisor these hosts run on: the first few hundred frames a
// fresh in-memory port carried took 30-40 us each, and an incast's first
// round trips read 6-10 ms on a 100 us path.
const poolWarm = 1024

// NewPool allocates n buffers of size bytes.
func NewPool(n, size int) *Pool {
	p := &Pool{bufs: make([][]byte, n), free: make([]uint32, n)}
	mem := make([]byte, n*size)
	hostmem.Pin(mem[:min(n, poolWarm)*size])
	for i := range p.bufs {
		p.bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
		p.free[i] = uint32(n - 1 - i)
	}
	return p
}

// Get fills frames with free buffers (Data of full length, Handle the
// index) and returns how many it could.
func (p *Pool) Get(frames []Frame) int {
	n := min(len(frames), len(p.free))
	for i := range n {
		h := p.free[len(p.free)-1-i]
		frames[i] = Frame{Data: p.bufs[h], Handle: uint64(h)}
	}
	p.free = p.free[:len(p.free)-n]
	return n
}

// Put returns the frames' buffers and clears the frames.
func (p *Pool) Put(frames []Frame) {
	for i := range frames {
		p.free = append(p.free, uint32(frames[i].Handle))
		frames[i] = Frame{}
	}
}

// Take removes one free buffer and returns its index.
func (p *Pool) Take() (uint32, bool) {
	if len(p.free) == 0 {
		return 0, false
	}
	h := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return h, true
}

// Return gives back a buffer by index.
func (p *Pool) Return(h uint32) { p.free = append(p.free, h) }

// Buf returns buffer h.
func (p *Pool) Buf(h uint32) []byte { return p.bufs[h] }

// Available is the number of free buffers; Cap the number of buffers.
func (p *Pool) Available() int { return len(p.free) }
func (p *Pool) Cap() int       { return len(p.bufs) }

// Lent is the number of buffers handed out and not returned.
func (p *Pool) Lent() int { return len(p.bufs) - len(p.free) }
