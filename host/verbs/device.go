package verbs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/kernelrx"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// Sentinel errors of the control path.
var (
	ErrNoResources = errors.New("verbs: out of resources")
	ErrInvalid     = errors.New("verbs: invalid argument")
	ErrQueueFull   = errors.New("verbs: work queue full")
	ErrClosed      = errors.New("verbs: device closed")
	ErrBusy        = errors.New("verbs: resource in use")
)

// DeviceConfig sets up a device: the NIC's own configuration (its
// ports, address, table sizes, caches, congestion control and polling;
// see datapath.NICConfig) and what the driver adds around it. The device
// provides the NIC's host memory, DMA engine and completion notices
// itself: NICConfig's Memory, DMA and Notify must be left unset.
type DeviceConfig struct {
	datapath.NICConfig
	// Port is the device's port when it has one queue (NICConfig.Ports,
	// when set, are its queues, one NIC engine each: QP n runs on queue n
	// mod len(Ports)).
	Port     datapath.Port
	PCIe     hostmem.PCIe // DMA model; zero is memory speed
	PageSize int          // MR page size (default 4096)
	// MTU is the netdev MTU the port runs on, in bytes; 0 takes the
	// largest the port's frames carry. The port's active IB MTU follows
	// it, as rdma_rxe's follows its netdev's.
	MTU int
	// Driven, with Poll: datapath.PollApp, starts no goroutine for the
	// NIC's engines: only the application's own calls run it (posts,
	// CQ.Poll, CQ.Wait, NIC.Progress), as a run-to-completion poll-mode
	// driver's thread does, and nothing moves between them (CQ.Sleep and
	// a connection manager's waits never return). For a benchmark that
	// measures the NIC's own work in one thread, with no second thread's
	// turns, and the scheduler's preemptions of it, in the figures.
	Driven bool
}

// Device is a softrnic NIC and the driver state that goes with it.
type Device struct {
	cfg  DeviceConfig
	mem  *hostmem.Memory
	dma  *hostmem.DMA
	nic  *datapath.NIC
	reg  *hostmem.Registrar
	done chan struct{}

	mu                     sync.Mutex
	nextPD, nextMR, nextCQ uint32
	nextQP, nextSRQ        uint32
	cqs                    []atomic.Pointer[CQ] // by number, for completion notices
	freeQPs, freeCQs       []uint32             // numbers destroyed objects gave back, oldest first
	freeMRs, freeSRQs      []uint32             // MPT indexes and SRQ numbers given back
	mrKeys                 []uint8              // per MPT index: the key byte it had last
	qpsInUse, cqsInUse     atomic.Int32
	srqsInUse              atomic.Int32
	mrs                    atomic.Int32
	qps                    []atomic.Pointer[QP] // by QP number, for queue accounting
	gsi                    bool                 // QP1 exists (under mu)
	kernelRx               *kernelrx.Receiver   // DeviceConfig.KernelRx's socket, if it opened
}

