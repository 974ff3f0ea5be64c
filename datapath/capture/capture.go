// Package capture records the frames a NIC's port receives and sends in a
// pcapng file (gopacket's pcapgo), so that Wireshark or tshark shows the
// conversation even where AF_XDP takes the frames before tcpdump could see
// them. The file has two interfaces per port, "NAME rx" and "NAME tx": a
// frame's interface is its direction.
package capture

import (
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softrnic/softrnic/datapath"
)

// Writer is a pcapng file that ports record into; several ports (the
// queues of one device) may share it.
type Writer struct {
	mu      sync.Mutex
	ng      *pcapgo.NgWriter
	err     error         // the first write error: recording stops, the NIC goes on
	Frames  atomic.Uint64 // frames recorded
	Dropped atomic.Uint64 // frames not recorded after a write error
}

// NewWriter starts a pcapng file on w.
func NewWriter(w io.Writer) (*Writer, error) {
	ng, err := pcapgo.NewNgWriterInterface(w, pcapgo.NgInterface{Name: "softrnic", LinkType: layers.LinkTypeEthernet, SnapLength: 65536},
		pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "softrnic"}})
	if err != nil {
		return nil, err
	}
	return &Writer{ng: ng}, nil
}

// Flush writes what is buffered; it returns the first error recording met.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ng.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

func (w *Writer) write(intf int, data []byte, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		w.Dropped.Add(1)
		return
	}
	ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: len(data), Length: len(data), InterfaceIndex: intf}
	if err := w.ng.WritePacket(ci, data); err != nil {
		w.err = err
		w.Dropped.Add(1)
		return
	}
	w.Frames.Add(1)
}

// Tap adds an interface called name and returns a function that records
// a frame received on it (datapath.NICConfig.DeliverTap: the frames the
// kernel's UDP stack took in instead of a port). Any goroutine may call
// it; it keeps nothing of the frame.
func (w *Writer) Tap(name string) (func(frame []byte), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	intf, err := w.ng.AddInterface(pcapgo.NgInterface{Name: name, Description: "frames " + name, LinkType: layers.LinkTypeEthernet, SnapLength: 65536})
	if err != nil {
		return nil, err
	}
	return func(frame []byte) { w.write(intf, frame, time.Now()) }, nil
}

// WrapDevice records the frames of a netdev's ports: each port is
// replaced in place by a recording one (interfaces "DEV queue N"), and
// tap records the frames the kernel's UDP stack takes in for the NIC
// (datapath.NICConfig.DeliverTap, interface "DEV kernel rx").
func (w *Writer) WrapDevice(dev string, ports []datapath.Port) (tap func(frame []byte), err error) {
	for i, p := range ports {
		c, err := Wrap(p, w, fmt.Sprintf("%s queue %d", dev, i))
		if err != nil {
			return nil, err
		}
		ports[i] = c
	}
	return w.Tap(dev + " kernel rx")
}

// Rewriter is a port that changes frames as it sends them (the udp port:
// the kernel's IP header, the source port of its socket). A capture has
// it rewrite them first, so that the file shows what went on the wire.
type Rewriter interface {
	Rewrite(frames []datapath.Frame)
}

// Port is a port whose frames are recorded.
type Port struct {
	datapath.Port
	w      *Writer
	rx, tx int // the pcapng interfaces of each direction
	// ahead is how many frames at the front of the next Send were recorded
	// already: a send records its frames before the port takes them (after,
	// their buffers may be the peer's), and the ones it did not take come
	// again.
	ahead int
}

// Wrap records p's frames into w, under the interface names "name rx" and
// "name tx".
func Wrap(p datapath.Port, w *Writer, name string) (*Port, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rx, err := w.ng.AddInterface(pcapgo.NgInterface{Name: name + " rx", Description: fmt.Sprintf("frames %s received", name), LinkType: layers.LinkTypeEthernet, SnapLength: 65536})
	if err != nil {
		return nil, err
	}
	tx, err := w.ng.AddInterface(pcapgo.NgInterface{Name: name + " tx", Description: fmt.Sprintf("frames %s sent", name), LinkType: layers.LinkTypeEthernet, SnapLength: 65536})
	if err != nil {
		return nil, err
	}
	return &Port{Port: p, w: w, rx: rx, tx: tx}, nil
}

// Recv implements datapath.Port: the frames received are recorded.
func (p *Port) Recv(frames []datapath.Frame) (int, error) {
	n, err := p.Port.Recv(frames)
	if n > 0 {
		now := time.Now()
		for i := range frames[:n] {
			p.w.write(p.rx, frames[i].Data, now)
		}
	}
	return n, err
}

// Send implements datapath.Port: each frame is recorded once, before the
// port takes it.
func (p *Port) Send(frames []datapath.Frame) (int, error) {
	if w, ok := p.Port.(Rewriter); ok {
		w.Rewrite(frames) // recorded as they will leave
	}
	if skip := min(p.ahead, len(frames)); skip < len(frames) {
		now := time.Now()
		for i := range frames[skip:] {
			p.w.write(p.tx, frames[skip+i].Data, now)
		}
	}
	n, err := p.Port.Send(frames)
	p.ahead = len(frames) - n
	return n, err
}

// Free implements datapath.Port: frames given back were not sent after
// all (they stay in the file: the NIC meant to send them).
func (p *Port) Free(frames []datapath.Frame) {
	p.ahead = 0
	p.Port.Free(frames)
}

// RecvCapacity is the wrapped port's (datapath.RecvCapacitor), so that a
// NIC that records sizes its answers as it would without recording.
func (p *Port) RecvCapacity() int {
	if c, ok := p.Port.(datapath.RecvCapacitor); ok {
		return c.RecvCapacity()
	}
	return 0
}

// JoinMulticast joins the group on the wrapped port, if it is a
// datapath.MulticastJoiner.
func (p *Port) JoinMulticast(group netip.Addr) error {
	if j, ok := p.Port.(datapath.MulticastJoiner); ok {
		return j.JoinMulticast(group)
	}
	return nil
}

// LeaveMulticast leaves the group on the wrapped port.
func (p *Port) LeaveMulticast(group netip.Addr) error {
	if j, ok := p.Port.(datapath.MulticastJoiner); ok {
		return j.LeaveMulticast(group)
	}
	return nil
}

// Kick kicks the wrapped port, if it is a datapath.Kicker.
func (p *Port) Kick() {
	if k, ok := p.Port.(datapath.Kicker); ok {
		k.Kick()
	}
}
