package datapath

import (
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/ctxcache"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
)

// NICConfig sets up a NIC: its port, its address on the network, and the
// fixed capacity of every resource.
type NICConfig struct {
	Port   Port
	MAC    wire.MAC
	IP     netip.Addr // IPv4 or IPv6; the source of every frame
	Memory *host.Memory
	DMA    *host.DMA

	MaxQPs, MaxCQs, MaxSRQs, MaxMRs, MaxMTT int // table sizes (defaults 256, 256, 64, 1024, 65536)
	Cache                                   ctxcache.Config
	// Notify is called after a CQE has reached host memory, with the CQ's
	// number: the completion event a driver waits on.
	Notify func(cqn uint32)
}

// Counters are the NIC's counters, named as rdma_rxe names its hardware
// counters.
type Counters struct {
	SentPkts, RcvdPkts         atomic.Uint64
	DuplicateRequest           atomic.Uint64
	OutOfSeqRequest            atomic.Uint64
	RcvdSeqErr                 atomic.Uint64
	SendErr                    atomic.Uint64
	RdmaSends, RdmaRecvs       atomic.Uint64
	RcvdBadICRC, RcvdMalformed atomic.Uint64 // frames Parse refused
	RcvdUnknownQP              atomic.Uint64
	RcvdRNRErr, SendRNRErr     atomic.Uint64
	RetryExceededErr           atomic.Uint64
	RetryRNRExceededErr        atomic.Uint64
	Retransmits                atomic.Uint64 // go-back-N restarts (timeouts and NAKs)
	Parked, ParkDropped        atomic.Uint64 // packets set aside for a QP context miss, and dropped for lack of room
	RcvdBadResponse            atomic.Uint64 // READ responses whose length or opcode does not fit their place, dropped
	SendWaits                  atomic.Uint64 // times a requester stopped for a context miss while other QPs went on
}

// Doorbell tells the NIC that a QP's send queue (or, with Recv, its
// receive queue) producer index moved.
type Doorbell struct {
	QPN      uint32 // or, with SRQ, the SRQ number
	Producer uint32
	Recv     bool
	SRQ      bool
}