// Open starts a device on a port. It gives the Go runtime Ps to spare
// for the NIC's threads asleep in system calls (datapath.SpareProcs),
// unless the environment sets GOMAXPROCS.
func Open(cfg DeviceConfig) (*Device, error) {
	datapath.SpareProcs()
	if cfg.Memory != nil || cfg.DMA != nil || cfg.Notify != nil {
		return nil, fmt.Errorf("%w: NICConfig's Memory, DMA and Notify are the device's own", ErrInvalid)
	}
	if cfg.Driven && cfg.Poll != datapath.PollApp {
		return nil, fmt.Errorf("%w: Driven needs Poll: datapath.PollApp (the application's polling runs the NIC)", ErrInvalid)
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = 4096
	}
	if cfg.MaxQPs == 0 {
		cfg.MaxQPs = 256
	}
	ports := cfg.Ports
	if len(ports) == 0 && cfg.Port != nil {
		ports = []datapath.Port{cfg.Port}
	}
	mem := hostmem.NewMemory()
	if cfg.PCIe.Clock == nil {
		cfg.PCIe.Clock = cfg.Clock // the DMA engine keeps the NIC's time (nil: the system's)
	}
	for _, p := range ports {
		if p != nil && (cfg.MTU == 0 || cfg.MTU > p.MaxFrameLen()-etherHeader) {
			cfg.MTU = p.MaxFrameLen() - etherHeader // no more than the port's frames carry
		}
	}
	if len(ports) > 0 && wire.IBMTU(cfg.MTU) == 0 {
		return nil, fmt.Errorf("%w: a netdev MTU of %d bytes carries no IB MTU (256 needs %d)", ErrInvalid, cfg.MTU, 256+wire.MTUHeaderRoom)
	}
	d := &Device{cfg: cfg, mem: mem, dma: hostmem.NewDMA(mem, cfg.PCIe, 0), done: make(chan struct{}), nextQP: datapath.FirstQPN, nextMR: 1, cqs: make([]atomic.Pointer[CQ], 256)}
	d.qps = make([]atomic.Pointer[QP], datapath.FirstQPN+cfg.MaxQPs)
	ncfg := cfg.NICConfig
	ncfg.Ports, ncfg.Memory, ncfg.DMA, ncfg.Notify = ports, mem, d.dma, d.notify
	nic, err := datapath.NewNIC(ncfg)
	if err != nil {
		return nil, err
	}
	d.nic = nic
	if d.reg, err = hostmem.NewRegistrar(mem, nic.Table(hostmem.MTT), cfg.PageSize); err != nil {
		return nil, err
	}
	word := make([]uint64, 1) // RegMR writes entries in a NIC command, one at a time
	d.reg.WriteEntry = func(idx, iova uint64) error {
		word[0] = iova
		return nic.Cache(hostmem.MTT).HostWrite(idx, word)
	}
	if cfg.KernelRx && cfg.IP.IsValid() {
		d.kernelRx, _ = kernelrx.Start(nic, cfg.IP, cfg.MAC) // best effort (KernelRx says)
	}
	if cfg.Driven {
		close(d.done)
		return d, nil
	}
	go func() {
		defer close(d.done)
		nic.Run()
	}()
	return d, nil
}

// KernelRx reports whether the device has the kernel UDP socket
// DeviceConfig.KernelRx asks for.
func (d *Device) KernelRx() bool { return d.kernelRx != nil }

// WritesPlaced counts the RDMA WRITE messages placed in this device's
// memory by peers. Read a buffer a peer writes only after this count has
// moved: the load orders the placed bytes before the read.
func (d *Device) WritesPlaced() uint64 { return d.nic.WritesPlaced() }

// WaitWritesPlaced blocks until WritesPlaced differs from seen (or ctx
// ends) and returns it.
func (d *Device) WaitWritesPlaced(ctx context.Context, seen uint64) (uint64, error) {
	return d.nic.WaitWritesPlaced(ctx, seen)
}

// etherHeader is the Ethernet header a frame carries beyond the netdev
// MTU.
const etherHeader = 14

// NetdevMTU returns the netdev MTU the device's port runs on.
func (d *Device) NetdevMTU() int { return d.cfg.MTU }

// ActiveMTU returns the port's active MTU as an ibv_mtu enum (1 = 256 …
// 5 = 4096), as ibv_query_port reports it: the largest IB MTU the netdev
// MTU carries. A QP's path MTU may not exceed it.
func (d *Device) ActiveMTU() int { return wire.MTUEnum(wire.IBMTU(d.cfg.MTU)) }

// NIC returns the device's engine, for its counters.
func (d *Device) NIC() *datapath.NIC { return d.nic }

// DMA returns the counters of the device's DMA engine: the transfers and
// bytes between the NIC and host memory.
func (d *Device) DMA() *hostmem.DMAStats { return d.dma.Stats() }

