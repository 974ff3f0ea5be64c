package reliability_test

import (
	"slices"
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
	if !r.QuietDeadline().IsZero() || r.Quiet(t0.Add(time.Hour)) != reliability.QuietNone {
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
		if r.Quiet(at.Add(wait-time.Microsecond)) != reliability.QuietNone {
			t.Fatalf("quiet NAK %d before its wait %v", i, wait)
		}
		at = at.Add(wait)
		if r.Quiet(at) != reliability.QuietGap || !r.RepeatedNAK() {
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
	if !r.QuietDeadline().IsZero() || r.Quiet(at.Add(time.Hour)) != reliability.QuietNone {
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
	if !r.QuietDeadline().IsZero() || r.Quiet(at.Add(time.Hour)) != reliability.QuietNone {
		t.Error("the quiet timer outlived the gap")
	}
	var sr reliability.Receiver
	sr.Init(100, true)
	sr.Classify(102, t0)
	sr.Opened(t0)
	sr.NoteLoss()
	sr.Acknowledged(t0)
	if !sr.QuietDeadline().IsZero() {
		t.Error("a selective-repeat receiver has a quiet timer")
	}
}

// TestQuietTailAndACK: a go-back-N receiver whose sender goes quiet with
// a message left open NAKs the next PSN (again, doubling, as a gap);
// one that saw loss sends its last ACK again, once; a request in order
// ends either; a receiver that saw no loss sends no ACK twice.
func TestQuietTailAndACK(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q, tail := reliability.GapQuiet, reliability.IdleQuiet
	var r reliability.Receiver
	r.Init(100, false)
	r.Classify(100, t0)
	r.Executed(1, false) // a FIRST: the message is open
	r.Opened(t0)
	if got := r.QuietDeadline(); !got.Equal(t0.Add(tail)) {
		t.Fatalf("an open message's deadline %v on, want %v", got.Sub(t0), tail)
	}
	if k := r.Quiet(t0.Add(tail - time.Microsecond)); k != reliability.QuietNone {
		t.Fatalf("%v before the wait", k)
	}
	if k := r.Quiet(t0.Add(tail)); k != reliability.QuietTail {
		t.Fatalf("the quiet sender of an open message: %v, want QuietTail", k)
	}
	if got := r.QuietDeadline().Sub(t0.Add(tail)); got != 2*tail {
		t.Fatalf("the next tail NAK waits %v, want %v", got, 2*tail)
	}
	// The last packet comes: in order, the message done; no loss seen
	// (a tail NAK is not one): no ACK repeat.
	r.Classify(101, t0.Add(2*tail))
	r.Executed(1, true)
	r.Acknowledged(t0.Add(2 * tail))
	if !r.QuietDeadline().IsZero() {
		t.Fatalf("a deadline after an ACK on a QP that saw no loss")
	}
	if s := r.Stats(); s.TailNAKs != 1 || s.NAKsRepeated != 0 || s.ACKsRepeated != 0 {
		t.Errorf("stats %+v, want one tail NAK", s)
	}
	// A duplicate is loss: the next ACK is sent again once the sender
	// goes quiet, once.
	at := t0.Add(time.Second)
	r.Classify(100, at)
	r.Classify(102, at)
	r.Executed(1, true)
	r.Acknowledged(at)
	if k := r.Quiet(at.Add(q)); k != reliability.QuietACK {
		t.Fatalf("the quiet sender after an ACK on a lossy QP: %v, want QuietACK", k)
	}
	if !r.QuietDeadline().IsZero() || r.Quiet(at.Add(time.Hour)) != reliability.QuietNone {
		t.Fatal("an ACK sent again twice")
	}
	if s := r.Stats(); s.ACKsRepeated != 1 {
		t.Errorf("stats %+v, want one ACK repeated", s)
	}
	// A request in order before the deadline: no repeat.
	r.Classify(103, at.Add(2*q))
	r.Executed(1, true)
	r.Acknowledged(at.Add(2 * q))
	r.Classify(104, at.Add(2*q+q/2))
	r.Executed(1, false)
	r.Opened(at.Add(2*q + q/2))
	if k := r.Quiet(at.Add(3 * q)); k != reliability.QuietNone {
		t.Fatalf("%v with a request before the deadline", k)
	}
	// A NAKed gap keeps its own deadline over an open message's.
	r.Classify(107, at.Add(4*q))
	r.Opened(at.Add(5 * q))
	if k := r.Quiet(at.Add(5 * q)); k != reliability.QuietGap {
		t.Fatalf("a NAKed gap's deadline: %v, want QuietGap", k)
	}
}

// TestQuietIdle: a go-back-N receiver whose application waits for a
// message (Expecting) NAKs the expected PSN once the sender has been
// quiet IdleQuiet, then twice as long each time up to GapQuietMax,
// GapQuietNAKs times, and no more until a request comes; another quiet
// deadline keeps its own kind, and selective repeat never probes.
func TestQuietIdle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var r reliability.Receiver
	r.Init(100, false)
	r.Expecting(t0)
	if got := r.QuietDeadline(); !got.Equal(t0.Add(reliability.IdleQuiet)) {
		t.Fatalf("the idle probe's deadline %v on, want %v", got.Sub(t0), reliability.IdleQuiet)
	}
	if k := r.Quiet(t0.Add(reliability.IdleQuiet - time.Microsecond)); k != reliability.QuietNone {
		t.Fatalf("%v before the wait", k)
	}
	now, wait := t0.Add(reliability.IdleQuiet), reliability.IdleQuiet
	for i := range reliability.GapQuietNAKs {
		if k := r.Quiet(now); k != reliability.QuietIdle {
			t.Fatalf("probe %d at %v: %v, want QuietIdle", i+1, now.Sub(t0), k)
		}
		if r.Expected() != 100 {
			t.Fatalf("the probe NAKs PSN %d, want the expected 100", r.Expected())
		}
		wait = min(2*wait, reliability.GapQuietMax)
		if i == reliability.GapQuietNAKs-1 {
			break
		}
		if got := r.QuietDeadline().Sub(now); got != wait {
			t.Fatalf("probe %d: the next waits %v, want %v", i+1, got, wait)
		}
		now = r.QuietDeadline()
	}
	if !r.QuietDeadline().IsZero() || r.Quiet(now.Add(time.Hour)) != reliability.QuietNone {
		t.Fatal("a probe beyond GapQuietNAKs")
	}
	r.Expecting(now.Add(time.Hour)) // the application posts again: the probes stay spent
	if !r.QuietDeadline().IsZero() {
		t.Fatal("the probes armed again without a request")
	}
	if s := r.Stats(); s.IdleNAKs != reliability.GapQuietNAKs || s.NAKsRepeated != 0 || s.TailNAKs != 0 {
		t.Errorf("stats %+v, want %d idle NAKs only", s, reliability.GapQuietNAKs)
	}
	// A request comes: the probes may run again.
	at := now.Add(2 * time.Hour)
	r.Classify(100, at)
	r.Executed(1, true)
	r.Expecting(at)
	if got := r.QuietDeadline(); !got.Equal(at.Add(reliability.IdleQuiet)) {
		t.Fatalf("after a request the idle deadline is %v on, want %v", got.Sub(at), reliability.IdleQuiet)
	}
	// An open message's tail deadline takes over and keeps its kind.
	r.Classify(101, at)
	r.Executed(1, false)
	r.Opened(at)
	r.Expecting(at)
	if k := r.Quiet(at.Add(reliability.IdleQuiet)); k != reliability.QuietTail {
		t.Fatalf("an open message's deadline: %v, want QuietTail", k)
	}
	// Selective repeat: no probe.
	var sr reliability.Receiver
	sr.Init(100, true)
	sr.Expecting(t0)
	if !sr.QuietDeadline().IsZero() {
		t.Error("a selective-repeat receiver armed an idle probe")
	}
}

// LastAnswered: after a READ or an atomic (whose response is its
// acknowledgement) until the next SEND or WRITE; AckPSN, the PSN a plain
// ACK names, is the last SEND's or WRITE's, never a READ's or atomic's.
func TestLastAnswered(t *testing.T) {
	var r reliability.Receiver
	r.Init(100, false)
	for _, step := range []struct {
		do       func()
		answered bool
		ack      wire.PSN
	}{
		{func() {}, false, 99},
		{func() { r.Executed(1, true) }, false, 100}, // SEND 100
		{func() { r.ExecutedRead(reliability.ReadRecord{Packets: 3, RKey: 1, Length: 3000}) }, true, 100}, // READ 101-103
		{func() { r.Executed(1, true) }, false, 104},                                                      // WRITE 104
		{func() { r.ExecutedAtomic(7) }, true, 104},                                                       // atomic 105
		{func() { r.ExecutedRead(reliability.ReadRecord{Packets: 1, RKey: 1, Length: 8}) }, true, 104},    // READ 106
		{func() { r.Executed(1, false) }, false, 107},                                                     // SEND_FIRST 107
	} {
		step.do()
		if got := r.LastAnswered(); got != step.answered {
			t.Fatalf("at expected PSN %d: LastAnswered %v, want %v", r.Expected(), got, step.answered)
		}
		if got := r.AckPSN(); got != step.ack {
			t.Fatalf("at expected PSN %d: AckPSN %d, want %d", r.Expected(), got, step.ack)
		}
	}
}

// TestQuietRead: a go-back-N responder whose requester went back for
// READs (a duplicate READ) and then went quiet answers again, unasked,
// the READs from the PSN it went back to: IdleQuiet after the last
// response, then twice as long, ReadRepairs times, until a request comes.
// A QP that saw no loss, and selective repeat, never repeat.
func TestQuietRead(t *testing.T) {
	t0 := time.Unix(1000, 0)
	read := func(r *reliability.Receiver, psn wire.PSN, packets uint32) {
		if c, _ := r.Classify(psn, t0); c != reliability.New {
			t.Fatalf("READ at %d: %v, want New", psn, c)
		}
		r.ExecutedRead(reliability.ReadRecord{Packets: packets, VA: 0x1000 * uint64(psn), RKey: 7, Length: packets * 1024})
		r.AnsweredRead(t0)
	}
	var r reliability.Receiver
	r.Init(100, false)
	read(&r, 100, 4) // 100-103
	read(&r, 104, 4) // 104-107
	if r.RepairsReads() {
		t.Error("READs repeated at a quiet gap of a requester that never went back")
	}
	if !r.QuietDeadline().IsZero() {
		t.Fatal("a READ repair armed on a QP that saw no loss")
	}
	// The requester lost 102 and went back there: a partial re-read,
	// then the READ after it again.
	at := t0.Add(time.Second)
	for _, psn := range []wire.PSN{102, 104} {
		if c, _ := r.Classify(psn, at); c != reliability.Duplicate {
			t.Fatalf("PSN %d: %v, want Duplicate", psn, c)
		}
		r.AnsweredRead(at)
	}
	if !r.RepairsReads() {
		t.Error("a requester that went back and sent nothing in order since: a quiet gap should repeat the READs too")
	}
	sent := at.Add(3 * time.Millisecond) // the last response went
	r.ReadsSent(sent)
	if got := r.QuietDeadline(); !got.Equal(sent.Add(reliability.IdleQuiet)) {
		t.Fatalf("the repair's deadline %v after the last response, want %v", got.Sub(sent), reliability.IdleQuiet)
	}
	if k := r.Quiet(sent.Add(reliability.IdleQuiet - time.Microsecond)); k != reliability.QuietNone {
		t.Fatalf("%v before the wait", k)
	}
	want := []reliability.ReadRepeat{{ReadRecord: reliability.ReadRecord{PSN: 100, Packets: 4}, From: 2}, {ReadRecord: reliability.ReadRecord{PSN: 104, Packets: 4}}}
	now, wait := sent.Add(reliability.IdleQuiet), reliability.IdleQuiet
	for i := range reliability.ReadRepairs {
		if k := r.Quiet(now); k != reliability.QuietRead {
			t.Fatalf("repair %d: %v, want QuietRead", i+1, k)
		}
		var out [reliability.MaxRdAtomic]reliability.ReadRepeat
		n := r.ReadsToRepeat(&out)
		if n != len(want) {
			t.Fatalf("repair %d: %d READs, want %d", i+1, n, len(want))
		}
		for j, w := range want {
			if g := out[j]; g.PSN != w.PSN || g.Packets != w.Packets || g.From != w.From || g.Until != w.Packets || g.VA != 0x1000*uint64(w.PSN) || g.MSN != uint32(j+1) {
				t.Errorf("repair %d READ %d: %+v, want PSN %d from %d, MSN %d", i+1, j, g, w.PSN, w.From, j+1)
			}
		}
		wait *= 2
		if i < reliability.ReadRepairs-1 {
			if got := r.QuietDeadline().Sub(now); got != wait {
				t.Fatalf("repair %d: the next waits %v, want %v", i+1, got, wait)
			}
			now = r.QuietDeadline()
		}
	}
	if !r.QuietDeadline().IsZero() || r.Quiet(now.Add(time.Hour)) != reliability.QuietNone {
		t.Fatal("a repair beyond ReadRepairs")
	}
	if s := r.Stats(); s.ReadRepairs != reliability.ReadRepairs {
		t.Errorf("stats %+v, want %d READ repairs", s, reliability.ReadRepairs)
	}
	// New READs: the repairs may run again; a later retry from 118 (its
	// first requests may have been lost) takes the two READs before the
	// one it went back into whole, and those before them not at all.
	read(&r, 108, 4) // 108-111
	if !r.RepairsReads() {
		t.Error("requests in order after the retry: the requester may still wait on a response of it")
	}
	read(&r, 112, 4) // 112-115
	read(&r, 116, 4) // 116-119
	at = now.Add(2 * time.Hour)
	r.Classify(118, at)
	r.AnsweredRead(at)
	if k := r.Quiet(at.Add(reliability.IdleQuiet)); k != reliability.QuietRead {
		t.Fatalf("after a new retry: %v, want QuietRead", k)
	}
	var out [reliability.MaxRdAtomic]reliability.ReadRepeat
	n := r.ReadsToRepeat(&out)
	var got []wire.PSN
	for _, rr := range out[:n] {
		if rr.From != 0 {
			t.Errorf("READ at %d from %d, want whole: the READs before it go too", rr.PSN, rr.From)
		}
		got = append(got, rr.PSN)
	}
	if !slices.Equal(got, []wire.PSN{108, 112, 116}) {
		t.Errorf("after a retry from 118: READs at %v, want 108, 112, 116", got)
	}
	// Selective repeat asks for its holes itself.
	var sr reliability.Receiver
	sr.Init(100, true)
	read(&sr, 100, 4)
	sr.Classify(101, at)
	sr.AnsweredRead(at)
	if !sr.QuietDeadline().IsZero() {
		t.Error("a READ repair armed with selective repeat")
	}
}

// TestReadRepeatBudget: a READ repair sends at most ReadRepeatBudget
// response packets, from where the requester went back; large READs
// before it are left out of the margin.
func TestReadRepeatBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var r reliability.Receiver
	r.Init(0, false)
	for psn := wire.PSN(0); psn < 3000; psn += 1000 { // three READs of 1000 packets
		r.Classify(psn, t0)
		r.ExecutedRead(reliability.ReadRecord{Packets: 1000, Length: 1000 << 10})
	}
	r.Classify(1500, t0) // went back into the second
	var out [reliability.MaxRdAtomic]reliability.ReadRepeat
	n := r.ReadsToRepeat(&out)
	if n != 1 || out[0].PSN != 1000 || out[0].From != 500 || out[0].Until != 500+reliability.ReadRepeatBudget {
		t.Fatalf("%d READs, first %+v; want the one at 1000, packets 500 to %d", n, out[0], 500+reliability.ReadRepeatBudget)
	}
	r.Classify(3000, t0) // in order: executed below
	r.ExecutedRead(reliability.ReadRecord{Packets: 100, Length: 100 << 10})
	r.Classify(2900, t0) // back into the third, near its end: the fourth follows
	n = r.ReadsToRepeat(&out)
	if n != 2 || out[0].From != 900 || out[0].Until != 1000 || out[1].PSN != 3000 || out[1].From != 0 || out[1].Until != 100 {
		t.Fatalf("%d READs: %+v; want the third's last 100 packets, then the fourth's 100", n, out[:n])
	}
}

// TestAtomicsToRepeat: the atomics a quiet requester may wait for are
// every one remembered, oldest first, also after it went back to a later
// PSN (a retry that a NAK started while an older atomic's response was
// lost still waits on the older one). Only the last MaxRdAtomic are kept.
func TestAtomicsToRepeat(t *testing.T) {
	var r reliability.Receiver
	r.Init(100, false)
	for i := range reliability.MaxRdAtomic + 2 { // PSNs 100..117, the value returned 1000+i
		r.Classify(r.Expected(), t0)
		r.ExecutedAtomic(uint64(1000 + i))
	}
	var out [reliability.MaxRdAtomic]reliability.AtomicRecord
	psns := func() (got []wire.PSN) {
		n := r.AtomicsToRepeat(&out)
		for _, a := range out[:n] {
			if a.Orig != 1000+uint64(a.PSN-100) {
				t.Errorf("atomic %d returned %d", a.PSN, a.Orig)
			}
			got = append(got, a.PSN)
		}
		return got
	}
	var want []wire.PSN
	for psn := wire.PSN(102); psn <= 117; psn++ {
		want = append(want, psn)
	}
	if got := psns(); !slices.Equal(got, want) {
		t.Fatalf("never went back: %v, want %v", got, want)
	}
	if c, _ := r.Classify(110, t0); c != reliability.Duplicate { // the requester went back to 110
		t.Fatalf("PSN 110 classed %v", c)
	}
	if got := psns(); !slices.Equal(got, want) {
		t.Fatalf("went back to 110: %v, want every one remembered %v", got, want)
	}
}
