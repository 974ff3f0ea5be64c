// Package xsk is the AF_XDP port: frames go straight between the NIC's
// engine and the network through a UMEM shared with the kernel, steered by
// the XDP program of package bpf.
//
//	                UMEM (chunks of 4096 bytes)
//	+------------------------------+--------------------------------------+
//	| RX chunks (RxChunks)         | TX slots (TxSlots × 2 chunks)        |
//	+------------------------------+--------------------------------------+
//	  fill ring ──► kernel ──► RX ring        TX ring ──► kernel ──► completion ring
//	  ▲ Release                    │ Recv     ▲ Send                    │ Alloc reclaims
//	  └────────────────────────────┘          └─────────────────────────┘
//
// Every RX chunk is always in exactly one place: the fill ring, the RX ring,
// lent to the engine, or being copied into a reassembly buffer; every TX
// slot is free, lent, or in flight. Nothing is ever lost (Accounting checks
// it). A frame larger than one chunk travels as a multi-buffer frame
// (XDP_USE_SG): on receive its chunks are gathered into a reassembly buffer;
// on transmit a TX slot's two adjacent chunks hold it in place.
//
// The rings' shared indices are read and written once per batch; all unsafe
// code is in xsk_unsafe.go.
package xsk

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/wire"
)

// ChunkSize is the size of a UMEM chunk, the most a kernel allows in
// aligned mode.
const ChunkSize = 4096

// Config sizes a socket. Zero values take the defaults.
type Config struct {
	RxChunks  uint32 // chunks for receiving, a power of two; also the fill ring's size (default 2048)
	TxSlots   uint32 // transmit buffers of two chunks each, a power of two (default 1024)
	RingSize  uint32 // entries of the RX, TX and completion rings, a power of two (default 2048)
	Jumbo     int    // reassembly buffers for multi-buffer frames (default 64)
	ForceCopy bool   // do not try zero-copy
	// RxWarm is how many of the RX chunks the fill ring lends the
	// kernel at first (default 256, at most RxChunks); the rest it lends
	// at once when the load asks (growFill). A light load so cycles through a few
	// chunks, warm: the first frame the kernel copies into a chunk costs
	// far more than the next ones under a hypervisor that fills its page
	// tables lazily (here about 10 us, on each side: with every chunk
	// lent at once, a ping-pong's first 2,048 frames took 25-45 us
	// where the rest took 7), and they stay in the CPU's caches.
	RxWarm uint32

	// Log hears Open's news: generic XDP (a warning), copy mode (info),
	// fewer queues in use than allocated (debug). Nil: Open's logf.
	Log *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.RxChunks == 0 {
		c.RxChunks = 2048
	}
	if c.TxSlots == 0 {
		c.TxSlots = 1024
	}
	if c.RingSize == 0 {
		c.RingSize = 2048
	}
	if c.RxWarm == 0 {
		c.RxWarm = 256
	}
	c.RxWarm = min(c.RxWarm, c.RxChunks)
	if c.Jumbo == 0 {
		c.Jumbo = 64
	}
	for _, v := range []uint32{c.RxChunks, c.TxSlots, c.RingSize} {
		if v&(v-1) != 0 {
			return fmt.Errorf("xsk: ring and UMEM sizes must be powers of two, not %d", v)
		}
	}
	return nil
}

const jumboFlag = 1 << 63 // in a Frame's Handle: a reassembly buffer, not a chunk

// Socket is one AF_XDP socket bound to one queue of an interface, with its
// own UMEM. It implements datapath.Port.
type Socket struct {
	fd       int
	ifindex  int
	queue    int
	cfg      Config
	zeroCopy bool
	sg       bool
	maxFrame int

	umem       []byte
	fill, comp addrRing
	rx, tx     descRing
	fillQueued uint32   // fill entries written but not yet submitted
	fillStock  uint32   // RX chunks lent to the fill ring (RxWarm, then RxChunks)
	rxReserve  []uint64 // RX chunks not yet lent (growFill)

	txBase    uint64   // UMEM offset of the first TX slot
	txFree    []uint32 // free TX slots
	txPending []uint8  // descriptors in flight per TX slot
	txLent    int
	rxLent    int

	jumbo     [][]byte
	jumboFree []uint32
	gathering bool // inside a multi-buffer frame
	gatherBuf int  // its reassembly buffer, or -1 to drop it
	gatherLen int
	gatherWhy *atomic.Uint64 // the counter a dropped frame goes to

	pollfd [2]unix.PollFd // the socket and the wake eventfd
	wakefd int
	// mcastfd is a UDP socket that holds the interface's memberships of
	// the multicast groups the NIC takes (JoinMulticast), made with the
	// port in its network namespace; -1 if it could not be.
	mcastfd int
	stats   datapath.PortStats
	closed  bool
}

