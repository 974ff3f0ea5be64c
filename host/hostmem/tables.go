package hostmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
)

// ContextType names one of the NIC's context tables.
type ContextType int

// The context tables.
const (
	QPC  ContextType = iota // queue pair contexts, by QP number
	CQC                     // completion queue contexts, by CQ number
	SRQC                    // shared receive queue contexts, by SRQ number
	MPT                     // memory protection entries, by key >> 8
	MTT                     // memory translation entries: one page address each
	NumContextTypes
)

var contextNames = [NumContextTypes]string{"QPC", "CQC", "SRQC", "MPT", "MTT"}

func (t ContextType) String() string {
	if t < 0 || t >= NumContextTypes {
		return fmt.Sprintf("ContextType(%d)", int(t))
	}
	return contextNames[t]
}

// EntrySizes are the default entry sizes of the tables, in bytes.
var EntrySizes = [NumContextTypes]int{QPC: 128, CQC: 64, SRQC: 64, MPT: 64, MTT: 8}

// Table is a context table: an array of fixed-size entries in host memory,
// entry i at Base + i*EntrySize.
type Table struct {
	Type      ContextType
	Base      uint64
	EntrySize int
	Count     int
	mem       *Memory
}

// NewTable allocates a zeroed table in mem.
func NewTable(mem *Memory, t ContextType, entrySize, count int) *Table {
	return &Table{Type: t, Base: mem.Alloc(entrySize * count), EntrySize: entrySize, Count: count, mem: mem}
}

// ErrIndex is returned for an index beyond a table.
var ErrIndex = errors.New("host: context index out of range")

// Addr returns the host address of entry i.
func (t *Table) Addr(i uint64) (uint64, error) {
	if i >= uint64(t.Count) {
		return 0, fmt.Errorf("%w: %v %d of %d", ErrIndex, t.Type, i, t.Count)
	}
	return t.Base + i*uint64(t.EntrySize), nil
}

// Entry returns entry i in host memory, for the host side (the driver) to
// read or write directly; the NIC side goes through the DMA engine.
func (t *Table) Entry(i uint64) ([]byte, error) {
	addr, err := t.Addr(i)
	if err != nil {
		return nil, err
	}
	return t.mem.Slice(addr, t.EntrySize)
}

// MR is a registered memory region: a buffer mapped for DMA, described to
// the NIC by a run of MTT entries, one per page.
type MR struct {
	IOVA     uint64 // where the buffer is mapped
	Len      int
	PageSize int
	FirstMTT uint64 // index of the MTT entry of the first page
	Pages    int
}

// Registrar registers memory: it maps buffers and writes their page
// addresses into the MTT, and releases both again. A region takes a run
// of consecutive MTT entries: the first run among the released ones long
// enough (first fit), or else entries never used.
type Registrar struct {
	mem      *Memory
	mtt      *Table
	pageSize int
	nextMTT  uint64     // entries from here on were never used
	free     []mttRange // released runs below nextMTT, by start, none touching
	inUse    atomic.Int64
	// WriteEntry, if set, writes MTT entry idx (a page's IOVA) instead of
	// a store into host memory: the NIC's context cache does it, in step
	// with its reads and any cached copy.
	WriteEntry func(idx, iova uint64) error
}

// NewRegistrar registers memory into mtt with the given page size (a power
// of two).
func NewRegistrar(mem *Memory, mtt *Table, pageSize int) (*Registrar, error) {
	if pageSize <= 0 || pageSize&(pageSize-1) != 0 || mtt.EntrySize != 8 {
		return nil, fmt.Errorf("host: page size %d and MTT entry size %d: want a power of two and 8", pageSize, mtt.EntrySize)
	}
	return &Registrar{mem: mem, mtt: mtt, pageSize: pageSize}, nil
}

// mttRange is a run of MTT entries.
type mttRange struct{ start, n uint64 }

// ErrMTTFull is returned when the MTT has no room for a region's pages.
var ErrMTTFull = errors.New("host: MTT full")

// alloc takes a run of n entries.
func (r *Registrar) alloc(n uint64) (uint64, bool) {
	for i, f := range r.free {
		if f.n >= n {
			if f.n == n {
				r.free = append(r.free[:i], r.free[i+1:]...)
			} else {
				r.free[i] = mttRange{f.start + n, f.n - n}
			}
			return f.start, true
		}
	}
	if r.nextMTT+n > uint64(r.mtt.Count) {
		return 0, false
	}
	r.nextMTT += n
	return r.nextMTT - n, true
}

// Register maps buf and writes one MTT entry per page.
func (r *Registrar) Register(buf []byte) (MR, error) {
	pages := (len(buf) + r.pageSize - 1) / r.pageSize
	first, ok := r.alloc(uint64(pages))
	if !ok {
		return MR{}, fmt.Errorf("%w: %d pages wanted, %d of %d entries free", ErrMTTFull, pages, int64(r.mtt.Count)-r.inUse.Load(), r.mtt.Count)
	}
	r.inUse.Add(int64(pages))
	mr := MR{IOVA: r.mem.Map(buf), Len: len(buf), PageSize: r.pageSize, FirstMTT: first, Pages: pages}
	for p := range pages {
		idx, iova := mr.FirstMTT+uint64(p), mr.IOVA+uint64(p*r.pageSize)
		if r.WriteEntry != nil {
			if err := r.WriteEntry(idx, iova); err != nil {
				return MR{}, err
			}
			continue
		}
		e, err := r.mtt.Entry(idx)
		if err != nil {
			return MR{}, err
		}
		binary.LittleEndian.PutUint64(e, iova)
	}
	return mr, nil
}

// Release unmaps a region Register returned and gives its MTT entries
// back (the NIC must no longer use them: its MPT entry is invalid).
func (r *Registrar) Release(mr MR) error {
	if err := r.mem.Unmap(mr.IOVA); err != nil {
		return err
	}
	r.inUse.Add(-int64(mr.Pages))
	g := mttRange{mr.FirstMTT, uint64(mr.Pages)}
	i := 0
	for i < len(r.free) && r.free[i].start < g.start {
		i++
	}
	if i > 0 && r.free[i-1].start+r.free[i-1].n == g.start { // joins the run before
		i--
		g = mttRange{r.free[i].start, r.free[i].n + g.n}
		r.free = append(r.free[:i], r.free[i+1:]...)
	}
	if i < len(r.free) && g.start+g.n == r.free[i].start { // and the one after
		g.n += r.free[i].n
		r.free = append(r.free[:i], r.free[i+1:]...)
	}
	if g.start+g.n == r.nextMTT { // the never-used entries grow back
		r.nextMTT = g.start
		return nil
	}
	r.free = append(r.free[:i], append([]mttRange{g}, r.free[i:]...)...)
	return nil
}

// InUse returns the MTT entries registered regions hold, and the table's
// size.
func (r *Registrar) InUse() (entries, capacity int) { return int(r.inUse.Load()), r.mtt.Count }