// NIC is a softrnic engine on one port. Its contexts live in host memory,
// in the tables Tables returns, and are reached through one GCCache per
// context type; host memory is reached only through the DMA engine. One
// goroutine (Run) owns the port and runs the requester, responder and
// completer for every QP.
type NIC struct {
	cfg       NICConfig
	tables    [host.NumContextTypes]*host.Table
	caches    [host.NumContextTypes]*ctxcache.GCCache
	doorbells chan Doorbell // send queues
	recvBells chan Doorbell // receive queues and SRQs: the responder may drain them mid-batch
	cmds      chan func()
	counters  Counters
	qps       []qpRun  // running state of each QP, as an RNIC keeps it on chip
	srqs      []srqRun // and of each SRQ
	words     [32]uint64
	entry     [256]byte
	wqe       [host.SendWQESize]byte
	payload   []byte                         // staging for one packet's payload
	timers    []uint32                       // QPs with a retransmission timer running
	parkPool  *Pool                          // parked packets' copies
	parkPID   [host.NumContextTypes][]uint32 // cache ticket -> QP number + 1 of the QP parked on it
	ready     []uint32                       // parked QPs whose context has come
	sqReady   []uint32                       // QPs whose requester's context has come
	readers   []uint32                       // QPs answering a READ
	tx        []Frame                        // frames encoded, not yet handed to the port
	txN       int
	lastTick  time.Time

	sleeping atomic.Bool // the engine is (about to be) asleep in Port.Wait
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// NewNIC builds the NIC's tables and caches. Call Run to start it.
func NewNIC(cfg NICConfig) (*NIC, error) {
	if cfg.Port == nil || cfg.Memory == nil || cfg.DMA == nil || !cfg.IP.IsValid() {
		return nil, errors.New("datapath: a NIC needs a port, host memory, a DMA engine and an IP address")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MaxQPs, 256)
	def(&cfg.MaxCQs, 256)
	def(&cfg.MaxSRQs, 64)
	def(&cfg.MaxMRs, 1024)
	def(&cfg.MaxMTT, 65536)
	n := &NIC{cfg: cfg, doorbells: make(chan Doorbell, 4096), recvBells: make(chan Doorbell, 4096), cmds: make(chan func(), 16), qps: make([]qpRun, cfg.MaxQPs), srqs: make([]srqRun, cfg.MaxSRQs), payload: make([]byte, 4096), tx: make([]Frame, 64), stop: make(chan struct{}), done: make(chan struct{})}
	counts := [host.NumContextTypes]int{host.QPC: cfg.MaxQPs, host.CQC: cfg.MaxCQs, host.SRQC: cfg.MaxSRQs, host.MPT: cfg.MaxMRs, host.MTT: cfg.MaxMTT}
	pids := cfg.Cache.PIDs
	if pids == 0 {
		pids = 256
	}
	n.parkPool = NewPool(parkBuffers, 9216)
	for _, t := range parkTypes {
		n.parkPID[t] = make([]uint32, pids)
	}
	n.ready = make([]uint32, 0, cfg.MaxQPs)
	n.sqReady = make([]uint32, 0, cfg.MaxQPs)
	for t := range host.NumContextTypes {
		n.tables[t] = host.NewTable(cfg.Memory, t, host.EntrySizes[t], counts[t])
		c, err := ctxcache.New(ctxcache.NewAdapter(n.tables[t]), cfg.DMA, cfg.Cache)
		if err != nil {
			return nil, err
		}
		n.caches[t] = c
	}
	return n, nil
}

// Table returns the host-memory table of a context type.
func (n *NIC) Table(t host.ContextType) *host.Table { return n.tables[t] }

// Cache returns the context cache of a type, for host commands (HostWrite,
// Invalidate) and counters.
func (n *NIC) Cache(t host.ContextType) *ctxcache.GCCache { return n.caches[t] }

// Counters returns the NIC's counters.
func (n *NIC) Counters() *Counters { return &n.counters }

// Ring queues a doorbell, waking the engine if it sleeps on its port; it
// blocks only if the NIC is that far behind.
func (n *NIC) Ring(d Doorbell) {
	if d.Recv || d.SRQ {
		n.recvBells <- d
	} else {
		n.doorbells <- d
	}
	if n.sleeping.Load() {
		n.cfg.Port.Wake()
	}
}

// QPErrored reports whether the NIC has moved a QP to the error state
// (after an error completion).
func (n *NIC) QPErrored(qpn uint32) bool {
	var e bool
	n.Command(func() { e = qpn < uint32(len(n.qps)) && n.qps[qpn].errored })
	return e
}

// ResetQP clears the NIC's running state of a QP (modify to RESET).
func (n *NIC) ResetQP(qpn uint32) {
	n.Command(func() { n.qps[qpn] = qpRun{} })
}

// Command runs fn on the NIC's goroutine and waits for it: the way the
// host changes what the engine owns.
func (n *NIC) Command(fn func()) {
	done := make(chan struct{})
	n.cmds <- func() { fn(); close(done) }
	if n.sleeping.Load() {
		n.cfg.Port.Wake()
	}
	<-done
}

// Run is the engine's loop; it returns when Close is called.
func (n *NIC) Run() {
	runtime.LockOSThread()
	defer close(n.done)
	frames := make([]Frame, 32)
	for {
		select {
		case <-n.stop:
			return
		default:
		}
		busy := n.doorbellsDue()
		k, err := n.cfg.Port.Recv(frames)
		if err != nil {
			return
		}
		for i := range frames[:k] {
			n.receive(&frames[i])
		}
		n.cfg.Port.Release(frames[:k])
		n.unparkReady()
		if len(n.readers) > 0 {
			n.pumpReads()
			busy = true
		}
		n.flushTX()
		if f, ok := n.cfg.Port.(interface{ Flush() }); ok {
			f.Flush()
		}
		if len(n.timers) > 0 {
			if now := time.Now(); now.Sub(n.lastTick) > 200*time.Microsecond {
				n.lastTick = now
				n.expire(now)
				n.flushTX()
			}
		}
		if !busy && k == 0 {
			// Sleep on the port until a frame, a doorbell (Wake) or the
			// timers' next tick.
			n.sleeping.Store(true)
			if len(n.doorbells) == 0 && len(n.recvBells) == 0 && len(n.cmds) == 0 {
				n.cfg.Port.Wait(time.Millisecond)
			}
			n.sleeping.Store(false)
		}
	}
}

// recvBellsDue takes in the receive doorbells rung so far.
func (n *NIC) recvBellsDue() bool {
	for served := false; ; served = true {
		select {
		case d := <-n.recvBells:
			switch {
			case d.SRQ && d.QPN < uint32(len(n.srqs)):
				n.srqs[d.QPN].producer = d.Producer
			case !d.SRQ && d.QPN < uint32(len(n.qps)):
				n.qps[d.QPN].rqProducer = d.Producer
			}
		default:
			return served
		}
	}
}

// doorbellsDue serves the doorbells rung so far.
func (n *NIC) doorbellsDue() bool {
	served := n.recvBellsDue()
	for {
		select {
		case fn := <-n.cmds:
			served = true
			fn()
		case d := <-n.doorbells:
			served = true
			if d.QPN < uint32(len(n.qps)) {
				n.qps[d.QPN].sqProducer = d.Producer
				n.request(d.QPN)
			}
		default:
			return served
		}
	}
}

// Close stops the engine.
func (n *NIC) Close() {
	n.stopOnce.Do(func() { close(n.stop); n.cfg.Port.Wake() })
	<-n.done
}
