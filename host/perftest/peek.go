package perftest

import (
	"errors"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peek reads without consuming, waiting for data until the connection's
// read deadline; it returns io.EOF when the peer has closed.
func peek(c net.Conn, b []byte) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, errors.New("perftest: connection cannot be watched")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}