// Close stops the device.
func (d *Device) Close() error {
	if d.kernelRx != nil {
		d.kernelRx.Close()
	}
	d.nic.Close()
	<-d.done
	d.dma.Close()
	return nil
}

// notify is the NIC's completion notice: a CQE was written to CQ cqn.
func (d *Device) notify(cqn uint32) {
	if int(cqn) < len(d.cqs) {
		if cq := d.cqs[cqn].Load(); cq != nil {
			cq.written.Add(1)
			select {
			case cq.wake <- struct{}{}:
			default:
			}
			if f := cq.hook.Load(); f != nil {
				(*f)(cq.lastSolicited())
			}
		}
	}
}

// hostWrite writes a context entry through the NIC's command, keeping the
// cache and host memory in step.
func (d *Device) hostWrite(t hostmem.ContextType, idx uint32, b []byte) error {
	words := make([]uint64, len(b)/8)
	for i := range words {
		words[i] = uint64(b[8*i]) | uint64(b[8*i+1])<<8 | uint64(b[8*i+2])<<16 | uint64(b[8*i+3])<<24 |
			uint64(b[8*i+4])<<32 | uint64(b[8*i+5])<<40 | uint64(b[8*i+6])<<48 | uint64(b[8*i+7])<<56
	}
	var err error
	d.nic.Command(func() { err = d.nic.Cache(t).HostWrite(uint64(idx), words) })
	return err
}

// PD is a protection domain.
type PD struct {
	dev *Device
	num uint32
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextPD++
	return &PD{dev: d, num: d.nextPD}, nil
}

// MR is a registered memory region. Addr is the address remote peers use
// with RKey (the region's IOVA).
type MR struct {
	pd         *PD
	Buf        []byte
	Addr       uint64
	LKey, RKey uint32
	index      uint32
	firstMTT   uint64 // the MTT entry of the region's first page
	reg        hostmem.MR
	dereg      atomic.Bool
}

// RegMR registers buf with the given access rights. The region's address
// (MR.Addr, what SGEs and the peer's requests name) is the IOVA the device
// maps it at.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) { return pd.regMR(buf, 0, false, access) }

// RegMRAt registers buf as RegMR does, at the address iova, as
// ibv_reg_mr_iova2: SGEs and the peer's requests name the region's bytes
// from iova on. A C program's region is registered at its virtual
// address (ibv_reg_mr), whatever its alignment.
func (pd *PD) RegMRAt(buf []byte, iova uint64, access Access) (*MR, error) {
	if iova+uint64(len(buf)) < iova {
		return nil, fmt.Errorf("%w: the region at %#x of %d bytes wraps the address space", ErrInvalid, iova, len(buf))
	}
	return pd.regMR(buf, iova, true, access)
}

