package hostmem

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// PCIe models the link between the NIC and host memory. The zero value is
// memory speed: every transfer completes at once, in the caller.
type PCIe struct {
	Latency     time.Duration // added to every transfer
	BytesPerSec float64       // link bandwidth; 0 means unlimited
	MaxReads    int           // reads in flight at once; 0 means unlimited
	// Clock times the model (nil: the system's clock); a test that
	// drives it decides when each transfer completes.
	Clock Clock
}

func (p PCIe) instant() bool { return p.Latency == 0 && p.BytesPerSec == 0 }

// Completer receives the completion of an asynchronous read.
type Completer interface {
	// DMADone is called once per ReadAsync, with the tag given to it, after
	// the data is in the destination buffer (err == nil) or not.
	DMADone(tag uint64, err error)
}

// DMAStats count the engine's transactions and bytes in each direction.
type DMAStats struct {
	Reads, ReadBytes, Writes, WriteBytes atomic.Uint64
	Faults                               atomic.Uint64 // accesses outside mapped memory
	// StageFull counts modelled writes that found the staging ring full
	// and were copied into memory of their own (allocated).
	StageFull atomic.Uint64
}

// DMA is the only way the NIC reaches host memory. With a PCIe model,
// transfers are queued in issue order, each with its modelled completion
// time, and carried out by Poll once that time has come, by whoever polls
// (the cache's pipelines, like a NIC polling its DMA completion ring): no
// goroutine of its own, and a read never passes an earlier write. Without a
// model every transfer happens at once, in the caller.
type DMA struct {
	mem   *Memory
	model PCIe
	stats DMAStats

	queued   atomic.Int32 // transfers in the queue, for a lock-free look
	mu       sync.Mutex   // guards the queue and the model's clock
	queue    []dmaOp      // ring of pending transfers
	head, n  int
	epoch    time.Time // the clock's time at the start: dmaOp.at counts from it
	system   bool      // the clock is the SystemClock: now reads the monotonic clock alone
	linkFree int64     // when the link finishes the last queued transfer (ns after epoch)
	readDone []int64   // completion times of the last MaxReads reads (ns after epoch)
	readSeq  int
	closed   bool

	// stage holds the data of queued writes, allocated in issue order and
	// freed in completion order (the same order): [stageHead, stageTail)
	// is in use, wrapping at the end; stageLive counts the writes in it.
	stage                           []byte
	stageHead, stageTail, stageLive int
}

type dmaOp struct {
	at       int64 // when the transfer completes: nanoseconds after the engine's epoch
	addr     uint64
	data     *byte // its buffer (buf): a read's destination, a write's copy of its data
	n        int32 // the buffer's length
	stageEnd int32 // with opStaged: where the buffer ends in the staging ring
	c        Completer
	tag      uint64
	flags    uint8 // opWrite, opFence, opStaged
}

// A queued transfer is one cache line (64 bytes): with many QPs the queue
// is cold between its turns round the ring, and each transfer costs the
// lines it spans.
const (
	opWrite  = 1 << iota
	opFence  // no data: only its completion, in order (Fence)
	opStaged // the buffer is in the staging ring, which ends at stageEnd
)

// maxTransfer is the longest modelled transfer (dmaOp.n).
const maxTransfer = math.MaxInt32

var errTooLong = errors.New("host: DMA transfer over 2 GiB")

// The build fails if a transfer outgrows its line.
var _ [64 - unsafe.Sizeof(dmaOp{})]byte

func (op *dmaOp) buf() []byte { return unsafe.Slice(op.data, op.n) }

func (op *dmaOp) setBuf(b []byte) {
	op.data, op.n = unsafe.SliceData(b), int32(len(b))
}

// ErrDMABusy is returned when the engine's queue is full.
var ErrDMABusy = errors.New("host: DMA queue full")

// NewDMA returns an engine over mem; queue is the number of transfers a
// PCIe model can hold in flight (default 4096).
func NewDMA(mem *Memory, model PCIe, queue int) *DMA {
	if queue == 0 {
		queue = 4096
	}
	if model.Clock == nil {
		model.Clock = SystemClock{}
	}
	_, system := model.Clock.(SystemClock)
	d := &DMA{mem: mem, model: model, epoch: model.Clock.Now(), system: system}
	if !model.instant() {
		d.queue = make([]dmaOp, queue)
		d.stage = make([]byte, stageBytes)
		if model.MaxReads > 0 {
			d.readDone = make([]int64, model.MaxReads)
		}
	}
	return d
}

// Modelled reports whether transfers take modelled time (a PCIe model):
// then a read is answered later, through ReadAsync's completer, and a
// caller that need not wait should not (Read waits).
func (d *DMA) Modelled() bool { return !d.model.instant() }

