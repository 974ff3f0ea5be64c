package rnic_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/rnic"
	"github.com/softrnic/softrnic/host/verbs"
)

// Two devices on the loopback device's kernel UDP port (no root needed):
// the server offers a region in its listener's private data; the client
// connects through the connection manager, WRITEs into the region and
// READs it back. Between hosts, name their netdevs and leave Port empty
// (AF_XDP as root).
func Example() {
	ctx := context.Background()
	srv, _ := rnic.Open("lo", rnic.Config{Port: "udp", Addr: netip.MustParseAddr("127.0.0.1")})
	defer srv.Close()
	cli, _ := rnic.Open("lo", rnic.Config{Port: "udp", Addr: netip.MustParseAddr("127.0.0.2")})
	defer cli.Close()

	mem, _ := srv.CM.PD().RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	offer, _ := mem.Remote().MarshalBinary()
	l, _ := srv.CM.Listen("127.0.0.1:7471", cm.QPConfig{Private: offer})
	go l.Accept(ctx)

	conn, _ := cli.CM.Dial(ctx, "127.0.0.1:7471", cm.QPConfig{})
	var region verbs.RemoteRegion
	region.UnmarshalBinary(conn.Private)
	buf, _ := conn.PD.RegMR([]byte("hello, remote memory"), verbs.AccessLocalWrite)
	conn.QP.Do(ctx, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: buf.SGL(), RemoteAddr: region.Addr, RKey: region.RKey})
	copy(buf.Buf, "....................")
	conn.QP.Do(ctx, verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: buf.SGL(), RemoteAddr: region.Addr, RKey: region.RKey})
	fmt.Println(string(buf.Buf))
	// Output: hello, remote memory
}
