package datapath

import (
	"errors"

	"github.com/softrnic/softrnic/datapath/wire"
	"sync/atomic"
	"time"
)

// Frame is one Ethernet frame in a port's buffer. Data aliases memory the
// port owns; Handle is the port's own reference to it and must not be
// changed.
type Frame struct {
	Data   []byte
	Handle uint64
	// NoICRC is set by ports that cannot give the frame's IP header exactly
	// as it was sent (the udp port rebuilds it), so its ICRC cannot be
	// checked; such ports are trusted to the kernel's own checks.
	NoICRC bool
}

// Port moves batches of frames between the NIC and a network. Every call
// takes a caller-owned slice and never allocates. A port is used by one
// engine goroutine at a time; Stats may be read from any goroutine.
//
// Received frames belong to the caller until Release. Transmit buffers come
// from Alloc, are filled and resliced to the frame's length, and passed to
// Send, which takes ownership of the ones it accepts; unsent ones go back
// with Free. No buffer is ever lost: Stats counts them all.
type Port interface {
	// Recv fills frames with received RoCEv2 frames and returns how many.
	// It does not block.
	Recv(frames []Frame) (int, error)
	// Release returns received frames to the port.
	Release(frames []Frame)
	// Alloc fills frames with empty transmit buffers of MaxFrameLen bytes
	// and returns how many it could get.
	Alloc(frames []Frame) int
	// Send queues frames for transmission and returns how many it took.
	Send(frames []Frame) (int, error)
	// Free returns transmit buffers that were not sent.
	Free(frames []Frame)
	// Wait blocks until frames may be received, the timeout passes, Wake
	// is called or the port is closed. It may run while another goroutine
	// receives and sends (an application driving the NIC, PollApp): it
	// reads only what the kernel or the peer shares.
	Wait(timeout time.Duration) error
	// Wake makes a Wait in progress, or the next one, return at once. It
	// may be called from any goroutine: it is how a doorbell reaches an
	// engine asleep on its port.
	Wake()
	// Flush makes the port transmit what Send queued, for ports that
	// queue (AF_XDP kicks the kernel); others do nothing.
	Flush()
	// MaxFrameLen is the largest frame the port can send or receive.
	MaxFrameLen() int
	// Stats returns the port's counters.
	Stats() *PortStats
	// Close releases the port's resources. Frames it lent become invalid.
	Close() error
}

// ErrClosed is returned by a closed port.
var ErrClosed = errors.New("datapath: port closed")

// PortStats are a port's counters. Drops are frames that reached the port
// and were not passed up, each counted once under its reason.
type PortStats struct {
	RxFrames atomic.Uint64 // RoCEv2 frames passed up by Recv
	RxBytes  atomic.Uint64
	TxFrames atomic.Uint64 // frames accepted by Send
	TxBytes  atomic.Uint64

	RxDropNotRoCE   atomic.Uint64 // not IPv4/IPv6 UDP to port 4791
	RxDropFragment  atomic.Uint64 // an IPv4 fragment of a datagram to 4791 (RoCEv2 is never fragmented)
	RxDropRunt      atomic.Uint64 // shorter than its headers or lengths say: cut short
	RxDropMalformed atomic.Uint64 // RoCEv2 with a bad header field (checksum, opcode, pad, lengths…)
	RxDropTooLong   atomic.Uint64 // longer than MaxFrameLen
	RxDropKernel    atomic.Uint64 // dropped before the port saw them (ring full, no buffers), as the kernel reports
	TxDropTooLong   atomic.Uint64 // Send refused: longer than MaxFrameLen

	// Batching with the kernel (udpport's UDP GSO and GRO).
	TxSegmented  atomic.Uint64 // frames sent as segments of a message of several (UDP GSO)
	RxCoalesced  atomic.Uint64 // frames received coalesced with others (UDP GRO)
	TxOffloadOff atomic.Uint64 // times the kernel refused a GSO message and the port went on without

	// Receive buffers (xsk).
	RxFillGrown atomic.Uint64 // times the port lent the kernel more of its receive chunks (a load beyond its warm stock)
}

// CountDrop counts a frame that wire.Classify refused under its reason.
func (s *PortStats) CountDrop(err error) {
	switch err {
	case wire.ErrNotIP, wire.ErrNotUDP, wire.ErrNotRoCE, wire.ErrIPVersion:
		s.RxDropNotRoCE.Add(1)
	case wire.ErrFragmented:
		s.RxDropFragment.Add(1)
	case wire.ErrTruncated, wire.ErrMissingHeader:
		s.RxDropRunt.Add(1)
	default:
		s.RxDropMalformed.Add(1)
	}
}

// RecvCapacitor is a port that says how many received frames it holds
// before it drops what comes (its receive ring, its socket's buffer). An
// engine keeps the answers its QPs ask for (READ responses, ACKs) within
// half of it, so that a burst of them is never lost at its own port.
type RecvCapacitor interface {
	RecvCapacity() int
}

// A Kicker is a port whose kernel may hold frames that have arrived but
// are not yet in its receive ring: the receive work is pending on this
// CPU (a softirq), and an engine that spins in user space never enters the
// kernel to run it. Kick runs that work now, without blocking; it is for
// the rare moments the engine must know it has everything (before a
// retransmission timer fires), not for every turn.
type Kicker interface {
	Kick()
}

// defaultRecvCapacity is taken for a port that does not say.
const defaultRecvCapacity = 1024

// recvCapacity is what port p holds of received frames.
func recvCapacity(p Port) int {
	if c, ok := p.(RecvCapacitor); ok && c.RecvCapacity() > 0 {
		return c.RecvCapacity()
	}
	return defaultRecvCapacity
}
