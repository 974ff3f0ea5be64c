// Package observe lets a command watch the NICs that a benchmark opens
// and closes inside itself: wrap each NIC's port (to record its frames)
// and hear of each device while it is open (to export its counters).
// Packages that open NICs take a *Hooks; a nil one watches nothing.
package observe

import (
	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/host/verbs"
)

// Hooks are what a watcher does with the NICs a benchmark opens. Either
// may be nil.
type Hooks struct {
	// Port returns the port the NIC named name runs on instead of p (a
	// recording wrapper, say), or p itself.
	Port func(name string, p datapath.Port) datapath.Port
	// Device is told that the NIC named name is open on ports; it
	// returns what to do just before the device closes.
	Device func(name string, dev *verbs.Device, ports []datapath.Port) (closing func())
}

// WrapPort is Hooks.Port, or p unchanged when there is no hook.
func (h *Hooks) WrapPort(name string, p datapath.Port) datapath.Port {
	if h == nil || h.Port == nil {
		return p
	}
	return h.Port(name, p)
}

// Opened is Hooks.Device, or nothing to do when there is no hook.
func (h *Hooks) Opened(name string, dev *verbs.Device, ports ...datapath.Port) (closing func()) {
	if h == nil || h.Device == nil {
		return func() {}
	}
	if c := h.Device(name, dev, ports); c != nil {
		return c
	}
	return func() {}
}
