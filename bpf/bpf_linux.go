package bpf

import (
	"errors"

	"golang.org/x/sys/unix"
)

// isBusy reports whether the kernel refused an attach because the interface
// already has an XDP program.
func isBusy(err error) bool { return errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) }
