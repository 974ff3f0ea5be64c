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
	"os"
	"sync/atomic"
	"syscall"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
)

// Receiver is a kernel UDP socket on port 4791 whose datagrams go to a
// NIC. Its goroutine waits in the Go runtime's poller while nothing
// comes: it holds no thread in a system call (see udpport.Port.PollFile).
type Receiver struct {
	port *udpport.Port
	file *os.File // the socket, watched by the runtime's poller
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
	f, err := p.PollFile()
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("kernelrx: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		p.Close()
		return nil, fmt.Errorf("kernelrx: %w", err)
	}
	r := &Receiver{port: p, file: f, nic: nic, done: make(chan struct{})}
	go r.run(rc)
	return r, nil
}

const (
	buffers = 64 // frames the socket's port holds: what the XDP program misses is little
	batch   = 16
)

// run takes what the socket receives until Close: the poller calls the
// read back when the socket is readable, and Close ends the wait by
// closing the file.
func (r *Receiver) run(rc syscall.RawConn) {
	defer close(r.done)
	frames := make([]datapath.Frame, batch)
	for !r.stop.Load() {
		var k int
		var rerr error
		err := rc.Read(func(uintptr) bool {
			k, rerr = r.port.Recv(frames)
			return k > 0 || rerr != nil
		})
		if rerr != nil {
			return
		}
		for _, f := range frames[:k] {
			r.nic.Deliver(f.Data, f.NoICRC)
		}
		r.port.Release(frames[:k])
		if err != nil {
			return // closed
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
	r.file.Close() // ends the poller's wait
	<-r.done
	return r.port.Close()
}
