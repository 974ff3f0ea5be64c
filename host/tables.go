package host

import (
	"encoding/binary"
	"errors"
	"fmt"
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
// addresses into the MTT.
type Registrar struct {
	mem      *Memory
	mtt      *Table
	pageSize int
	nextMTT  uint64
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

// ErrMTTFull is returned when the MTT has no room for a region's pages.
var ErrMTTFull = errors.New("host: MTT full")

// Register maps buf and writes one MTT entry per page.
func (r *Registrar) Register(buf []byte) (MR, error) {
	pages := (len(buf) + r.pageSize - 1) / r.pageSize
	if r.nextMTT+uint64(pages) > uint64(r.mtt.Count) {
		return MR{}, fmt.Errorf("%w: %d pages wanted, %d left", ErrMTTFull, pages, uint64(r.mtt.Count)-r.nextMTT)
	}
	mr := MR{IOVA: r.mem.Map(buf), Len: len(buf), PageSize: r.pageSize, FirstMTT: r.nextMTT, Pages: pages}
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
	r.nextMTT += uint64(pages)
	return mr, nil
}