var (
	_ datapath.Port            = (*Socket)(nil)
	_ datapath.MulticastJoiner = (*Socket)(nil)
)

// NewSocket creates a socket with its UMEM and rings and binds it to a queue
// of the interface with index ifindex, in the calling thread's network
// namespace: zero-copy if the driver supports it, else copy mode; with
// multi-buffer frames if the kernel supports them. The caller registers
// Fd() in the XDP program's map for the queue.
func NewSocket(ifindex, queue int, cfg Config) (_ *Socket, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xsk: socket: %w", err)
	}
	s := &Socket{fd: fd, ifindex: ifindex, queue: queue, cfg: cfg, gatherBuf: -1, wakefd: -1, mcastfd: -1}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	chunks := int(cfg.RxChunks) + 2*int(cfg.TxSlots)
	s.umem, err = unix.Mmap(-1, 0, chunks*ChunkSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("xsk: UMEM of %d chunks: %w", chunks, err)
	}
	if err := registerUMEM(fd, s.umem, ChunkSize, 0); err != nil {
		return nil, fmt.Errorf("xsk: register UMEM: %w", err)
	}
	for _, o := range []struct {
		name int
		size uint32
	}{
		{unix.XDP_UMEM_FILL_RING, cfg.RxChunks},
		{unix.XDP_UMEM_COMPLETION_RING, cfg.RingSize},
		{unix.XDP_RX_RING, cfg.RingSize},
		{unix.XDP_TX_RING, cfg.RingSize},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.name, int(o.size)); err != nil {
			return nil, fmt.Errorf("xsk: ring size %d: %w", o.size, err)
		}
	}
	// Busy polling on the socket lets Kick run the queue's receive work
	// (see Kick); with the default net.core.busy_poll of 0 it changes
	// nothing else. Best effort: without it Kick does nothing.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL, 1)
	off, err := mmapOffsets(fd)
	if err != nil {
		return nil, fmt.Errorf("xsk: mmap offsets: %w", err)
	}
	if s.fill, err = mapAddrRing(fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, cfg.RxChunks); err != nil {
		return nil, err
	}
	if s.comp, err = mapAddrRing(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, cfg.RingSize); err != nil {
		return nil, err
	}
	if s.rx, err = mapDescRing(fd, unix.XDP_PGOFF_RX_RING, off.Rx, cfg.RingSize); err != nil {
		return nil, err
	}
	if s.tx, err = mapDescRing(fd, unix.XDP_PGOFF_TX_RING, off.Tx, cfg.RingSize); err != nil {
		return nil, err
	}

	for i := range cfg.RxWarm {
		s.recycle(uint64(i) * ChunkSize)
	}
	s.fillStock = cfg.RxWarm
	for i := cfg.RxWarm; i < cfg.RxChunks; i++ {
		s.rxReserve = append(s.rxReserve, uint64(i)*ChunkSize)
	}
	s.flushFill()
	s.txBase = uint64(cfg.RxChunks) * ChunkSize
	s.txFree = make([]uint32, cfg.TxSlots)
	for i := range s.txFree {
		s.txFree[i] = cfg.TxSlots - 1 - uint32(i)
	}
	s.txPending = make([]uint8, cfg.TxSlots)

	if err := s.bind(); err != nil {
		return nil, err
	}
	s.maxFrame = ChunkSize
	if s.sg {
		s.maxFrame = 2 * ChunkSize
		s.jumbo = make([][]byte, cfg.Jumbo)
		mem := make([]byte, cfg.Jumbo*s.maxFrame)
		for i := range s.jumbo {
			s.jumbo[i] = mem[i*s.maxFrame : (i+1)*s.maxFrame : (i+1)*s.maxFrame]
			s.jumboFree = append(s.jumboFree, uint32(i))
		}
	}
	s.wakefd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("xsk: eventfd: %w", err)
	}
	s.pollfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	s.pollfd[1] = unix.PollFd{Fd: int32(s.wakefd), Events: unix.POLLIN}
	if m, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		s.mcastfd = m
	}
	return s, nil
}

