//go:build !linux

package porttest

import "time"

func newEventFD() int                           { return -1 }
func closeEventFD(int)                          {}
func wakeEventFD(int)                           {}
func pollEventFD(fd int, timeout time.Duration) {}
