package datapath

import (
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lease is what an engine's goroutine waits on while its application
// polls (PollApp): a timer the application's polls push back (renew) and
// an event the application's release of the NIC raises (wake). The
// goroutine waits in the Go runtime's poller, on an epoll set of the two
// (wait): parked, it holds no thread in a system call and wakes for
// nothing while the application polls, where a sleep with a timeout
// would wake it every few milliseconds, each time preempting a spinning
// thread on a machine whose cores spinning threads hold.
type lease struct {
	tfd, efd, ep int
	conn         syscall.RawConn
	file         *os.File     // the epoll set, as the runtime's poller watches it
	at           atomic.Int64 // when the timer was last armed, in nanotime
	waiting      atomic.Bool  // the goroutine is about to wait, or waits
}

// newLease makes a lease whose descriptors close once it is unreachable.
func newLease() (*lease, error) {
	l := &lease{tfd: -1, efd: -1, ep: -1}
	fail := func(err error) (*lease, error) {
		l.close()
		return nil, err
	}
	var err error
	if l.tfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		return fail(err)
	}
	if l.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fail(err)
	}
	if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fail(err)
	}
	for _, fd := range []int{l.tfd, l.efd} {
		if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return fail(err)
		}
	}
	if err := unix.SetNonblock(l.ep, true); err != nil { // so that os.NewFile gives it to the runtime's poller
		return fail(err)
	}
	l.file = os.NewFile(uintptr(l.ep), "lease")
	if l.conn, err = l.file.SyscallConn(); err != nil {
		return fail(err)
	}
	runtime.AddCleanup(l, func(fds [2]int) {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}, [2]int{l.tfd, l.efd}) // the epoll set's descriptor is the File's, closed by its own cleanup
	return l, nil
}

func (l *lease) close() {
	if l.file != nil {
		l.file.Close()
	} else if l.ep >= 0 {
		unix.Close(l.ep)
	}
	for _, fd := range []int{l.tfd, l.efd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// arm sets the timer to run out d from now (nanotime): a raw system call,
// which the Go runtime does not see (see xsk's kick).
func (l *lease) arm(d time.Duration, now int64) {
	l.at.Store(now)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(l.tfd), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
}

// renew pushes the timer back to appLease from now, at most every
// quarter lease: a poll costs a clock read more, and a system call one
// poll in thousands.
func (l *lease) renew(now int64) {
	if now-l.at.Load() >= int64(appLease/4) {
		l.arm(appLease, now)
	}
}

// wake ends the goroutine's wait at once, if it waits.
func (l *lease) wake() {
	if l.waiting.Load() {
		one := [8]byte{1}
		unix.RawSyscall(unix.SYS_WRITE, uintptr(l.efd), uintptr(unsafe.Pointer(&one[0])), 8)
	}
}

// wait parks the calling goroutine until the timer runs out or wake, or
// at once if done reports true after the goroutine said it waits (the
// other side of wake's look: a release stores its word, then looks at
// waiting; the goroutine stores waiting, then looks at the word).
func (l *lease) wait(done func() bool) {
	l.waiting.Store(true)
	defer l.waiting.Store(false)
	var evs [2]unix.EpollEvent
	var buf [8]byte
	l.conn.Read(func(uintptr) bool {
		if done() {
			return true
		}
		n, _ := unix.EpollWait(l.ep, evs[:], 0)
		if n <= 0 {
			return false // parked until the set is readable
		}
		unix.Read(l.tfd, buf[:])
		unix.Read(l.efd, buf[:])
		return true
	})
}
