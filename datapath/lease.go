package datapath

import (
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lease is what an engine's goroutine waits on while its application
// polls (PollApp): a timer (a timerfd) the application's polls push back
// (renew), whose running out a watching goroutine, parked in the Go
// runtime's poller, turns into a word on expired. Parked, neither
// goroutine holds a thread in a system call or wakes while the
// application polls, where a sleep with a timeout would wake every few
// milliseconds, each time preempting a spinning thread on a machine
// whose cores spinning threads hold. The runtime's poller may notice the
// timer up to 10 ms late (its monitor's look, when every thread is busy
// or asleep): an application that stops polling without a word gets its
// NIC back within appLease and that; one that says so (NIC.Release)
// wakes the goroutine through a channel at once.
type lease struct {
	tfd     int
	file    *os.File // the timer, as the runtime's poller watches it
	conn    syscall.RawConn
	at      atomic.Int64  // when the timer was last armed, in nanotime
	expired chan struct{} // a word when the timer ran out (capacity 1)
}

// newLease makes a lease and starts its watching goroutine, which ends
// at close.
func newLease() (*lease, error) {
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	l := &lease{tfd: tfd, file: os.NewFile(uintptr(tfd), "lease"), expired: make(chan struct{}, 1)}
	if l.conn, err = l.file.SyscallConn(); err != nil {
		l.file.Close()
		return nil, err
	}
	go l.watch()
	return l, nil
}

// watch turns each running out of the timer into a word on expired.
func (l *lease) watch() {
	var buf [8]byte
	for {
		err := l.conn.Read(func(fd uintptr) bool {
			n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), 8)
			return e == 0 && n == 8 // ran out; else parked until it does
		})
		if err != nil {
			return // closed
		}
		select {
		case l.expired <- struct{}{}:
		default:
		}
	}
}

// close stops the watching goroutine and closes the timer.
func (l *lease) close() { l.file.Close() }

// arm sets the timer to run out d from now (nanotime): a raw system call,
// which the Go runtime does not see (see xsk's kick).
func (l *lease) arm(d time.Duration, now int64) {
	l.at.Store(now)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(l.tfd), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
}

// armShort sets the timer to run out d from now, d shorter than
// appLease: a bound on frames a post holds (holdPosts). It is recorded
// as a lease armed appLease-d ago, so that the application's next poll
// (renew) or the goroutine's next wait (waitLease) arms a whole lease
// again.
func (l *lease) armShort(d time.Duration, now int64) {
	l.arm(d, now)
	l.at.Store(now - int64(appLease-d))
}

// renew pushes the timer back to appLease from now, at most every
// quarter lease: a poll costs a clock read more, and a system call one
// poll in thousands.
func (l *lease) renew(now int64) {
	if now-l.at.Load() >= int64(appLease/4) {
		l.arm(appLease, now)
	}
}