// Stats returns the engine's counters.
func (d *DMA) Stats() *DMAStats { return &d.stats }

// Memory returns the address space the engine reaches.
func (d *DMA) Memory() *Memory { return d.mem }

// Read copies len(dst) bytes at addr into dst and waits for them.
func (d *DMA) Read(addr uint64, dst []byte) error {
	if d.model.instant() {
		return d.copy(false, addr, dst)
	}
	var w waiter
	if err := d.ReadAsync(addr, dst, &w, 0); err != nil {
		return err
	}
	for !w.done {
		if d.Poll() == 0 && !d.Pass() && d.nextDue() > spinWait {
			runtime.Gosched()
		}
	}
	return w.err
}

// spinWait is the longest wait for a modelled transfer that a
// synchronous caller spins through rather than yielding: a host read
// stalls its caller as a PCIe read stalls a core, and a yield costs more
// than a microsecond's transfer (two thread switches for an engine's
// goroutine, which is locked to its thread).
const spinWait = 20 * time.Microsecond

// nextDue is how long until the first queued transfer completes.
func (d *DMA) nextDue() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == 0 {
		return 0
	}
	return d.atTime(d.queue[d.head].at).Sub(d.model.Clock.Now())
}

// Pass lets time pass for a caller that waits for a transfer (a blocking
// read, a context fetch waited for): on a driven clock it moves the clock
// to the first queued transfer's completion and reports true, so that in
// a test a wait takes the time it waits for; on the system's clock it
// does nothing and reports false.
func (d *DMA) Pass() bool {
	c, ok := d.model.Clock.(interface{ WaitUntil(time.Time) })
	if !ok {
		return false
	}
	d.mu.Lock()
	var at time.Time
	if d.n > 0 {
		at = d.atTime(d.queue[d.head].at)
	}
	d.mu.Unlock()
	c.WaitUntil(at)
	return true
}

type waiter struct {
	done bool
	err  error
}

func (w *waiter) DMADone(_ uint64, err error) { w.done, w.err = true, err }

// ReadAsync copies len(dst) bytes at addr into dst and then calls
// c.DMADone(tag, err): at once without a PCIe model, else from the Poll
// that finds the modelled transfer complete.
func (d *DMA) ReadAsync(addr uint64, dst []byte, c Completer, tag uint64) error {
	if d.model.instant() {
		c.DMADone(tag, d.copy(false, addr, dst))
		return nil
	}
	if len(dst) > maxTransfer {
		return errTooLong
	}
	op := dmaOp{addr: addr, c: c, tag: tag}
	op.setBuf(dst)
	return d.enqueue(op, nil)
}

// Fence calls c.DMADone(tag, nil) once every transfer issued before it
// has been carried out: at once without a PCIe model. It moves no data:
// it is how a NIC tells the host that what it wrote is there without
// waiting for the writes itself.
func (d *DMA) Fence(c Completer, tag uint64) error {
	if d.model.instant() {
		c.DMADone(tag, nil)
		return nil
	}
	return d.enqueue(dmaOp{flags: opFence, c: c, tag: tag}, nil)
}

// Write posts a write of src to addr: it is applied before any transfer
// issued after it. src must not change until then; with a PCIe model the
// engine copies it first, so the caller may reuse it at once.
func (d *DMA) Write(addr uint64, src []byte) error {
	if d.model.instant() {
		return d.copy(true, addr, src)
	}
	if _, err := d.mem.Slice(addr, len(src)); err != nil {
		d.stats.Faults.Add(1)
		return err
	}
	if len(src) > maxTransfer {
		return errTooLong
	}
	return d.enqueue(dmaOp{flags: opWrite, addr: addr}, src)
}

// stageBytes is the size of a modelled engine's staging ring for the data
// of queued writes: a millisecond of a 32 Gbit/s link.
const stageBytes = 4 << 20

// stageAlloc reserves n bytes of the staging ring, under d.mu; it
// reports false when they do not fit.
func (d *DMA) stageAlloc(n int) (off int, ok bool) {
	if d.stageLive == 0 {
		d.stageHead, d.stageTail = 0, 0
	}
	switch {
	case d.stageTail >= d.stageHead && len(d.stage)-d.stageTail >= n:
		off = d.stageTail
	case d.stageTail >= d.stageHead && n < d.stageHead:
		off = 0 // wrap: the end's spare bytes are freed with the write before
	case d.stageTail < d.stageHead && d.stageHead-d.stageTail > n:
		off = d.stageTail
	default:
		return 0, false
	}
	d.stageTail = off + n
	d.stageLive++
	return off, true
}

