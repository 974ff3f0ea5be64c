package reliability_test

import (
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/reliability"
)

// TestSeqNAKRepeat: a gap is NAKed at its first out-of-sequence request;
// while requests beyond it keep coming, again 1 ms after, then 2 ms, 4 ms
// after that (a lost NAK must not leave the sender to its ACK timeout),
// and not in between; once the gap is filled, the next gap's first NAK
// comes at once.
func TestSeqNAKRepeat(t *testing.T) {
	var r reliability.Receiver
	r.Init(100, false)
	t0 := time.Unix(1000, 0)
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	for i, tc := range []struct {
		at  time.Time
		psn wire.PSN
		nak bool
	}{
		{ms(0), 101, true},     // 100 lost: the gap's first NAK
		{ms(0.01), 102, false}, // its NAK was just sent
		{ms(0.5), 103, false},
		{ms(1), 104, true}, // 1 ms on, still beyond the gap: again
		{ms(2.5), 105, false},
		{ms(3), 106, true}, // 2 ms after the last
		{ms(6.9), 107, false},
		{ms(7), 108, true}, // 4 ms after
	} {
		c, nak := r.Classify(tc.psn, tc.at)
		if c != reliability.OutOfSequence || nak != tc.nak {
			t.Errorf("step %d: PSN %d at %v: %v, NAK %v; want out of sequence, NAK %v", i, tc.psn, tc.at.Sub(t0), c, nak, tc.nak)
		}
	}
	if got := r.Stats().NAKsRepeated; got != 3 {
		t.Errorf("%d repeated NAKs counted, want 3", got)
	}
	// The go-back fills the gap; a new one is NAKed at once.
	if c, _ := r.Classify(100, ms(8)); c != reliability.New {
		t.Fatalf("PSN 100: %v", c)
	}
	r.Executed(1, true)
	if c, nak := r.Classify(102, ms(8.2)); c != reliability.OutOfSequence || !nak {
		t.Errorf("the next gap: %v, NAK %v; want its first NAK", c, nak)
	}
}

// TestQuietGap: a NAKed go-back-N gap whose sender goes quiet is NAKed
// again GapQuiet after the last request beyond it (or its last NAK),
// then after twice that, and so on up to GapQuietMax; each request
// beyond the gap moves the deadline; the gap filled, the timer stops. A
// selective-repeat receiver, whose sender has timers of its own, has
// none.
func TestQuietGap(t *testing.T) {
	var r reliability.Receiver
	r.Init(100, false)
	t0 := time.Unix(1000, 0)
	q := reliability.GapQuiet
	if !r.QuietDeadline().IsZero() || r.QuietGap(t0.Add(time.Hour)) {
		t.Fatal("a quiet timer without a gap")
	}
	r.Classify(101, t0) // 100 lost: NAKed
	if got := r.QuietDeadline(); !got.Equal(t0.Add(q)) {
		t.Fatalf("after the NAK the deadline is %v on, want %v", got.Sub(t0), q)
	}
	r.Classify(102, t0.Add(q/2)) // more beyond the gap: the sender is not quiet (and the NAK repeated)
	if got := r.QuietDeadline(); !got.Equal(t0.Add(q / 2).Add(q)) {
		t.Fatalf("after a request beyond the gap the deadline is %v on, want %v", got.Sub(t0), q/2+q)
	}
	at := t0.Add(q / 2)
	for i, wait := 0, q; i < reliability.GapQuietNAKs; i++ {
		if r.QuietGap(at.Add(wait - time.Microsecond)) {
			t.Fatalf("quiet NAK %d before its wait %v", i, wait)
		}
		at = at.Add(wait)
		if !r.QuietGap(at) || !r.RepeatedNAK() {
			t.Fatalf("no quiet NAK %d after %v", i, wait)
		}
		wait = min(2*wait, reliability.GapQuietMax)
		if i == reliability.GapQuietNAKs-1 {
			break
		}
		if got := r.QuietDeadline().Sub(at); got != wait {
			t.Fatalf("after quiet NAK %d the next waits %v, want %v", i, got, wait)
		}
	}
	// The sender stayed silent through them all: no more, until a
	// request beyond the gap comes again.
	if !r.QuietDeadline().IsZero() || r.QuietGap(at.Add(time.Hour)) {
		t.Fatalf("a quiet NAK after %d in a row", reliability.GapQuietNAKs)
	}
	if s := r.Stats(); s.QuietNAKs != reliability.GapQuietNAKs || s.NAKsRepeated != reliability.GapQuietNAKs+1 {
		t.Errorf("stats %+v, want %d quiet NAKs, counted as repeats with the one before", s, reliability.GapQuietNAKs)
	}
	at = at.Add(time.Hour)
	r.Classify(103, at) // the sender is back: the timer again, at the last wait
	if got := r.QuietDeadline().Sub(at); got != reliability.GapQuietMax {
		t.Fatalf("after a request the quiet deadline is %v on, want %v", got, reliability.GapQuietMax)
	}
	// The go-back fills the gap: no timer.
	r.Classify(100, at)
	r.Executed(1, true)
	if !r.QuietDeadline().IsZero() || r.QuietGap(at.Add(time.Hour)) {
		t.Error("the quiet timer outlived the gap")
	}
	var sr reliability.Receiver
	sr.Init(100, true)
	sr.Classify(102, t0)
	if !sr.QuietDeadline().IsZero() {
		t.Error("a selective-repeat receiver has a quiet timer")
	}
}
