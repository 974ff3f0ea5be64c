package xsk

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// NotPermitted reports whether Open failed for want of privileges (not
// root: no CAP_NET_ADMIN, CAP_BPF or CAP_IPC_LOCK, or a locked-memory
// limit too low for the UMEM), as opposed to a device that cannot take
// AF_XDP: the case for falling back to a kernel UDP socket.
func NotPermitted(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) ||
		strings.Contains(err.Error(), "operation not permitted") || strings.Contains(err.Error(), "MEMLOCK")
}