func (pd *PD) regMR(buf []byte, iova uint64, at bool, access Access) (*MR, error) {
	d := pd.dev
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty buffer", ErrInvalid)
	}
	mpt := uint32(d.nic.Table(hostmem.MPT).Count)
	d.mu.Lock()
	idx := d.nextMR
	switch {
	case idx < mpt:
		d.nextMR++
	case len(d.freeMRs) > 0: // every index used once: the longest free
		idx, d.freeMRs = d.freeMRs[0], d.freeMRs[1:]
	}
	// The key's low byte is random, as rxe's is, and differs from the one
	// the index had before: a key is not to be guessed from the last one
	// or from the run before, and a peer's key for a deregistered region
	// matches no later one.
	var key uint8
	if idx < mpt {
		if d.mrKeys == nil {
			d.mrKeys = make([]uint8, mpt)
		}
		for key = uint8(rand.Uint32()); key == d.mrKeys[idx]; key = uint8(rand.Uint32()) {
		}
		d.mrKeys[idx] = key
	}
	d.mu.Unlock()
	if idx >= mpt {
		return nil, fmt.Errorf("%w: MPT full", ErrNoResources)
	}
	// Its pages are faulted in now, as ibv_reg_mr pins them, not by the
	// NIC's first DMA into each (hostmem.Pin).
	hostmem.Pin(buf)
	// The MTT entries are written through the NIC's cache, as a command:
	// in step with the engines' reads of the table (and any cached line).
	var reg hostmem.MR
	var err error
	d.nic.Command(func() { reg, err = d.reg.Register(buf) })
	if err != nil {
		d.freeMR(idx)
		return nil, fmt.Errorf("%w: %v", ErrNoResources, err)
	}
	shift := uint8(0)
	for 1<<shift < d.cfg.PageSize {
		shift++
	}
	if !at {
		iova = reg.IOVA
	}
	e := hostmem.MPTEntry{Valid: true, Key: key, Access: access, PD: pd.num, VA: iova, Length: uint64(len(buf)), FirstMTT: reg.FirstMTT, PageShift: shift}
	var b [64]byte
	e.Encode(b[:])
	if err := d.hostWrite(hostmem.MPT, idx, b[:]); err != nil {
		return nil, err
	}
	d.mrs.Add(1)
	k := idx<<8 | uint32(key)
	return &MR{pd: pd, Buf: buf, Addr: iova, LKey: k, RKey: k, index: idx, firstMTT: reg.FirstMTT, reg: reg}, nil
}

func (d *Device) freeMR(idx uint32) {
	d.mu.Lock()
	d.freeMRs = append(d.freeMRs, idx)
	d.mu.Unlock()
}

// Dereg deregisters the region, as ibv_dereg_mr: its keys are invalid
// from then on (a peer's request with them is NAKed, a local work
// request fails), and its MPT index, MTT entries and DMA mapping go back
// to the device for later regions. The buffer is the program's again.
func (mr *MR) Dereg() error {
	d := mr.pd.dev
	if !mr.dereg.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: MR %#x is deregistered", ErrInvalid, mr.LKey)
	}
	var b [64]byte
	(&hostmem.MPTEntry{}).Encode(b[:])
	if err := d.hostWrite(hostmem.MPT, mr.index, b[:]); err != nil {
		return err
	}
	var err error
	d.nic.Command(func() { err = d.reg.Release(mr.reg) })
	d.freeMR(mr.index)
	d.mrs.Add(-1)
	return err
}

// Usage is how much of one of the device's tables is in use.
type Usage struct {
	Name     string // qps, cqs, srqs, mrs, mtt_entries
	InUse    int
	Capacity int
}

// Usage returns the use of the device's fixed tables: QPs (QP1, the
// GSI, aside), CQs, SRQs, memory regions and MTT entries (a registered region
// takes one per page).
func (d *Device) Usage() []Usage {
	mtt, mttCap := d.reg.InUse()
	return []Usage{
		{"qps", int(d.qpsInUse.Load()), d.cfg.MaxQPs},
		{"cqs", int(d.cqsInUse.Load()), len(d.cqs)},
		{"srqs", int(d.srqsInUse.Load()), d.nic.Table(hostmem.SRQC).Count},
		{"mrs", int(d.mrs.Load()), d.nic.Table(hostmem.MPT).Count - 1}, // index 0 is never a region's
		{"mtt_entries", mtt, mttCap},
	}
}

// CQ is a completion queue.
type CQ struct {
	dev      *Device
	num      uint32
	base     uint64
	size     uint32
	ring     []byte
	written  atomic.Uint64 // CQEs the NIC has written
	users    atomic.Int32  // QPs whose send or receive CQ it is (once each)
	consumed uint64
	wake     chan struct{}
	hook     atomic.Pointer[func(bool)] // OnCompletion's
	mu       sync.Mutex
	// gone: the completions before this position of a QP number belong
	// to a destroyed QP, and go unread (under mu).
	gone      map[uint32]uint64
	destroyed bool // under mu
	// linger's odds: the lingers in a row that saw no frame, and the
	// count of polls that skipped one since.
	lingerMiss atomic.Int32
	lingerSkip atomic.Int32
	// lingerQuiet is the NIC's arrivals (datapath.NIC.Arrivals) at this
	// CQ's last missed linger: while they stand still past
	// lingerMissMax misses, the peer sends nothing of its own accord and
	// the CQ does not linger at all.
	lingerQuiet atomic.Uint64
}