// JoinMulticast implements datapath.MulticastJoiner: the interface joins
// the IPv4 group (IP_ADD_MEMBERSHIP on the port's UDP socket, held until
// LeaveMulticast or Close), so that a NIC's multicast filter lets the
// group's frames in (a veth takes every frame without one), and the
// host's IGMP tells the switches. The kernel holds igmp_max_memberships
// (20 by default) groups a socket.
func (s *Socket) JoinMulticast(group netip.Addr) error {
	if s.mcastfd < 0 {
		return errors.New("xsk: multicast: no socket for the memberships")
	}
	m := &unix.IPMreqn{Multiaddr: group.Unmap().As4(), Ifindex: int32(s.ifindex)}
	if err := unix.SetsockoptIPMreqn(s.mcastfd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, m); err != nil && !errors.Is(err, unix.EADDRINUSE) {
		return fmt.Errorf("xsk: join %s on interface %d: %w", group, s.ifindex, err)
	}
	return nil
}

// LeaveMulticast implements datapath.MulticastJoiner.
func (s *Socket) LeaveMulticast(group netip.Addr) error {
	if s.mcastfd < 0 {
		return nil
	}
	m := &unix.IPMreqn{Multiaddr: group.Unmap().As4(), Ifindex: int32(s.ifindex)}
	return unix.SetsockoptIPMreqn(s.mcastfd, unix.IPPROTO_IP, unix.IP_DROP_MEMBERSHIP, m)
}

