package ctxcache

import (
	"encoding/binary"
	"fmt"

	"github.com/softrnic/softrnic/host/hostmem"
)

// Adapter is the only part of the cache that knows a context type: where
// the entries live in host memory, how big they are, and how many make a
// cache line.
type Adapter struct {
	Table          *hostmem.Table
	EntriesPerLine int // 1 for most types; 8 for the MTT
}

// NewAdapter returns the adapter for a table with the default line size:
// 8 entries per line for the MTT, 1 for the others.
func NewAdapter(t *hostmem.Table) Adapter {
	a := Adapter{Table: t, EntriesPerLine: 1}
	if t.Type == hostmem.MTT {
		a.EntriesPerLine = 8
	}
	return a
}

func (a Adapter) check() error {
	if a.Table == nil || a.EntriesPerLine < 1 || a.Table.EntrySize%8 != 0 || a.Table.EntrySize == 0 {
		return fmt.Errorf("ctxcache: adapter needs a table with entries a multiple of 8 bytes and at least one entry per line")
	}
	return nil
}

func (a Adapter) entryWords() int { return a.Table.EntrySize / 8 }
func (a Adapter) lineWords() int  { return a.entryWords() * a.EntriesPerLine }
func (a Adapter) lineBytes() int  { return a.Table.EntrySize * a.EntriesPerLine }

// line returns the line holding entry idx and the entry's word offset in it.
func (a Adapter) line(idx uint64) (uint64, int) {
	if a.EntriesPerLine == 1 {
		return idx, 0
	}
	per := uint64(a.EntriesPerLine)
	return idx / per, int(idx%per) * a.entryWords()
}

// lineAddr returns the host address of a line, which may run past the end
// of the table's last entry only if the table's count is not a multiple of
// the line size (then the fetch is shortened).
func (a Adapter) lineAddr(line uint64) (uint64, int) {
	first := line * uint64(a.EntriesPerLine)
	n := min(uint64(a.EntriesPerLine), uint64(a.Table.Count)-first)
	return a.Table.Base + first*uint64(a.Table.EntrySize), int(n) * a.Table.EntrySize
}

// wordsFromBytes and bytesFromWords convert between host memory (little-
// endian) and cached words.
func wordsFromBytes(dst []uint64, src []byte) {
	for i := range dst {
		if 8*i+8 <= len(src) {
			dst[i] = binary.LittleEndian.Uint64(src[8*i:])
		} else {
			dst[i] = 0
		}
	}
}

func bytesFromWords(dst []byte, src []uint64) {
	for i := range src {
		if 8*i+8 <= len(dst) {
			binary.LittleEndian.PutUint64(dst[8*i:], src[i])
		}
	}
}