// Destroy destroys the CQ, as ibv_destroy_cq does: refused (ErrBusy)
// while a QP has it as its send or receive CQ. The completions in it go,
// and its number goes back to the device for a later CQ. The CQ must not
// be used after.
func (cq *CQ) Destroy() error {
	d := cq.dev
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.destroyed {
		return fmt.Errorf("%w: CQ %d is destroyed", ErrInvalid, cq.num)
	}
	if n := cq.users.Load(); n > 0 {
		return fmt.Errorf("%w: CQ %d is the CQ of %d QPs", ErrBusy, cq.num, n)
	}
	var b [64]byte
	(&hostmem.RingEntry{}).Encode(b[:])
	if err := d.hostWrite(hostmem.CQC, cq.num, b[:]); err != nil {
		return err
	}
	cq.destroyed = true
	d.cqs[cq.num].Store(nil)
	d.cqsInUse.Add(-1)
	d.mem.Unmap(cq.base)
	d.mu.Lock()
	d.freeCQs = append(d.freeCQs, cq.num)
	d.mu.Unlock()
	return nil
}

// forget drops, from now on, the completions the CQ holds of QP qpn (a
// destroyed QP), and forgets the QPs whose dropped completions it has
// read past.
func (cq *CQ) forget(qpn uint32) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	for q, g := range cq.gone {
		if cq.consumed >= g {
			delete(cq.gone, q)
		}
	}
	if w := cq.written.Load(); w > cq.consumed {
		if cq.gone == nil {
			cq.gone = map[uint32]uint64{}
		}
		cq.gone[qpn] = w
	}
}

// WC is a work completion.
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	QPNum   uint32
	SrcQP   uint32
	Flags   WCFlags
	Imm     uint32 // immediate data (host order) or invalidated R_Key
}

// CreateCQ creates a completion queue of at least entries entries.
func (d *Device) CreateCQ(entries int) (*CQ, error) {
	size := uint32(1)
	for size < uint32(entries) {
		size <<= 1
	}
	d.mu.Lock()
	num := d.nextCQ
	switch {
	case int(num) < len(d.cqs):
		d.nextCQ++
	case len(d.freeCQs) > 0: // every number used once: the longest free
		num, d.freeCQs = d.freeCQs[0], d.freeCQs[1:]
	}
	d.mu.Unlock()
	if int(num) >= len(d.cqs) {
		return nil, fmt.Errorf("%w: CQ table full", ErrNoResources)
	}
	base := d.mem.Alloc(int(size) * hostmem.CQESize)
	ring, _ := d.mem.Slice(base, int(size)*hostmem.CQESize)
	cq := &CQ{dev: d, num: num, base: base, size: size, ring: ring, wake: make(chan struct{}, 1)}
	d.cqs[num].Store(cq)
	d.cqsInUse.Add(1)
	e := hostmem.RingEntry{Valid: true, Size: size, Base: base}
	var b [64]byte
	e.Encode(b[:])
	if err := d.hostWrite(hostmem.CQC, num, b[:]); err != nil {
		return nil, err
	}
	return cq, nil
}

// lastSolicited reports whether the CQE the NIC has just written is a
// solicited event: its message asked for one, or it is in error. Called
// on the NIC's engine, right after the CQE reached the ring.
func (cq *CQ) lastSolicited() bool {
	var c hostmem.CQE
	c.Decode(cq.ring[((cq.written.Load()-1)%uint64(cq.size))*hostmem.CQESize:])
	return c.Status != ibv.WCSuccess || c.Flags&ibv.WCSolicited != 0
}

