package bpf

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Mode is how the XDP program is attached.
type Mode int

// Attach modes.
const (
	ModeNative  Mode = iota // in the driver (veth, most NICs)
	ModeGeneric             // in the kernel's generic path, after the skb is built
)

func (m Mode) String() string {
	if m == ModeNative {
		return "native"
	}
	return "generic"
}

// Counters the program keeps, indexed like its enum stat.
const (
	statRedirected = iota
	statPassed
	numStats
)

// Stats are the program's counters, summed over CPUs.
type Stats struct {
	Redirected uint64 // RoCEv2 frames redirected to the XSK map (or passed when no socket is registered)
	Passed     uint64 // other frames passed to the kernel
}

// Program is the XDP program attached to one interface. Closing it (or the
// process ending) detaches it: it is held by a BPF link, not pinned.
type Program struct {
	objs    roceObjects
	link    link.Link
	mode    Mode
	ifindex int
}

// ErrBusy is returned when the interface already has an XDP program.
var ErrBusy = errors.New("bpf: the interface already has an XDP program")

// Attach loads the program and attaches it to the interface with the given
// index, in the calling thread's network namespace: in native mode if the
// driver supports it, else in generic mode, saying so as a warning to log
// (which may be nil).
func Attach(ifindex int, log *slog.Logger) (*Program, error) {
	p := &Program{ifindex: ifindex}
	if err := loadRoceObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("bpf: load XDP program: %w", err)
	}
	var err error
	p.link, err = link.AttachXDP(link.XDPOptions{Program: p.objs.XdpRoce, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil && !isBusy(err) {
		nativeErr := err
		p.link, err = link.AttachXDP(link.XDPOptions{Program: p.objs.XdpRoce, Interface: ifindex, Flags: link.XDPGenericMode})
		if err == nil {
			p.mode = ModeGeneric
			if log != nil {
				log.Warn("bpf: native XDP not available; attached in generic mode (slower)", "ifindex", ifindex, "err", nativeErr)
			}
		}
	}
	if err != nil {
		p.objs.Close()
		if isBusy(err) {
			return nil, fmt.Errorf("%w (ifindex %d)", ErrBusy, ifindex)
		}
		return nil, fmt.Errorf("bpf: attach XDP to ifindex %d: %w", ifindex, err)
	}
	return p, nil
}

// Mode says how the program is attached.
func (p *Program) Mode() Mode { return p.mode }

// Register sends the RoCEv2 frames that arrive on an RX queue to the AF_XDP
// socket fd.
func (p *Program) Register(queue int, fd int) error {
	if err := p.objs.Xsks.Update(uint32(queue), uint32(fd), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: register XSK for queue %d: %w", queue, err)
	}
	return nil
}

// Unregister stops redirecting a queue's frames; they go to the kernel.
func (p *Program) Unregister(queue int) error {
	err := p.objs.Xsks.Delete(uint32(queue))
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// Stats reads the program's counters.
func (p *Program) Stats() (Stats, error) {
	var s Stats
	for key, dst := range []*uint64{statRedirected: &s.Redirected, statPassed: &s.Passed} {
		var perCPU []uint64
		if err := p.objs.Stats.Lookup(uint32(key), &perCPU); err != nil {
			return Stats{}, fmt.Errorf("bpf: read counters: %w", err)
		}
		for _, v := range perCPU {
			*dst += v
		}
	}
	return s, nil
}

// Close detaches the program and frees its maps.
func (p *Program) Close() error {
	var err error
	if p.link != nil {
		err = p.link.Close()
		p.link = nil
	}
	return errors.Join(err, p.objs.Close())
}
