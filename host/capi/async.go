package main

/*
#define SRN_GO
#include "srn.h"
*/
import "C"

import (
	"encoding/binary"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A device's asynchronous events (ibv_get_async_event): its port going
// up or down with its netdev (IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR)
// and its GID table changing with the netdev's addresses
// (IBV_EVENT_GID_CHANGE), written to every open context's async pipe as
// an srn_async_event.
const (
	evPortActive = 9
	evPortErr    = 10
	evGIDChange  = 18
)

// srn_async adds (add != 0) or removes an open context's async pipe.
//
//export srn_async
func srn_async(h C.int, fd C.int, add C.int) C.int {
	d := devices.t.get(h)
	if d == nil {
		return -C.int(unix.EINVAL)
	}
	d.asyncMu.Lock()
	defer d.asyncMu.Unlock()
	if add == 0 {
		d.asyncFDs = slices.DeleteFunc(d.asyncFDs, func(f int) bool { return f == int(fd) })
		return 0
	}
	d.asyncFDs = append(d.asyncFDs, int(fd))
	if d.watch == nil {
		d.watch = make(chan struct{})
		go d.watchPort(d.watch)
		d.undo = append(d.undo, func() { close(d.watch) })
	}
	return 0
}

// watchPort follows the netdev's link (netdev.WatchLink) and addresses
// until done.
func (d *device) watchPort(done chan struct{}) {
	err := d.nd.WatchLink(done, func(up bool) {
		if up {
			d.asyncEvent(evPortActive)
		} else {
			d.asyncEvent(evPortErr)
		}
	})
	if err != nil {
		return
	}
	addrs := make(chan netlink.AddrUpdate, 16)
	if err := netlink.AddrSubscribe(addrs, done); err != nil {
		return
	}
	for u := range addrs { // closed once done is
		if u.LinkIndex == d.nd.Index {
			d.nd.Refresh()
			d.asyncEvent(evGIDChange)
		}
	}
}

func (d *device) asyncEvent(kind uint32) {
	var b [8]byte
	binary.NativeEndian.PutUint32(b[0:], kind)
	binary.NativeEndian.PutUint32(b[4:], 1) // port 1
	d.asyncMu.Lock()
	defer d.asyncMu.Unlock()
	for _, fd := range d.asyncFDs {
		unix.Write(fd, b[:]) // non-blocking: a program that never reads loses events, the NIC nothing
	}
}
