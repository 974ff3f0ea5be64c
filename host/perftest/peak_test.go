package perftest

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestPeakTime: the bisection finds perftest's peak, the least time per
// message over every run of consecutive messages, as trying every pair
// does, on posting and completion times of every shape: steady, bursty,
// one message, completions bunched at the end.
func TestPeakTime(t *testing.T) {
	brute := func(posted, done []time.Time) time.Duration {
		best := time.Duration(1<<63 - 1)
		for i := range posted {
			for j := i; j < len(done); j++ {
				if d := done[j].Sub(posted[i]) / time.Duration(j-i+1); d < best {
					best = d
				}
			}
		}
		return best
	}
	r := rand.New(rand.NewPCG(3, 4))
	base := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name string
		n    int
		gap  func(i int) time.Duration // between postings
		lat  func(i int) time.Duration // posting to completion
	}{
		{"one message", 1, func(int) time.Duration { return 0 }, func(int) time.Duration { return 7 * time.Microsecond }},
		{"steady", 500, func(int) time.Duration { return time.Microsecond }, func(int) time.Duration { return 20 * time.Microsecond }},
		{"random", 700, func(int) time.Duration { return time.Duration(r.IntN(5000)) }, func(int) time.Duration { return time.Duration(1000 + r.IntN(50000)) }},
		{"bursts", 600, func(i int) time.Duration {
			if i%50 == 0 {
				return 200 * time.Microsecond
			}
			return 10 * time.Nanosecond
		}, func(i int) time.Duration { return time.Duration(5000 + 37*(i%50)) }},
		{"completions at the end", 300, func(int) time.Duration { return 100 }, func(i int) time.Duration { return time.Duration(300-i) * 1000 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			posted, done := make([]time.Time, tc.n), make([]time.Time, tc.n)
			at := base
			last := base
			for i := range tc.n {
				at = at.Add(tc.gap(i))
				posted[i] = at
				c := at.Add(tc.lat(i))
				if c.Before(last) {
					c = last // completions come in order
				}
				done[i], last = c, c
			}
			got, want := peakTime(posted, done), brute(posted, done)
			if diff := got - want; diff < -1 || diff > 1 {
				t.Fatalf("peak time %v, want %v (every pair)", got, want)
			}
		})
	}
}

// BenchmarkPeakTime: the peak of a million-iteration run takes a pass per
// halving, not every pair.
func BenchmarkPeakTime(b *testing.B) {
	const n = 1_000_000
	posted, done := make([]time.Time, n), make([]time.Time, n)
	at := time.Unix(1_000_000, 0)
	for i := range n {
		at = at.Add(time.Microsecond)
		posted[i], done[i] = at, at.Add(30*time.Microsecond)
	}
	for b.Loop() {
		peakTime(posted, done)
	}
}