// bind binds the socket. A queue whose previous socket belonged to a process
// that just died stays busy while the kernel tears that socket down (tens of
// milliseconds), so a busy queue is retried for up to a second.
func (s *Socket) bind() error {
	for wait := time.Duration(0); ; wait += 20 * time.Millisecond {
		err := s.tryBind()
		if err == nil || !errors.Is(err, unix.EBUSY) || wait >= time.Second {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryBind binds the socket, trying zero-copy before copy mode and
// multi-buffer before single-buffer frames.
func (s *Socket) tryBind() error {
	var errs []error
	for _, sg := range []bool{true, false} {
		for _, zc := range []bool{!s.cfg.ForceCopy, false} {
			flags := uint16(unix.XDP_USE_NEED_WAKEUP | unix.XDP_COPY)
			if zc {
				flags = unix.XDP_USE_NEED_WAKEUP | unix.XDP_ZEROCOPY
			}
			if sg {
				flags |= unix.XDP_USE_SG
			}
			err := unix.Bind(s.fd, &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)})
			if err == nil {
				s.zeroCopy, s.sg = zc, sg
				return nil
			}
			errs = append(errs, fmt.Errorf("flags %#x: %w", flags, err))
			if !zc && !sg {
				break
			}
		}
	}
	return fmt.Errorf("xsk: bind to ifindex %d queue %d: %w", s.ifindex, s.queue, errors.Join(errs...))
}

// Fd is the socket's file descriptor, for the XDP program's map.
func (s *Socket) Fd() int { return s.fd }

// Queue is the RX queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// ZeroCopy reports whether the driver gave zero-copy mode.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// MultiBuffer reports whether frames larger than a chunk are supported.
func (s *Socket) MultiBuffer() bool { return s.sg }

// MaxFrameLen implements datapath.Port.
func (s *Socket) MaxFrameLen() int { return s.maxFrame }

// RecvCapacity implements datapath.RecvCapacitor: the frames the kernel
// can hand over before it drops, the RX ring's entries or the chunks the
// fill ring lends it, whichever are fewer.
func (s *Socket) RecvCapacity() int { return int(min(s.cfg.RingSize, s.cfg.RxChunks)) }

// recycle queues a chunk for the fill ring. The fill ring has room for every
// RX chunk, so it never overflows.
func (s *Socket) recycle(addr uint64) {
	s.fill.addrs[(s.fill.cachedProd+s.fillQueued)&s.fill.mask] = addr &^ (ChunkSize - 1)
	s.fillQueued++
}

func (s *Socket) flushFill() {
	if s.fillQueued > 0 {
		s.fill.submit(s.fillQueued)
		s.fillQueued = 0
	}
}

// Recv implements datapath.Port.
func (s *Socket) Recv(frames []datapath.Frame) (int, error) {
	if s.closed {
		return 0, datapath.ErrClosed
	}
	avail := s.rx.avail(uint32(len(frames)))
	n := 0
	var used uint32
	for used < avail && n < len(frames) {
		d := s.rx.descs[(s.rx.cachedCons+used)&s.rx.mask]
		used++
		data := s.umem[d.Addr : d.Addr+uint64(d.Len)]
		more := d.Options&unix.XDP_PKT_CONTD != 0
		if !s.gathering && !more {
			if err := wire.Classify(data); err != nil {
				s.stats.CountDrop(err)
				s.recycle(d.Addr)
				continue
			}
			frames[n] = datapath.Frame{Data: data, Handle: d.Addr}
			n++
			s.rxLent++
			s.stats.RxFrames.Add(1)
			s.stats.RxBytes.Add(uint64(len(data)))
			continue
		}
		if f, ok := s.gather(d.Addr, data, more); ok {
			frames[n] = f
			n++
		}
	}
	s.rx.release(used)
	s.flushFill()
	if len(s.rxReserve) > 0 && (n >= rxBulk || s.fill.pending() < s.fillStock/2) {
		s.growFill()
	}
	return n, nil
}

// rxBulk is the frames one Recv takes that show a bulk load: a
// ping-pong's batches are of one to three.
const rxBulk = 8

// growFill lends the fill ring the rest of the RX chunks: the frames
// come in bulk (a Recv took rxBulk or more), or the kernel was down to
// half of its stock (a load that takes frames faster than the engine
// gives them back). A bulk load's bursts may outrun a small stock
// between two polls (the kernel drops what finds no chunk).
func (s *Socket) growFill() {
	for _, addr := range s.rxReserve {
		s.recycle(addr)
	}
	s.fillStock += uint32(len(s.rxReserve))
	s.rxReserve = nil
	s.flushFill()
	s.stats.RxFillGrown.Add(1)
}

// gather adds one buffer of a multi-buffer frame to its reassembly buffer
// and recycles the chunk at once; on the last buffer it returns the frame,
// or counts and drops it.
func (s *Socket) gather(addr uint64, data []byte, more bool) (datapath.Frame, bool) {
	if !s.gathering {
		s.gathering, s.gatherLen, s.gatherBuf, s.gatherWhy = true, 0, -1, nil
		if len(s.jumboFree) > 0 {
			s.gatherBuf = int(s.jumboFree[len(s.jumboFree)-1])
			s.jumboFree = s.jumboFree[:len(s.jumboFree)-1]
		} else {
			s.gatherWhy = &s.stats.RxDropKernel // out of reassembly buffers
		}
	}
	if s.gatherBuf >= 0 {
		if s.gatherLen+len(data) > s.maxFrame {
			s.dropGather(&s.stats.RxDropTooLong)
		} else {
			s.gatherLen += copy(s.jumbo[s.gatherBuf][s.gatherLen:], data)
		}
	}
	s.recycle(addr)
	if more {
		return datapath.Frame{}, false
	}
	s.gathering = false
	if s.gatherBuf < 0 {
		s.gatherWhy.Add(1)
		return datapath.Frame{}, false
	}
	frame := s.jumbo[s.gatherBuf][:s.gatherLen]
	if err := wire.Classify(frame); err != nil {
		s.stats.CountDrop(err)
		s.jumboFree = append(s.jumboFree, uint32(s.gatherBuf))
		return datapath.Frame{}, false
	}
	s.rxLent++
	s.stats.RxFrames.Add(1)
	s.stats.RxBytes.Add(uint64(len(frame)))
	return datapath.Frame{Data: frame, Handle: jumboFlag | uint64(s.gatherBuf)}, true
}

func (s *Socket) dropGather(why *atomic.Uint64) {
	s.jumboFree = append(s.jumboFree, uint32(s.gatherBuf))
	s.gatherBuf, s.gatherWhy = -1, why
}

// Release implements datapath.Port.
func (s *Socket) Release(frames []datapath.Frame) {
	for i := range frames {
		if h := frames[i].Handle; h&jumboFlag != 0 {
			s.jumboFree = append(s.jumboFree, uint32(h&^jumboFlag))
		} else {
			s.recycle(h)
		}
		frames[i] = datapath.Frame{}
	}
	s.rxLent -= len(frames)
	s.flushFill()
	if s.fill.needWakeup() && !s.closed {
		kick(s.fd)
	}
}

// reclaim takes finished transmissions off the completion ring.
func (s *Socket) reclaim() {
	n := s.comp.avail(s.comp.size)
	for i := range n {
		addr := s.comp.addrs[(s.comp.cachedCons+i)&s.comp.mask]
		slot := (addr - s.txBase) / (2 * ChunkSize)
		if slot >= uint64(len(s.txPending)) || s.txPending[slot] == 0 {
			continue // not ours: cannot happen unless the kernel misbehaves
		}
		s.txPending[slot]--
		if s.txPending[slot] == 0 {
			s.txFree = append(s.txFree, uint32(slot))
		}
	}
	if n > 0 {
		s.comp.release(n)
	}
}

// Alloc implements datapath.Port.
func (s *Socket) Alloc(frames []datapath.Frame) int {
	if s.closed {
		return 0
	}
	if len(s.txFree) < len(frames) {
		s.reclaim()
	}
	n := min(len(frames), len(s.txFree))
	for i := range n {
		slot := s.txFree[len(s.txFree)-1-i]
		base := s.txBase + uint64(slot)*2*ChunkSize
		frames[i] = datapath.Frame{Data: s.umem[base : base+uint64(s.maxFrame) : base+uint64(s.maxFrame)], Handle: uint64(slot)}
	}
	s.txFree = s.txFree[:len(s.txFree)-n]
	s.txLent += n
	return n
}

// Free implements datapath.Port.
func (s *Socket) Free(frames []datapath.Frame) {
	for i := range frames {
		s.txFree = append(s.txFree, uint32(frames[i].Handle))
		frames[i] = datapath.Frame{}
	}
	s.txLent -= len(frames)
}

// Send implements datapath.Port. It stops early, without error, when the TX
// ring is full; the frames it did not take stay the caller's.
func (s *Socket) Send(frames []datapath.Frame) (int, error) {
	if s.closed {
		return 0, datapath.ErrClosed
	}
	var queued uint32
	var err error
	n := 0
	for ; n < len(frames); n++ {
		l := len(frames[n].Data)
		if l > s.maxFrame || l == 0 {
			s.stats.TxDropTooLong.Add(1)
			err = fmt.Errorf("xsk: frame of %d bytes (at most %d)", l, s.maxFrame)
			break
		}
		descs := uint32(1)
		if l > ChunkSize {
			descs = 2
		}
		if s.tx.free(queued+descs) < queued+descs {
			break
		}
		slot := frames[n].Handle
		base := s.txBase + slot*2*ChunkSize
		first := min(l, ChunkSize)
		d := &s.tx.descs[(s.tx.cachedProd+queued)&s.tx.mask]
		*d = unix.XDPDesc{Addr: base, Len: uint32(first)}
		if descs == 2 {
			d.Options = unix.XDP_PKT_CONTD
			s.tx.descs[(s.tx.cachedProd+queued+1)&s.tx.mask] = unix.XDPDesc{Addr: base + ChunkSize, Len: uint32(l - first)}
		}
		queued += descs
		s.txPending[slot] = uint8(descs)
		s.stats.TxFrames.Add(1)
		s.stats.TxBytes.Add(uint64(l))
	}
	for i := range frames[:n] {
		frames[i] = datapath.Frame{}
	}
	s.txLent -= n
	if queued > 0 {
		s.tx.submit(queued)
		if s.tx.needWakeup() || !s.zeroCopy {
			if kerr := kick(s.fd); kerr != nil && err == nil {
				err = fmt.Errorf("xsk: transmit: %w", kerr)
			}
		}
	}
	s.reclaim()
	return n, err
}

// Kick implements datapath.Kicker: one non-blocking receive call, which
// with SO_BUSY_POLL polls the queue's NAPI context once and, leaving it,
// runs the receive work pending on this CPU. In copy mode a veth's frames
// reach the ring only from that work (a softirq); under CPU starvation it
// can lag the wire by milliseconds, long enough for a retransmission
// timer to fire for a packet whose ACK has arrived.
func (s *Socket) Kick() {
	if !s.closed { // a raw call, as kick's
		unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
}

// Flush pushes queued transmissions to the kernel again and reclaims
// finished ones; an engine calls it when it has nothing else to do.
func (s *Socket) Flush() {
	if s.closed {
		return
	}
	if s.tx.pending() > 0 {
		kick(s.fd)
	}
	s.reclaim()
}

// Wait implements datapath.Port.
func (s *Socket) Wait(timeout time.Duration) error {
	if s.closed {
		return datapath.ErrClosed
	}
	if s.rx.pending() > 0 { // the shared indices only: Recv may run in another goroutine (NIC.Progress)
		return nil
	}
	ts := unix.NsecToTimespec(int64(timeout)) // ppoll: microsecond timeouts, unlike poll
	_, err := unix.Ppoll(s.pollfd[:], &ts, nil)
	if s.pollfd[1].Revents&unix.POLLIN != 0 {
		var b [8]byte
		unix.Read(s.wakefd, b[:])
	}
	if err == unix.EINTR {
		return nil
	}
	return err
}

// Wake implements datapath.Port.
func (s *Socket) Wake() {
	one := [8]byte{1}
	unix.Write(s.wakefd, one[:])
}

// Stats implements datapath.Port. RxDropKernel is refreshed from the
// kernel's own counters for the socket.
func (s *Socket) Stats() *datapath.PortStats {
	if ks, err := s.KernelStats(); err == nil {
		s.stats.RxDropKernel.Store(ks.Rx_dropped + ks.Rx_ring_full + ks.Rx_invalid_descs)
	}
	return &s.stats
}

// KernelStats returns the kernel's counters for the socket.
func (s *Socket) KernelStats() (unix.XDPStatistics, error) { return statistics(s.fd) }

// Accounting checks that no UMEM buffer is lost: every RX chunk is in the
// fill ring, in the RX ring or lent out, and every TX slot is free, lent
// out or in flight. It is exact only while the kernel is idle.
func (s *Socket) Accounting() error {
	s.reclaim()
	inFlight := 0
	for _, p := range s.txPending {
		if p > 0 {
			inFlight++
		}
	}
	jumboLent := len(s.jumbo) - len(s.jumboFree)
	if s.gathering && s.gatherBuf >= 0 {
		jumboLent--
	}
	rxChunks := int(s.fill.pending()+s.fillQueued) + int(s.rx.pending()) + s.rxLent - jumboLent + len(s.rxReserve)
	if rxChunks != int(s.cfg.RxChunks) || len(s.txFree)+s.txLent+inFlight != int(s.cfg.TxSlots) {
		return fmt.Errorf("xsk: buffers lost: RX chunks %d of %d (fill %d, rx %d, lent %d, of which reassembled %d, not yet lent %d); TX slots free %d + lent %d + in flight %d of %d",
			rxChunks, s.cfg.RxChunks, s.fill.pending(), s.rx.pending(), s.rxLent, jumboLent, len(s.rxReserve), len(s.txFree), s.txLent, inFlight, s.cfg.TxSlots)
	}
	return nil
}

// Lent returns how many received frames and transmit buffers the caller
// holds.
func (s *Socket) Lent() (rx, tx int) { return s.rxLent, s.txLent }

// InFlight returns how many transmit buffers the kernel holds.
func (s *Socket) InFlight() int {
	s.reclaim()
	return int(s.cfg.TxSlots) - len(s.txFree) - s.txLent
}

// Close implements datapath.Port.
func (s *Socket) Close() error {
	if s.closed {
		return datapath.ErrClosed
	}
	s.closed = true
	return s.release()
}

func (s *Socket) release() error {
	var err error
	if s.fd >= 0 {
		err = unix.Close(s.fd)
		s.fd = -1
	}
	if s.wakefd >= 0 {
		unix.Close(s.wakefd)
		s.wakefd = -1
	}
	if s.mcastfd >= 0 {
		unix.Close(s.mcastfd)
		s.mcastfd = -1
	}
	for _, r := range []*ring{&s.fill.ring, &s.comp.ring, &s.rx.ring, &s.tx.ring} {
		r.unmap()
	}
	if s.umem != nil {
		unix.Munmap(s.umem)
		s.umem = nil
	}
	return err
}
