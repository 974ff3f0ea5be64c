package verbs_test

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// postHoldEnds is a PollApp end a, whose posts may hold their frames
// for hold (datapath.NICConfig.PostHold; 0: the default), and a peer b
// that its own goroutine runs.
func postHoldEnds(t *testing.T, hold ...time.Duration) (a, b *verbstest.End) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 8192})
	cfg := func(p datapath.Port, last byte, mode datapath.PollMode) verbs.DeviceConfig {
		c := verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC{2, 0, 0, 0, 0, last}, IP: netip.AddrFrom4([4]byte{10, 47, 0, last}), Poll: mode}, Port: p}
		if len(hold) > 0 {
			c.PostHold = hold[0]
		}
		return c
	}
	a = verbstest.NewEndConfig(t, cfg(pa, 1, datapath.PollApp), bufSize)
	b = verbstest.NewEndConfig(t, cfg(pb, 2, datapath.PollSleep), bufSize)
	verbstest.Connect(t, a, b, 3, 14)
	return a, b
}

// awaitPlaced waits, without a verb call, until e has placed want WRITEs
// in all, as a program that spins on its buffer does.
func awaitPlaced(t *testing.T, e *verbstest.End, want uint64) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); e.Dev.WritesPlaced() < want; runtime.Gosched() {
		if time.Now().After(end) {
			t.Fatalf("%d WRITEs placed, want %d: held posts never left", e.Dev.WritesPlaced(), want)
		}
	}
}

// TestPostsLeaveTogether: WRITEs posted one call each, back to back, as
// perftest's bandwidth tests post them, leave in batches (post_holds
// counts the posts that waited for the next), and every one is placed
// and completes, in order, once the program polls.
func TestPostsLeaveTogether(t *testing.T) {
	a, b := postHoldEnds(t)
	const burst = 16
	var placed uint64
	for try := 1; ; try++ {
		holds := a.Counts.PostHolds.Load()
		for i := range burst {
			a.Buf[i] = byte(try*burst + i)
			if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, uint64(i), i, 1, i)}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range burst {
			if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
				t.Fatalf("completion %d: %+v, want WR %d, success", i, wc, i)
			}
		}
		placed += burst
		awaitPlaced(t, b, placed)
		for i := range burst {
			if got, want := b.Buf[i], byte(try*burst+i); got != want {
				t.Fatalf("byte %d: %d, want %d", i, got, want)
			}
		}
		if a.Counts.PostHolds.Load() > holds {
			break
		}
		if try == 50 { // the posts were each more than postBurst apart: a machine this loaded holds nothing
			t.Skipf("no post of %d bursts of %d came within a burst's gap of the one before", try, burst)
		}
	}
}

// TestHeldPostsLeaveWithoutACall: a program that posts twice and then
// waits on its buffer, making no verb call, gets both WRITEs placed: the
// second post's frame, held for a call that does not come, is sent by the
// NIC's goroutine (post_holds_late), and such holds make the NIC hold
// less often.
func TestHeldPostsLeaveWithoutACall(t *testing.T) {
	a, b := postHoldEnds(t)
	var placed uint64
	for try := 1; try <= 40; try++ {
		holds, start := a.Counts.PostHolds.Load(), time.Now()
		for i := range 2 {
			a.Buf[i] = byte(2*try + i)
			if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, uint64(i), i, 1, i)}); err != nil {
				t.Fatal(err)
			}
		}
		placed += 2
		awaitPlaced(t, b, placed)
		if a.Counts.PostHolds.Load() > holds {
			t.Logf("pair %d: the second post held; placed %v after the first post", try, time.Since(start).Round(time.Microsecond))
		}
		for i := range 2 {
			if got, want := b.Buf[i], byte(2*try+i); got != want {
				t.Fatalf("try %d, byte %d: %d, want %d", try, i, got, want)
			}
		}
		for range 2 { // the completions, once both are placed
			if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
	}
	holds, late := a.Counts.PostHolds.Load(), a.Counts.PostHoldsLate.Load()
	t.Logf("40 pairs of posts: %d held, %d sent by the NIC's goroutine", holds, late)
	if holds == 0 {
		t.Skip("no second post came within a burst's gap of the first: a machine this loaded held nothing")
	}
	if late != holds { // a held frame leaves before its WRITE is placed, and no call came before that
		t.Fatalf("%d of %d holds were sent by the NIC's goroutine, want all", late, holds)
	}
	// After a late hold the NIC skips the next 8 chances, then 16, 32:
	// of 40 pairs of posts, at most 4 hold (fewer where the posts were
	// further apart than a burst's gap).
	if holds > 4 {
		t.Errorf("%d of 40 pairs held their second post, each sent late; want holding to pause after each", holds)
	}
}