// Num is the CQ's number: its index in the NIC's CQ context table.
func (cq *CQ) Num() uint32 { return cq.num }

// OnCompletion has f called each time a completion reaches the CQ (nil:
// no longer): a completion channel's source. solicited says whether it is
// an event a solicited-only arm waits for (the sender asked for one,
// WCSolicited, or the completion is in error). f runs on the NIC's
// engine and must not block.
func (cq *CQ) OnCompletion(f func(solicited bool)) {
	if f == nil {
		cq.hook.Store(nil)
		return
	}
	cq.hook.Store(&f)
}

// Poll fills wc with completions and returns how many; it never blocks.
// On a device whose NIC the application's polling drives
// (datapath.PollApp), a Poll that finds none runs the NIC's engines for a
// turn and looks again; and a Poll whose last send completion leaves its
// QP with nothing posted lingers (cq.linger) before it returns, unless it
// completed a READ or an atomic.
func (cq *CQ) Poll(wc []WC) int {
	n, idle := cq.poll(wc)
	if !cq.dev.nic.AppDriven() {
		return n
	}
	if n == 0 {
		cq.dev.nic.Progress()
		n, idle = cq.poll(wc)
	} else {
		cq.dev.nic.Driving()
	}
	if idle {
		cq.linger()
	}
	return n
}

// answered reports whether a send completion's operation brought its
// answer with it: a READ's data, an atomic's original value.
func answered(op WCOpcode) bool {
	return op == WCRDMARead || op == WCCompSwap || op == WCFetchAdd
}

// PollNoDrive fills wc as Poll does but never runs the NIC's engines: the
// poll of a program that sleeps on a completion channel between polls,
// whose engines its NIC's own goroutines run (datapath.NIC.Release).
func (cq *CQ) PollNoDrive(wc []WC) int {
	n, _ := cq.poll(wc)
	return n
}

// lingerMisses is how many lingers in a row may see no frame before a CQ
// lingers less often; lingerMissMax, how many it counts at most (then it
// lingers at one poll in 32).
const (
	lingerMisses  = 4
	lingerMissMax = 8
)

// linger runs the NIC on in the caller's thread until the next frame
// comes, for four of the NIC's poll budgets at most
// (datapath.NIC.Linger), when that has paid on this CQ: a program whose QP has nothing more to send
// waits for its peer next, often without a verb call (perftest's
// write_lat spins on its buffer), and the peer's frame is then handled
// in the program's thread, which runs, rather than in the NIC's, which
// the frame must wake (on a machine whose cores spin, a scheduling delay
// of tens of microseconds). A program whose peer stays quiet (it waits
// for this program's next request) makes the lingers miss: after
// lingerMisses misses in a row the CQ lingers only once in 2, 4, ... 32
// such polls, and hands the NIC to its goroutines at the others, and
// after lingerMissMax it does not linger at all until the peer sends of
// its own accord (a WRITE placed, a message received: NIC.Arrivals), as
// a READ test's peer never does, nor hand the NIC over; a hit makes it
// linger every time again.
func (cq *CQ) linger() {
	m := cq.lingerMiss.Load()
	if m >= lingerMissMax && cq.dev.nic.Arrivals() == cq.lingerQuiet.Load() {
		// Misses and no WRITE placed, no message received since: a peer
		// that only answers (a READ test's) sends nothing to linger for,
		// and a linger would cost this poll four budgets. Nor is the NIC
		// handed to its goroutines: such a program polls on for its own
		// next completion, and each hand-over would have the goroutine
		// take a turn beside the program's polls (a third spinning
		// thread on two cores) and sleep on the port, woken by every
		// frame after. One that stops polling gets its NIC back within
		// the goroutines' backoff.
		return
	}
	if m >= lingerMisses && cq.lingerSkip.Add(1)%(1<<(m-lingerMisses+1)) != 0 {
		cq.dev.nic.Release() // the program may poll no more: the NIC's goroutines take the next frame
		return
	}
	switch lingered, hit := cq.dev.nic.Linger(); {
	case hit:
		cq.lingerMiss.Store(0)
	case lingered:
		if m < lingerMissMax {
			cq.lingerMiss.Store(m + 1)
		}
		cq.lingerQuiet.Store(cq.dev.nic.Arrivals())
	}
}

