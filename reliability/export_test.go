package reliability

import (
	"sort"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
)

// Disjoint reports whether no two allocations share an entry.
func Disjoint(as []Allocation) bool {
	s := append([]Allocation(nil), as...)
	sort.Slice(s, func(i, j int) bool { return s[i].off < s[j].off })
	for i := 1; i < len(s); i++ {
		if s[i-1].off+len(s[i-1].entries) > s[i].off {
			return false
		}
	}
	return true
}

// LargestFree is the longest run of entries no allocation in as holds.
func LargestFree(capacity int, as []Allocation) int {
	used := make([]bool, capacity)
	for _, a := range as {
		for i := range a.entries {
			used[a.off+i] = true
		}
	}
	best, run := 0, 0
	for _, u := range used {
		if u {
			run = 0
		} else if run++; run > best {
			best = run
		}
	}
	return best
}

// PlacedPSNs are the PSNs the sender takes as placed ahead by the peer
// (selective repeat's reports).
func (s *Sender) PlacedPSNs() []wire.PSN {
	var out []wire.PSN
	for i := range SRWindow {
		if s.sacked[i/64]&(1<<(i%64)) != 0 {
			out = append(out, s.sBase.Add(uint32(i)))
		}
	}
	return out
}

// MinRTT is the least round trip the sender has sampled.
func (s *Sender) MinRTT() time.Duration { return s.rtt.min }