// TestReleaseSendsHeldPosts: a program that posts twice and then sleeps
// on a completion channel (ibv_req_notify_cq releases the NIC) has what
// its posts held sent by that call, not late by the NIC's goroutine.
func TestReleaseSendsHeldPosts(t *testing.T) {
	// A hold of 4 ms: the goroutine's timer must not send the held
	// WRITE before the release does, however slow the machine.
	a, b := postHoldEnds(t, 4*time.Millisecond)
	var placed uint64
	held := 0
	for try := 1; try <= 40 && held < 5; try++ {
		holds, late := a.Counts.PostHolds.Load(), a.Counts.PostHoldsLate.Load()
		for i := range 2 {
			a.Buf[i] = byte(2*try + i)
			if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, uint64(i), i, 1, i)}); err != nil {
				t.Fatal(err)
			}
		}
		a.Dev.NIC().Release()
		placed += 2
		awaitPlaced(t, b, placed)
		if a.Counts.PostHolds.Load() > holds {
			held++
			if got := a.Counts.PostHoldsLate.Load() - late; got != 0 {
				t.Fatalf("pair %d: the release left the held post to the NIC's goroutine (post_holds_late +%d)", try, got)
			}
		}
		for range 2 {
			if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
	}
	if held == 0 {
		t.Skip("no second post came within a burst's gap of the first: a machine this loaded held nothing")
	}
}

// TestTrustedHolds: a program that posts in bursts and polls after each
// ends its holds itself, and its holds then arm no timer
// (post_holds_trusted); when it then posts twice and waits on its buffer
// without a call, the NIC's goroutine still sends the held WRITE (its
// lease bounds the wait: post_holds_trusted_late), and the holds after
// that arm their timer again for a long while.
func TestTrustedHolds(t *testing.T) {
	a, b := postHoldEnds(t)
	var placed uint64
	burst := func(n int) {
		t.Helper()
		for i := range n {
			if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, uint64(i), i, 1, i)}); err != nil {
				t.Fatal(err)
			}
		}
		for range n {
			if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		placed += uint64(n)
	}
	c := a.Counts
	for try := 1; try <= 30; try++ {
		before := c.PostHoldsTrusted.Load()
		for k := 0; k < 200 && c.PostHoldsTrusted.Load() == before; k++ {
			burst(16)
		}
		if c.PostHoldsTrusted.Load() == before {
			continue // no trust: a pair before this one held late, or nothing held
		}
		late := c.PostHoldsTrustedLate.Load()
		a.Dev.NIC().Progress() // a call between the burst and the pair, as a poll's (without its linger)
		for i := range 2 {     // then two posts, and a wait on memory without a call
			if _, err := a.QP.PostSend([]verbs.SendWR{writeWR(a, b, uint64(i), i, 1, i)}); err != nil {
				t.Fatal(err)
			}
		}
		placed += 2
		start := time.Now()
		awaitPlaced(t, b, placed)
		took := time.Since(start)
		for range 2 {
			if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		if c.PostHoldsTrustedLate.Load() == late {
			continue // the pair's posts did not end in a trusted hold that no call ended
		}
		t.Logf("try %d: a trusted hold, sent by the NIC's goroutine: placed %v after the posts", try, took.Round(time.Microsecond))
		trusted, holds := c.PostHoldsTrusted.Load(), c.PostHolds.Load()
		for range 50 {
			burst(16)
		}
		if c.PostHolds.Load() == holds {
			t.Skip("the bursts after the late hold held nothing")
		}
		if got := c.PostHoldsTrusted.Load() - trusted; got != 0 {
			t.Fatalf("%d of %d holds after a trusted hold ended late armed no timer, want none", got, c.PostHolds.Load()-holds)
		}
		return
	}
	t.Skip("no trusted hold ended late in 30 tries: a machine this loaded holds little")
}

// TestUnreliablePostsNotHeld: a loop of single posts on a UC QP sends each
// post's frame at once, where the same loop on an RC QP holds: a UC or UD
// message lost to a receiver its sender outran is not sent again.
func TestUnreliablePostsNotHeld(t *testing.T) {
	a, b := postHoldEnds(t)
	qa, _ := verbstest.ConnectedUC(t, a, b)
	burst := func(qp *verbs.QP) {
		t.Helper()
		for i := range 16 {
			if _, err := qp.PostSend([]verbs.SendWR{writeWR(a, b, uint64(i), i, 1, i)}); err != nil {
				t.Fatal(err)
			}
		}
		for range 16 {
			if wc := waitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
	}
	c := a.Counts
	for k := 0; k < 200 && c.PostHolds.Load() == 0; k++ {
		burst(a.QP)
	}
	if c.PostHolds.Load() == 0 {
		t.Skip("200 bursts of RC posts held nothing: a machine this loaded holds little")
	}
	holds := c.PostHolds.Load()
	for range 50 {
		burst(qa)
	}
	if got := c.PostHolds.Load() - holds; got != 0 {
		t.Fatalf("50 bursts of 16 UC posts held %d times, want none", got)
	}
}
