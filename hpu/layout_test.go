package hpu

import (
	"testing"
	"unsafe"
)

// Fields written by one side (the submitting NIC engine, or the HPUs) at
// every packet sit at least a cache line away from the fields the other
// side reads or writes at every packet, whatever the alignment the
// allocator gives their struct: a shared line moves between the
// processors at each write (the scheduler ran at 0.93 Mpps with the
// engine's slice headers beside the packet counter, 1.35 without).
func TestFalseSharing(t *testing.T) {
	var e Engine
	var c cluster
	var in Installed
	var r ring
	var m msgState
	cases := []struct {
		name   string
		lo, hi uintptr // offsets in one struct
		loSize uintptr
	}{
		{"Engine: slice headers / Stats.Packets", unsafe.Offsetof(e.clusters), unsafe.Offsetof(e.Stats) + unsafe.Offsetof(e.Stats.Packets), unsafe.Sizeof(e.clusters)},
		{"Stats: submitter's / HPUs' counters", unsafe.Offsetof(e.Stats.Spills), unsafe.Offsetof(e.Stats.Messages), 8},
		{"Stats.Aborted / shards", unsafe.Offsetof(e.Stats) + unsafe.Offsetof(e.Stats.Aborted), unsafe.Offsetof(e.shards), 8},
		{"Engine: submitting / spinners", unsafe.Offsetof(e.submitting), unsafe.Offsetof(e.spinners), 4},
		{"Engine: read-only fields / submitting", unsafe.Offsetof(e.wg), unsafe.Offsetof(e.closed), unsafe.Sizeof(e.wg)},
		{"cluster: read-only fields / sleepers", unsafe.Offsetof(c.scratch), unsafe.Offsetof(c.sleepers), unsafe.Sizeof(c.scratch)},
		{"cluster: sleepers / SpillsIn", unsafe.Offsetof(c.sleepers), unsafe.Offsetof(c.stats) + unsafe.Offsetof(c.stats.SpillsIn), 4},
		{"ClusterStats: SpillsIn / Tasks", unsafe.Offsetof(c.stats.SpillsIn), unsafe.Offsetof(c.stats.Tasks), 8},
		{"cluster: BusyNs / the next cluster", unsafe.Offsetof(c.stats) + unsafe.Offsetof(c.stats.BusyNs), unsafe.Sizeof(c), 8},
		{"Installed: mem / Stats.Packets", unsafe.Offsetof(in.mem), unsafe.Offsetof(in.Stats) + unsafe.Offsetof(in.Stats.Packets), unsafe.Sizeof(in.mem)},
		{"ContextStats: Packets / Messages", unsafe.Offsetof(in.Stats.Packets), unsafe.Offsetof(in.Stats.Messages), 8},
		{"ContextStats: Sends / the end", unsafe.Offsetof(in.Stats.Sends), unsafe.Sizeof(in.Stats), 8},
		{"msgState: first packet's / submitter's", unsafe.Offsetof(m.indexed), unsafe.Offsetof(m.home), 1},
		{"msgState: submitter's / HPUs'", unsafe.Offsetof(m.lastSeen), unsafe.Offsetof(m.refs), 1},
		{"msgState: HPUs' / the next entry", unsafe.Offsetof(m.waitHead), unsafe.Sizeof(m), 4},
		{"ring: mask / tail", unsafe.Offsetof(r.mask), unsafe.Offsetof(r.tail), 4},
		{"ring: tail / head", unsafe.Offsetof(r.tail), unsafe.Offsetof(r.head), 4},
		{"ring: head / the end", unsafe.Offsetof(r.head), unsafe.Sizeof(r), 4},
	}
	for _, c := range cases {
		if gap := c.hi - (c.lo + c.loSize); c.hi < c.lo+c.loSize || gap < 64 {
			t.Errorf("%s: %d bytes apart (at %d and %d), want a cache line (64)", c.name, int(c.hi)-int(c.lo+c.loSize), c.lo, c.hi)
		}
	}
}

// TestShardIsOneLine: the message index's shards, locked by the
// submitters and the HPUs, each fill one cache line.
func TestShardIsOneLine(t *testing.T) {
	if n := unsafe.Sizeof(msgShard{}); n != 64 {
		t.Fatalf("a shard is %d bytes, want 64", n)
	}
}

// TestSlotIsHalfALine: Submit hands a packet to an HPU in one slot, half
// a cache line: two packets' slots move between the processors as one.
func TestSlotIsHalfALine(t *testing.T) {
	if n := unsafe.Sizeof(slot{}); n != 32 {
		t.Fatalf("a slot is %d bytes, want 32", n)
	}
}
