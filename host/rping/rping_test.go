package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/verbs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type side struct {
	agent *cm.Agent
	e     Endpoint
	qc    cm.QPConfig
}

func open(t *testing.T, p *porttest.Port, ip netip.Addr, mac wire.MAC, resolve func(context.Context, netip.Addr) (wire.MAC, error), size int) *side {
	d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: mac, IP: ip}, Port: p})
	if err != nil {
		t.Fatal(err)
	}
	a, err := cm.NewAgent(d, ip, cm.Config{Resolve: resolve, ResponseTimeout: 14})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); d.Close() })
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(64)
	s := &side{agent: a, e: Endpoint{CQ: cq, Buf: make([]byte, BufSize(size))}}
	if s.e.MR, err = pd.RegMR(s.e.Buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	s.qc = QPConfig(pd, cq)
	s.qc.Prepare = func(qp *verbs.QP) error {
		s.e.QP = qp
		return s.e.PostRecv()
	}
	return s
}

// TestPing: five pings of 100 bytes, validated, between a server and a
// client connected through the CM; the client's disconnect ends the
// server.
func TestPing(t *testing.T) {
	ipA, ipB := netip.MustParseAddr("10.51.0.1"), netip.MustParseAddr("10.51.0.2")
	macs := map[netip.Addr]wire.MAC{ipA: {2, 0, 0, 0, 0x51, 1}, ipB: {2, 0, 0, 0, 0x51, 2}}
	resolve := func(_ context.Context, ip netip.Addr) (wire.MAC, error) { return macs[ip], nil }
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	const size = 100
	client, server := open(t, pa, ipA, macs[ipA], resolve, size), open(t, pb, ipB, macs[ipB], resolve, size)
	l, err := server.agent.Listen(fmt.Sprintf(":%d", Port), server.qc)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sout bytes.Buffer
	serr := make(chan error, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			serr <- err
			return
		}
		serr <- Server(ctx, c, &server.e, Config{Size: size, Verbose: true}, &sout)
	}()
	c, err := client.agent.Dial(ctx, netip.AddrPortFrom(ipB, Port).String(), client.qc)
	if err != nil {
		t.Fatal(err)
	}
	var cout bytes.Buffer
	if err := Client(ctx, c, &client.e, Config{Count: 5, Size: size, Verbose: true, Validate: true}, &cout); err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-serr; err != nil {
		t.Fatalf("server: %v", err)
	}
	for i := range 5 {
		want := fmt.Sprintf("rdma-ping-%d: %c", i, 'A'+i)
		if !strings.Contains(cout.String(), "ping data: "+want) || !strings.Contains(sout.String(), "server ping data: "+want) {
			t.Errorf("ping %d missing:\nclient:\n%s\nserver:\n%s", i, cout.String(), sout.String())
		}
	}
	if n := strings.Count(cout.String(), "\n"); n != 5 {
		t.Errorf("the client printed %d lines, want 5", n)
	}
	line := strings.SplitN(cout.String(), "\n", 2)[0]
	if len(line) != len("ping data: ")+size-1 {
		t.Errorf("a ping of %d bytes printed %d characters: %q", size, len(line)-len("ping data: "), line)
	}
	if errors.Is(err, ErrDisconnected) {
		t.Error(err)
	}
}
