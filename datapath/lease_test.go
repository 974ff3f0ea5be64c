package datapath

import (
	"testing"
	"time"
)

// While its application polls, an engine's goroutine waits on the
// application's lease and does not wake: the lease runs out appLease
// after it was last renewed; NIC.Progress renews it, so a goroutine whose
// application keeps polling waits on; NIC.Release ends the wait at once.
func TestLease(t *testing.T) {
	h := newHarness(t)
	e := h.nic.engines[0]
	l, err := newLease() // the engine's goroutine makes its own when it starts (the harness runs none)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	e.lease.Store(l)
	wait := func() <-chan time.Duration {
		e.driven.Store(nanotime()) // the application polls
		l.arm(appLease, nanotime())
		done := make(chan time.Duration, 1)
		start := time.Now()
		go func() {
			e.waitLease()
			done <- time.Since(start)
		}()
		return done
	}

	if d := <-wait(); d < appLease*9/10 {
		t.Errorf("a lease no one renewed ran out after %v, want %v", d, appLease)
	}

	// The renewals are timed too: a try in which the machine kept this
	// test's own thread off the CPU for most of a lease (its polls
	// stopped) does not count, and gets another.
	polling := 3 * appLease
	for try := 0; ; try++ {
		done := wait()
		var gap time.Duration
		last := time.Now()
		for end := last.Add(polling); time.Now().Before(end); time.Sleep(time.Millisecond) {
			h.nic.Progress()
			now := time.Now()
			gap, last = max(gap, now.Sub(last)), now
		}
		d := <-done
		if gap < appLease/2 {
			if d < polling {
				t.Errorf("the goroutine woke after %v while the application polled for %v (polls at most %v apart)", d, polling, gap)
			}
			break
		}
		if try == 4 {
			t.Logf("the polls were never closer than %v apart in 5 tries: the renewal is not checked", gap)
			break
		}
	}

	// The released wait is timed: a loaded machine may keep the
	// goroutine off the CPU, so it gets a few tries.
	var d time.Duration
	for range 5 {
		done := wait()
		time.Sleep(time.Millisecond)
		h.nic.Release()
		if d = <-done; d < appLease/2 {
			return
		}
	}
	t.Errorf("a released wait lasted %v, want well under %v", d, appLease)
}
