// Package kernelrx takes in the RoCEv2 datagrams that reach the kernel's
// UDP stack on a netdev whose frames the NIC takes through AF_XDP.
//
// The XDP program steers every UDP/4791 frame to an XSK socket, but not
// every frame meets it: a veth runs its native XDP program only on frames
// it takes through NAPI, and for a few seconds after the first program is
// attached to a fresh veth (seen on 6.x kernels) bridged frames go
// straight to the stack. Without a socket on port 4791 the kernel drops
// them and answers with ICMP port unreachable, and a connection manager
// that gets that answer to its first REQ gives up (librdmacm's rping
// client: RDMA_CM_EVENT_UNREACHABLE). A Receiver binds that port on the
// NIC's address, as rdma_rxe's kernel socket does, and hands what arrives
// to the NIC (datapath.NIC.Deliver), counted as kernel_rx_frames: nothing
// is lost, and the peer hears no ICMP error.
package kernelrx

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
)

// Receiver is a kernel UDP socket on port 4791 whose datagrams go to a
// NIC. Its goroutine sleeps in the socket's poll while nothing comes.
type Receiver struct {
	port *udpport.Port
	nic  *datapath.NIC
	stop atomic.Bool
	done chan struct{}
}

// Start binds port 4791 on local (the NIC's address, in the calling
// thread's network namespace) and hands every datagram that arrives to
// nic, which must have been opened with datapath.NICConfig.KernelRx. mac
// is the NIC's Ethernet address, written into the frames rebuilt around
// the datagrams. It fails if the port is taken (another RoCEv2 stack on the
// address, such as rdma_rxe).
func Start(nic *datapath.NIC, local netip.Addr, mac wire.MAC) (*Receiver, error) {
	p, err := udpport.Open(udpport.Config{Local: local, LocalMAC: mac, Buffers: buffers, Batch: batch})
	if err != nil {
		return nil, fmt.Errorf("kernelrx: %w", err)
	}
	r := &Receiver{port: p, nic: nic, done: make(chan struct{})}
	go r.run()
	return r, nil
}

const (
	buffers = 64 // frames the socket's port holds: what the XDP program misses is little
	batch   = 16
	idle    = 100 * time.Millisecond // the longest sleep between looks at stop
)

func (r *Receiver) run() {
	defer close(r.done)
	frames := make([]datapath.Frame, batch)
	for !r.stop.Load() {
		k, err := r.port.Recv(frames)
		if err != nil {
			return
		}
		for _, f := range frames[:k] {
			r.nic.Deliver(f.Data, f.NoICRC)
		}
		r.port.Release(frames[:k])
		if k == 0 {
			if err := r.port.Wait(idle); err != nil {
				return
			}
		}
	}
}

// Stats returns the socket's counters (datagrams received, and dropped
// before the NIC saw them: truncated, or not RoCEv2).
func (r *Receiver) Stats() *datapath.PortStats { return r.port.Stats() }

// Close stops the receiver and closes its socket (after its goroutine
// has left it).
func (r *Receiver) Close() error {
	if r.stop.Swap(true) {
		return datapath.ErrClosed
	}
	r.port.Wake()
	<-r.done
	return r.port.Close()
}
