package hpu

import (
	"errors"
	"fmt"
	"time"
)

// Action is what a handler returns (sPIN's return codes).
type Action uint8

const (
	// Success: the handler consumed the packet; its data does not land
	// by default.
	Success Action = iota
	// Proceed: default processing; the packet's data lands as it would
	// without a handler (Context.Default decides where).
	Proceed
	// Drop: the packet is dropped; for a header handler, the whole
	// message is (no payload handler runs, nothing lands).
	Drop
)

// Errors a handler meets, and the faults that stop it.
var (
	// ErrMemoryOverrun: an access outside handler memory.
	ErrMemoryOverrun = errors.New("hpu: handler memory overrun")
	// ErrOutsideRegion: a DMA outside the context's host region.
	ErrOutsideRegion = errors.New("hpu: DMA outside the context's host region")
	// ErrHandlerPanic: the handler panicked.
	ErrHandlerPanic = errors.New("hpu: handler panicked")
	// ErrNoNet: the context has no network operations (Context.Net).
	ErrNoNet = errors.New("hpu: the context cannot send")
	// ErrFull: every packet buffer is taken; the packet was not accepted.
	ErrFull = errors.New("hpu: packet buffers full")
)

// Packet is one packet as a handler sees it.
type Packet struct {
	Payload []byte // the packet's data (a view into the cluster's buffer, valid during the handler)
	Offset  uint32 // of the payload in the message
	Index   int    // the packet's number in the message, from 0
	Opcode  uint8  // the BTH opcode
	PSN     uint32
	Imm     uint32 // immediate data, if the packet carries one
	First   bool   // the message's first packet
	Last    bool   // the message's last packet
}

// Message is the message a packet belongs to.
type Message struct {
	QPN    uint32
	MSN    uint32 // the message's sequence number on its QP
	Length uint32 // bytes, when known (a WRITE's RETH gives it); 0 if not
	Flow   uint32 // a flow identifier (the source QPN, or the user's)
	VA     uint64 // a WRITE's target address, if any
	RKey   uint32 // a WRITE's R_Key, if any
}

// Handler is a header, payload or completion handler.
type Handler func(t *Task) Action

// Region is the host memory a context's handlers may DMA to and from: a
// memory region, addressed from 0.
type Region interface {
	Len() uint64
	WriteAt(p []byte, off uint64) error
	ReadAt(p []byte, off uint64) error
}

// Net are the network operations a context's handlers may issue: send a
// packet back on the message's QP (a reply, carried as a SEND), and
// write to a peer (an RDMA WRITE, sPIN's put). A nil Net refuses them.
type Net interface {
	Send(msg *Message, payload []byte) error
	Put(msg *Message, remoteVA uint64, rkey uint32, payload []byte) error
}

// Default says where a packet's data lands on Proceed (and with no
// handler for it).
type Default func(msg *Message, pkt *Packet) error

// Context is an execution context: the handlers of one kind of message
// and their resources, installed on the NIC by the host.
type Context struct {
	Name       string
	Header     Handler // runs once, on a message's first packet, before its payload handlers
	Payload    Handler // runs on every packet; several may run at once (nil: each packet goes as the header handler said, or proceeds)
	Completion Handler // runs after every payload handler of the message finished
	// MemorySize is the handler memory's size in bytes (sPIN's L2
	// handler memory), shared by every message of the context.
	MemorySize int
	// Host is the host memory the handlers may DMA to and from.
	Host Region
	// Net are the network operations handlers may issue.
	Net Net
	// Default places a packet's data on Proceed; nil drops it.
	Default Default
	// Done is called once per message, after its completion handler (or
	// its fault), on an HPU or a Helper (a NIC engine): err is nil, or the
	// fault that stopped a handler; msg is valid during the call. The NIC
	// acknowledges the message only after it. Like the handlers, it must
	// not wait for the NIC (a verbs call that changes a QP waits for the
	// engine's turn, which may be the one running it).
	Done func(msg *Message, err error)
	// Budget is how long a handler may run before it is counted as
	// running too long (default 100 us), checked on the tasks the engine
	// times (Config.TimeEvery).
	Budget time.Duration
}

// Installer installs execution contexts: an Engine (the scheduler
// alone), or a QP of a live NIC (verbs.QP.Handlers), whose matching
// messages then run through the context.
type Installer interface {
	Install(c Context) (*Installed, error)
}

// Task is a handler's view of its work: the packet, the message, the
// memories, and the operations it may issue.
type Task struct {
	Packet  Packet
	Message Message
	Mem     Memory // the context's handler memory
	Scratch Memory // the cluster's scratchpad
	Cluster int    // the cluster it runs on

	ctx *Installed
}

// DMAToHost writes p to the context's host region at off. A write outside
// the region stops the handler (ErrOutsideRegion).
func (t *Task) DMAToHost(off uint64, p []byte) {
	r := t.ctx.ctx.Host
	if r == nil || off > r.Len() || uint64(len(p)) > r.Len()-off {
		panic(regionFault{off, len(p)})
	}
	if err := r.WriteAt(p, off); err != nil {
		panic(regionFault{off, len(p)})
	}
	t.ctx.Stats.DMABytes.Add(uint64(len(p)))
}

// DMAFromHost reads len(p) bytes of the host region at off into p.
func (t *Task) DMAFromHost(off uint64, p []byte) {
	r := t.ctx.ctx.Host
	if r == nil || off > r.Len() || uint64(len(p)) > r.Len()-off {
		panic(regionFault{off, len(p)})
	}
	if err := r.ReadAt(p, off); err != nil {
		panic(regionFault{off, len(p)})
	}
}

// Send sends payload back on the message's QP.
func (t *Task) Send(payload []byte) error {
	if t.ctx.ctx.Net == nil {
		return ErrNoNet
	}
	t.ctx.Stats.Sends.Add(1)
	return t.ctx.ctx.Net.Send(&t.Message, payload)
}

// Put writes payload to a peer's memory (an RDMA WRITE).
func (t *Task) Put(remoteVA uint64, rkey uint32, payload []byte) error {
	if t.ctx.ctx.Net == nil {
		return ErrNoNet
	}
	t.ctx.Stats.Sends.Add(1)
	return t.ctx.ctx.Net.Put(&t.Message, remoteVA, rkey, payload)
}

// regionFault is the panic value of a DMA outside the host region.
type regionFault struct {
	off uint64
	n   int
}

// faultError turns a handler's panic value into its fault.
func faultError(v any) error {
	switch f := v.(type) {
	case overrun:
		return fmt.Errorf("%w: %d bytes at %d of %d", ErrMemoryOverrun, f.n, f.off, f.size)
	case regionFault:
		return fmt.Errorf("%w: %d bytes at %d", ErrOutsideRegion, f.n, f.off)
	}
	return fmt.Errorf("%w: %v", ErrHandlerPanic, v)
}
