package porttest

import (
	"time"

	"golang.org/x/sys/unix"
)

// newEventFD returns a non-blocking eventfd, or -1.
func newEventFD() int {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1
	}
	return fd
}

func closeEventFD(fd int) { unix.Close(fd) }

// wakeEventFD makes the eventfd readable.
func wakeEventFD(fd int) {
	var one = [8]byte{1}
	unix.Write(fd, one[:])
}

// pollEventFD waits until the eventfd is readable or timeout has passed
// (to the timer slack of the kernel's high-resolution timers, not Go's
// millisecond), and empties it.
func pollEventFD(fd int, timeout time.Duration) {
	ts := unix.NsecToTimespec(int64(max(timeout, 0)))
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	unix.Ppoll(fds[:], &ts, nil)
	var buf [8]byte
	unix.Read(fd, buf[:])
}
