package verbs_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/hpu"
)

// side is one device of the examples with an RC QP and a region.
type side struct {
	dev *verbs.Device
	qp  *verbs.QP
	mr  *verbs.MR
	ah  verbs.AH // how the other side reaches this one
}

// openSide opens a device on port p with one RC QP and a 64-byte region
// the peer may write and read.
func openSide(p *porttest.Port, mac wire.MAC, ip string) side {
	addr := netip.MustParseAddr(ip)
	dev, _ := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: mac, IP: addr}, Port: p})
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	qp, _ := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	mr, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	return side{dev, qp, mr, verbs.AH{DestMAC: mac, DestGID: addr}}
}

// Two devices joined by an in-memory link, their RC QPs connected: a
// WRITE into the peer's region, then a READ of it back into a cleared
// buffer. Over a real network the devices take the ports of package xsk
// or udpport (package rnic opens them on a netdev).
func Example_writeRead() {
	pa, pb := porttest.NewPair(porttest.Config{})
	a := openSide(pa, wire.MAC{2, 0, 0, 0, 0, 1}, "10.47.0.1")
	defer a.dev.Close()
	b := openSide(pb, wire.MAC{2, 0, 0, 0, 0, 2}, "10.47.0.2")
	defer b.dev.Close()
	if err := verbs.ConnectRC(a.qp, b.qp, a.ah, b.ah, 3, 14); err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	region := b.mr.Remote() // what b would send a over its own channel
	copy(a.mr.Buf, "hello, remote memory")
	if _, err := a.qp.Do(ctx, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: a.mr.SGL(), RemoteAddr: region.Addr, RKey: region.RKey}); err != nil {
		fmt.Println(err)
		return
	}
	clear(a.mr.Buf)
	if _, err := a.qp.Do(ctx, verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: a.mr.SGL(), RemoteAddr: region.Addr, RKey: region.RKey}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s\n", a.mr.Buf[:20])
	// Output: hello, remote memory
}

// A handler on the receiving QP sums the int32 elements of every WRITE
// it takes, in handler memory instead of the region: the NIC
// acknowledges the WRITE once the handlers are done.
func ExampleQP_AttachHandlers() {
	pa, pb := porttest.NewPair(porttest.Config{})
	a := openSide(pa, wire.MAC{2, 0, 0, 0, 0, 1}, "10.47.0.1")
	defer a.dev.Close()
	b := openSide(pb, wire.MAC{2, 0, 0, 0, 0, 2}, "10.47.0.2")
	defer b.dev.Close()
	done := make(chan error, 1)
	sum, err := b.qp.AttachHandlers(hpu.Context{
		Name:       "sum",
		MemorySize: 8,
		Payload: func(t *hpu.Task) hpu.Action {
			var s int64
			for p := t.Packet.Payload; len(p) >= 4; p = p[4:] {
				s += int64(int32(binary.LittleEndian.Uint32(p)))
			}
			t.Mem.AddInt64(0, s)
			return hpu.Success
		},
		Done: func(_ *hpu.Message, err error) { done <- err },
	}, verbs.Match{Ops: verbs.MatchWrite})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := verbs.ConnectRC(a.qp, b.qp, a.ah, b.ah, 3, 14); err != nil {
		fmt.Println(err)
		return
	}
	for i := range 4 {
		binary.LittleEndian.PutUint32(a.mr.Buf[4*i:], uint32(i+1)) // 1, 2, 3, 4
	}
	region := b.mr.Remote()
	_, err = a.qp.Do(context.Background(), verbs.SendWR{Opcode: verbs.WRRDMAWrite,
		SGL: []verbs.SGE{{Addr: a.mr.Addr, Length: 16, LKey: a.mr.LKey}}, RemoteAddr: region.Addr, RKey: region.RKey})
	fmt.Println(err, <-done, sum.Memory().Load64(0))
	// Output: <nil> <nil> 10
}
