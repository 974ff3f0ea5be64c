// Command capi is libsoftrnic.so, the NIC that softrnic's C libraries
// (libibverbs.so.1 and librdmacm.so.1, in host/capi/c) drive: built with
// -buildmode=c-shared, it runs softrnic's devices inside the C
// application's process and exports the calls of srn.h, each a verb on
// the Go verbs API (host/verbs) or the connection manager (host/cm).
//
//	C program ── libibverbs.so.1 (rdma-core's ABI: structures, ops, symbol versions)
//	          └─ librdmacm.so.1
//	                 │ srn_* calls, handles and flat structures (srn.h)
//	                 ▼
//	          libsoftrnic.so: host/verbs, host/cm, the NIC's engines
//
// Every object the C side holds is a handle, an index into a table of
// this package; no Go pointer crosses to C. Memory the C program
// registers is mapped into the device's host memory as it is, at the
// program's own addresses.
package main

import "C"

import (
	"errors"
	"sync"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/host/verbs"
	"golang.org/x/sys/unix"
)

func main() {}

// The program's threads that call the verbs hold a P of the Go runtime
// while they run C code between calls: datapath.SpareProcs.
func init() { datapath.SpareProcs() }

// table holds the objects of one kind by handle. Lookups take a read
// lock; handles are reused once freed.
type table[T any] struct {
	mu   sync.RWMutex
	objs []*T
	free []int32
}

func (t *table[T]) put(o *T) int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.free); n > 0 {
		h := t.free[n-1]
		t.free = t.free[:n-1]
		t.objs[h] = o
		return h
	}
	t.objs = append(t.objs, o)
	return int32(len(t.objs) - 1)
}

func (t *table[T]) get(h C.int) *T {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if h < 0 || int(h) >= len(t.objs) {
		return nil
	}
	return t.objs[h]
}

func (t *table[T]) del(h C.int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h >= 0 && int(h) < len(t.objs) && t.objs[h] != nil {
		t.objs[h] = nil
		t.free = append(t.free, int32(h))
	}
}

// errno maps a verbs error to the errno libibverbs returns for it, and
// keeps its text for srn_last_error.
func errno(err error) C.int {
	if err == nil {
		return 0
	}
	setLastError(err.Error())
	switch {
	case errors.Is(err, verbs.ErrBusy):
		return -C.int(unix.EBUSY)
	case errors.Is(err, verbs.ErrNoResources), errors.Is(err, verbs.ErrQueueFull):
		return -C.int(unix.ENOMEM)
	case errors.Is(err, verbs.ErrClosed):
		return -C.int(unix.ENODEV)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return -C.int(unix.EPERM)
	case errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENOENT):
		return -C.int(unix.ENODEV)
	}
	var en unix.Errno
	if errors.As(err, &en) {
		return -C.int(en)
	}
	return -C.int(unix.EINVAL)
}

var lastError struct {
	sync.Mutex
	text string
}

func setLastError(s string) {
	lastError.Lock()
	lastError.text = s
	lastError.Unlock()
}

// srn_last_error copies the text of the last error into buf (at most len
// bytes, NUL-terminated) and returns its length.
//
//export srn_last_error
func srn_last_error(buf *C.char, n C.int) C.int {
	lastError.Lock()
	s := lastError.text
	lastError.Unlock()
	return C.int(copyCString(buf, n, s))
}
