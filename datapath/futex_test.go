package datapath

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// The engine's goroutine backs off while its application polls, for
// appBackoffMax at most; NIC.Release ends the backoff at once, so that
// an application that hands its NIC over (it sleeps on a completion
// channel, or spins on a buffer) has its next frame taken by the
// goroutine without waiting for the goroutine's next look.
func TestReleaseEndsBackoff(t *testing.T) {
	h := newHarness(t)
	e := h.nic.engines[0]
	backoff := func(release bool) time.Duration {
		done := make(chan time.Duration)
		go func() {
			b := appBackoffMax
			start := time.Now()
			e.appBackoff(&b)
			done <- time.Since(start)
		}()
		if release {
			for atomic.LoadUint32(&e.backingOff) == 0 {
				runtime.Gosched()
			}
			h.nic.Release()
		}
		return <-done
	}
	if d := backoff(false); d < appBackoffMax*9/10 {
		t.Fatalf("a backoff with no release lasted %v, want %v", d, appBackoffMax)
	}
	// The released backoff is timed: a loaded machine may keep the
	// goroutine off the CPU, so it gets a few tries.
	var d time.Duration
	for range 5 {
		if d = backoff(true); d < appBackoffMax/2 {
			return
		}
	}
	t.Fatalf("a released backoff lasted %v, want well under %v", d, appBackoffMax)
}
