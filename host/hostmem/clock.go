package hostmem

import (
	"sync"
	"time"
)

// Clock is the time the NIC and its DMA engine see: the system's
// monotonic clock in a running NIC, a DrivenClock in tests, so that a
// test decides when a modelled transfer completes or a timer expires.
type Clock interface {
	Now() time.Time
}

// SystemClock is the system's monotonic clock. Its times carry a
// monotonic reading and a wall time fixed at process start plus the
// monotonic time since: reading it costs one clock read, not time.Now's
// two (the NIC reads it on every DMA poll).
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return clockEpoch.Add(time.Since(clockEpoch)) }

var clockEpoch = time.Now()

// Monotonic is the system clock's reading as the time since its epoch
// (one clock read): SystemClock.Now() is SystemTimeAt(Monotonic()), so a
// caller that keeps the reading (an engine, once per turn) has both.
func Monotonic() time.Duration { return time.Since(clockEpoch) }

// SystemTimeAt is the SystemClock's time at a reading of Monotonic.
func SystemTimeAt(d time.Duration) time.Time { return clockEpoch.Add(d) }

// DrivenClock is a clock that moves only when its owner says: Advance
// and Set. The zero value is not ready; NewDrivenClock starts one.
// It may be read from any goroutine.
type DrivenClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewDrivenClock returns a clock standing at start.
func NewDrivenClock(start time.Time) *DrivenClock { return &DrivenClock{now: start} }

// Now implements Clock.
func (c *DrivenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// WaitUntil is a synchronous wait for t on the driven clock: the clock
// moves on to t if it stands before it. The DMA engine's blocking reads
// call it, so that in a test they take the time they wait for.
func (c *DrivenClock) WaitUntil(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// Advance moves the clock on by d (a negative d is refused: time does
// not go back) and returns the new time.
func (c *DrivenClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
	return c.now
}