func (d *DMA) copy(write bool, addr uint64, buf []byte) error {
	mem, err := d.mem.Slice(addr, len(buf))
	if err != nil {
		d.stats.Faults.Add(1)
		return err
	}
	if write {
		copy(mem, buf)
		d.stats.Writes.Add(1)
		d.stats.WriteBytes.Add(uint64(len(buf)))
	} else {
		copy(buf, mem)
		d.stats.Reads.Add(1)
		d.stats.ReadBytes.Add(uint64(len(buf)))
	}
	return nil
}

// enqueue schedules a transfer on the modelled link; a write's data is
// src, copied here (src does not escape: the caller's buffer may be on its
// stack).
func (d *DMA) enqueue(op dmaOp, src []byte) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errors.New("host: DMA engine closed")
	}
	if d.n == len(d.queue) {
		d.mu.Unlock()
		return ErrDMABusy
	}
	write := op.flags&opWrite != 0
	if write {
		// The caller may reuse src at once: keep a copy until it is applied.
		if off, ok := d.stageAlloc(len(src)); ok {
			n := len(src)
			dst := d.stage[off : off+n : off+n]
			copy(dst, src)
			op.setBuf(dst)
			op.flags |= opStaged
			op.stageEnd = int32(off + n)
		} else {
			d.stats.StageFull.Add(1)
			op.setBuf(append([]byte(nil), src...))
		}
	}
	start := max(d.now(), d.linkFree)
	if !write && len(d.readDone) > 0 {
		start = max(start, d.readDone[d.readSeq%len(d.readDone)]) // no more than MaxReads reads in flight
	}
	var xfer int64
	if d.model.BytesPerSec > 0 {
		xfer = int64(float64(op.n) / d.model.BytesPerSec * float64(time.Second))
	}
	d.linkFree = start + xfer
	at := start + xfer + int64(d.model.Latency)
	op.at = at
	if !write && len(d.readDone) > 0 {
		d.readDone[d.readSeq%len(d.readDone)] = at
		d.readSeq++
	}
	d.queue[(d.head+d.n)%len(d.queue)] = op
	d.n++
	d.queued.Add(1)
	d.mu.Unlock()
	return nil
}

// Poll carries out, in issue order, every queued transfer whose modelled
// completion time has come, then calls the completers of the reads among
// them. It returns how many transfers it carried out.
func (d *DMA) Poll() int {
	if d.queued.Load() == 0 {
		return 0
	}
	d.mu.Lock()
	now := d.now()
	if d.n == 0 || d.queue[d.head].at > now {
		d.mu.Unlock()
		return 0 // nothing due yet: the common case of a poller waiting
	}
	d.mu.Unlock()
	var done [16]dmaOp
	var errs [16]error
	total := 0
	for first := true; ; first = false {
		k := 0
		d.mu.Lock()
		if d.n > 0 {
			if !first { // the first round goes by the clock read above
				now = d.now()
			}
			for k < len(done) && d.n > 0 && d.queue[d.head].at <= now {
				op := d.queue[d.head]
				d.queue[d.head] = dmaOp{}
				d.head = (d.head + 1) % len(d.queue)
				d.n--
				d.queued.Add(-1)
				errs[k] = nil
				if op.flags&opFence == 0 {
					errs[k] = d.copy(op.flags&opWrite != 0, op.addr, op.buf()) // under the lock: in order
				}
				if op.flags&opStaged != 0 {
					d.stageHead = int(op.stageEnd)
					d.stageLive--
				}
				done[k] = op
				k++
			}
		}
		d.mu.Unlock()
		for i := range done[:k] {
			if done[i].c != nil {
				done[i].c.DMADone(done[i].tag, errs[i])
			}
			done[i], errs[i] = dmaOp{}, nil
		}
		total += k
		if k < len(done) {
			return total
		}
	}
}

// now is the clock's time in nanoseconds after the epoch: with the
// SystemClock one monotonic clock read (time.Since), not a time.Time
// built and subtracted.
func (d *DMA) now() int64 {
	if d.system {
		return int64(time.Since(d.epoch))
	}
	return int64(d.model.Clock.Now().Sub(d.epoch))
}

// atTime is the clock's time of a transfer's completion.
func (d *DMA) atTime(at int64) time.Time { return d.epoch.Add(time.Duration(at)) }

// Busy reports whether transfers are queued, not yet carried out: a
// poller that sleeps now leaves them (and the cache fetches they carry)
// waiting until it wakes.
func (d *DMA) Busy() bool { return d.queued.Load() > 0 }

// Close refuses further transfers.
func (d *DMA) Close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
}

// Quiesce polls until every transfer queued so far has been carried out.
func (d *DMA) Quiesce() {
	for {
		d.Poll()
		d.mu.Lock()
		n := d.n
		d.mu.Unlock()
		if n == 0 {
			return
		}
		if !d.Pass() {
			runtime.Gosched()
		}
	}
}
