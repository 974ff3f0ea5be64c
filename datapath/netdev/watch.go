package netdev

import (
	"fmt"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// LinkUp reports whether the device is up with its carrier (IFF_UP and
// IFF_RUNNING): the RDMA port's ACTIVE state, as rxe derives it.
func (d *Device) LinkUp() bool {
	l, err := d.nl.LinkByIndex(d.Index)
	return err == nil && linkUp(l)
}

func linkUp(l netlink.Link) bool {
	f := l.Attrs().RawFlags
	return f&unix.IFF_UP != 0 && f&unix.IFF_RUNNING != 0
}

// WatchLink calls fn with the device's state (LinkUp) each time it
// changes, from a goroutine of its own, until done is closed. It returns
// once it follows the link, or the error that stops it from doing so. The
// netlink socket belongs to the calling thread's network namespace.
func (d *Device) WatchLink(done <-chan struct{}, fn func(up bool)) error {
	updates := make(chan netlink.LinkUpdate, 16)
	if err := netlink.LinkSubscribe(updates, done); err != nil {
		return fmt.Errorf("netdev: following %s's link: %w", d.Name, err)
	}
	up := d.LinkUp()
	go func() {
		for u := range updates { // closed once done is
			if int(u.Index) != d.Index {
				continue
			}
			if now := linkUp(u.Link); now != up {
				up = now
				fn(up)
			}
		}
	}()
	return nil
}

// CountDowns follows the link (WatchLink) and adds one to downs each time
// it goes down: a NIC's link_downed, as rxe counts its port going down.
// stop ends it.
func (d *Device) CountDowns(downs *atomic.Uint64) (stop func(), err error) {
	done := make(chan struct{})
	if err := d.WatchLink(done, func(up bool) {
		if !up {
			downs.Add(1)
		}
	}); err != nil {
		return nil, err
	}
	return func() { close(done) }, nil
}
