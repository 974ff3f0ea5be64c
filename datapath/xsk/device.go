package xsk

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/bpf"
)

// Device is an interface with the XDP program attached and one AF_XDP socket
// per RX queue.
type Device struct {
	prog    *bpf.Program
	sockets []*Socket
}

// Open attaches the XDP program to the named interface and binds a socket
// to each of its RX queues, in the calling thread's network namespace.
// cfg.Log, or else logf (which may be nil), hears about fallbacks: generic
// XDP, copy mode.
func Open(ifname string, cfg Config, logf func(format string, args ...any)) (_ *Device, err error) {
	log := cfg.Log
	if log == nil && logf != nil {
		log = slog.New(slog.NewTextHandler(logfWriter(logf), &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: noTime}))
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("xsk: %w", err)
	}
	queues := 1
	if l, err := netlink.LinkByIndex(ifi.Index); err == nil && l.Attrs().NumRxQueues > 0 {
		queues = l.Attrs().NumRxQueues
	}
	d := &Device{}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if d.prog, err = bpf.Attach(ifi.Index, log); err != nil {
		return nil, err
	}
	for q := range queues {
		s, err := NewSocket(ifi.Index, q, cfg)
		if err != nil && q > 0 && errors.Is(err, unix.EINVAL) {
			// The link reports queues allocated, not queues in use
			// (real_num_rx_queues); the kernel refuses a bind past them.
			if log != nil {
				log.Debug("xsk: queues in use", "dev", ifname, "in_use", q, "allocated", queues)
			}
			break
		}
		if err != nil {
			return nil, err
		}
		d.sockets = append(d.sockets, s)
		if err := d.prog.Register(q, s.Fd()); err != nil {
			return nil, err
		}
		if log != nil && !s.ZeroCopy() && q == 0 {
			log.Info("xsk: zero-copy not supported by the driver; copy mode", "dev", ifname)
		}
	}
	return d, nil
}

// logfWriter writes each line to a Printf-like function.
type logfWriter func(format string, args ...any)

func (f logfWriter) Write(p []byte) (int, error) {
	f("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// noTime leaves the time out of logf's lines: its own log adds one.
func noTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// Sockets returns the sockets, one per RX queue, in queue order.
func (d *Device) Sockets() []*Socket { return d.sockets }

// Program returns the attached XDP program.
func (d *Device) Program() *bpf.Program { return d.prog }

// Close closes the sockets and detaches the program, leaving the interface
// as it was.
func (d *Device) Close() error {
	var errs []error
	for _, s := range d.sockets {
		if d.prog != nil {
			errs = append(errs, d.prog.Unregister(s.Queue()))
		}
		errs = append(errs, s.Close())
	}
	d.sockets = nil
	if d.prog != nil {
		errs = append(errs, d.prog.Close())
		d.prog = nil
	}
	return errors.Join(errs...)
}