// poll takes completions into wc; idle says that the last send
// completion among them left its QP with no send work posted.
func (cq *CQ) poll(wc []WC) (int, bool) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	written := cq.written.Load()
	n, idle := 0, false
	for n < len(wc) && cq.consumed < written {
		var c hostmem.CQE
		pos := cq.consumed
		c.Decode(cq.ring[(pos%uint64(cq.size))*hostmem.CQESize:])
		cq.consumed++
		recv := c.Opcode&0x80 != 0
		if len(cq.gone) > 0 { // a QP of this CQ was destroyed with completions unread
			if g, ok := cq.gone[c.QPN]; ok && pos < g {
				continue // one of them
			}
		}
		if qp := cq.dev.qp(c.QPN); qp != nil {
			if qp.stale(recv, pos) {
				continue // the work request was discarded by a reset
			}
			qp.consumed(recv, c.WQEIndex) // the NIC has consumed the queue up to this WQE
			if !recv {
				// A READ's or an atomic's completion brings what the
				// program waited for: its peer sends nothing next, so
				// the poll has nothing to linger for (a WRITE's or a
				// SEND's is often answered by the peer's own).
				idle = qp.sqPosted.Load() == qp.sqDone.Load() && !answered(WCOpcode(c.Opcode))
			}
		}
		wc[n] = WC{WRID: c.WRID, Status: WCStatus(c.Status), Opcode: WCOpcode(c.Opcode), ByteLen: c.ByteLen,
			QPNum: c.QPN, SrcQP: c.SrcQP, Flags: WCFlags(c.Flags), Imm: c.Imm}
		n++
	}
	return n, idle
}

// Wait blocks until the CQ has a completion or ctx ends. On a device
// whose NIC the application's polling drives (datapath.PollApp), it
// polls: it runs the NIC's engines until a completion comes.
func (cq *CQ) Wait(ctx context.Context) error {
	if cq.dev.nic.AppDriven() {
		for i := 0; ; i++ {
			if cq.written.Load() > cq.consumedNow() {
				return nil
			}
			if !cq.dev.nic.Progress() && i%datapath.YieldPolls == datapath.YieldPolls-1 {
				if err := ctx.Err(); err != nil {
					return err
				}
				runtime.Gosched()
			}
		}
	}
	for {
		if cq.written.Load() > cq.consumedNow() {
			return nil
		}
		select {
		case <-cq.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Sleep blocks until the CQ has a completion or ctx ends, as Wait does,
// but never runs the NIC's engines: the wait of a goroutine beside the
// application's (a connection manager's), which must not take turns from
// the application's polling. An engine no one polls runs by itself
// (datapath.PollApp).
func (cq *CQ) Sleep(ctx context.Context) error {
	for {
		if cq.written.Load() > cq.consumedNow() {
			return nil
		}
		select {
		case <-cq.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (cq *CQ) consumedNow() uint64 {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.consumed
}

// Fence waits until the NIC has finished the work it has taken in: a
// synchronization point between the application and its NIC, both ways. A
// remote peer's RDMA WRITE (without immediate), READ or atomic reaches
// registered memory with no completion on this device, ordered only by the
// network, which Go's memory model (and its race detector) cannot see:
// call Fence after changing memory a peer will then access, and before
// reading memory a peer has changed.
func (d *Device) Fence() { d.nic.Command(func() {}) }

// qp returns the QP numbered num, or nil.
func (d *Device) qp(num uint32) *QP {
	if num >= uint32(len(d.qps)) {
		return nil
	}
	return d.qps[num].Load()
}
