package pingpong

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
)

// pair opens two devices joined by an in-memory link.
// The NICs run in the programs' polling (datapath.PollApp, softrnic
// pingpong's default) unless link.Poll says otherwise.
func pair(t *testing.T, link porttest.Config) (Env, Env) { return pairPoll(t, link, datapath.PollApp) }

func pairPoll(t *testing.T, link porttest.Config, poll datapath.PollMode) (Env, Env) {
	pa, pb := porttest.NewPair(link)
	macs := map[netip.Addr]wire.MAC{
		netip.MustParseAddr("10.48.0.1"): {2, 0, 0, 0, 0, 1},
		netip.MustParseAddr("10.48.0.2"): {2, 0, 0, 0, 0, 2},
	}
	resolve := func(_ context.Context, ip netip.Addr) (wire.MAC, error) { return macs[ip], nil }
	open := func(p *porttest.Port, ip string) Env {
		a := netip.MustParseAddr(ip)
		d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: macs[a], IP: a, Poll: poll}, Port: p})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return Env{Dev: d, GID: a, Resolve: resolve}
	}
	return open(pa, "10.48.0.1"), open(pb, "10.48.0.2")
}

// countingConn counts the bytes a side writes on the socket.
type countingConn struct {
	net.Conn
	n atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

type side struct {
	res     Result
	out     string
	err     error
	written int64
}

// runPair runs a server and a client over loopback TCP.
func runPair(t *testing.T, se, ce Env, scfg, ccfg Config) (server, client side) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			server.err = err
			return
		}
		defer c.Close()
		cc := &countingConn{Conn: c}
		var out bytes.Buffer
		server.res, server.err = Run(ctx, se, cc, true, scfg, &out)
		server.out, server.written = out.String(), cc.n.Load()
		if server.err != nil {
			cancel() // the client waits for a peer that gave up
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc := &countingConn{Conn: c}
	var out bytes.Buffer
	client.res, client.err = Run(ctx, ce, cc, false, ccfg, &out)
	client.out, client.written = out.String(), cc.n.Load()
	if client.err != nil {
		cancel()
	}
	<-done
	return server, client
}

func TestPingPong(t *testing.T) {
	for _, tc := range []struct {
		cfg     Config
		poll    datapath.PollMode
		qps     int
		written int // bytes the server writes on the socket
	}{
		{Config{Kind: RC, Iters: 300}, datapath.PollApp, 1, MsgSize},
		{Config{Kind: RC, Iters: 20, Size: 100}, datapath.PollSleep, 1, MsgSize},
		{Config{Kind: RC, Iters: 100, Size: 10000, MTU: 256, RxDepth: 4, Check: true}, datapath.PollApp, 1, MsgSize},
		{Config{Kind: UC, Iters: 300, Size: 3000}, datapath.PollApp, 1, MsgSize},
		{Config{Kind: UD, Iters: 300}, datapath.PollApp, 1, MsgSize},
		{Config{Kind: UD, Iters: 100, Size: 1, Events: true}, datapath.PollApp, 1, MsgSize},
		{Config{Kind: SRQ, Iters: 400, NumQP: 4, RxDepth: 8, Check: true}, datapath.PollApp, 4, srqMsgs * MsgSize},
		{Config{Kind: SRQ, Iters: 160}, datapath.PollApp, 16, srqMsgs * MsgSize},
	} {
		t.Run(tc.cfg.Kind.String()+"-"+tc.poll.String(), func(t *testing.T) {
			se, ce := pairPoll(t, porttest.Config{Buffers: 8192}, tc.poll)
			s, c := runPair(t, se, ce, tc.cfg, tc.cfg)
			if s.err != nil || c.err != nil {
				t.Fatalf("server: %v\n%s\nclient: %v\n%s", s.err, s.out, c.err, c.out)
			}
			cfg, _ := tc.cfg.WithDefaults()
			for name, x := range map[string]side{"server": s, "client": c} {
				// SRQ's QPs each send until the total reaches -n: up to
				// one more per QP may be in flight when it does.
				if x.res.Received < cfg.Iters || x.res.Received > cfg.Iters+tc.qps-1 {
					t.Errorf("%s received %d messages, want %d (up to %d more with SRQ)", name, x.res.Received, cfg.Iters, tc.qps-1)
				}
				if len(x.res.Local) != tc.qps || len(x.res.Remote) != tc.qps {
					t.Errorf("%s: %d local and %d remote destinations, want %d", name, len(x.res.Local), len(x.res.Remote), tc.qps)
				}
				for _, want := range []string{"  local address:  LID 0x0000, QPN 0x", "  remote address: LID 0x0000, QPN 0x",
					" bytes in ", " Mbit/sec\n", " iters in ", " usec/iter\n"} {
					if !strings.Contains(x.out, want) {
						t.Errorf("%s's report lacks %q:\n%s", name, want, x.out)
					}
				}
			}
			for i := range tc.qps {
				if s.res.Remote[i] != c.res.Local[i] || c.res.Remote[i] != s.res.Local[i] {
					t.Errorf("QP %d: the sides exchanged wrong destinations: server %+v / %+v, client %+v / %+v",
						i, s.res.Local[i], s.res.Remote[i], c.res.Local[i], c.res.Remote[i])
				}
			}
			// The C programs read exactly these byte counts.
			if s.written != int64(tc.written) || c.written != int64(tc.written+len(doneMsg)) {
				t.Errorf("socket: server wrote %d bytes, client %d; want %d and %d", s.written, c.written, tc.written, tc.written+len(doneMsg))
			}
		})
	}
}

// A run over a link that loses packets still completes: RC repairs the
// losses.
func TestPingPongRCLossy(t *testing.T) {
	se, ce := pair(t, porttest.Config{Buffers: 8192, Loss: 0.02, Seed: 7})
	cfg := Config{Kind: RC, Iters: 200, Size: 2048}
	s, c := runPair(t, se, ce, cfg, cfg)
	if s.err != nil || c.err != nil {
		t.Fatalf("server: %v\nclient: %v", s.err, c.err)
	}
	if s.res.Received != 200 || c.res.Received != 200 {
		t.Fatalf("received %d and %d, want 200", s.res.Received, c.res.Received)
	}
}

// Peers that disagree are told so, not left waiting.
func TestPingPongMismatch(t *testing.T) {
	t.Run("size", func(t *testing.T) {
		se, ce := pair(t, porttest.Config{Buffers: 8192})
		s, _ := runPair(t, se, ce, Config{Kind: UD, Size: 100, Iters: 10}, Config{Kind: UD, Size: 50, Iters: 10})
		if s.err == nil || !strings.Contains(s.err.Error(), "received 90 bytes, expected 140") {
			t.Fatalf("server: %v", s.err)
		}
	})
	t.Run("qps", func(t *testing.T) {
		se, ce := pair(t, porttest.Config{Buffers: 8192})
		s, c := runPair(t, se, ce, Config{Kind: SRQ, NumQP: 4, Iters: 10}, Config{Kind: SRQ, NumQP: 2, Iters: 10})
		if s.err == nil || !strings.Contains(s.err.Error(), "no QP number for QP 2") {
			t.Fatalf("server: %v (client: %v)", s.err, c.err)
		}
	})
}

func TestConfig(t *testing.T) {
	c, err := Config{Kind: UD}.WithDefaults()
	if err != nil || c.Size != 2048 || c.RxDepth != 500 || c.Iters != 1000 || c.MTU != 1024 {
		t.Fatalf("UD defaults: %+v, %v", c, err)
	}
	if c, _ := (Config{Kind: SRQ}).WithDefaults(); c.Size != 4096 || c.NumQP != 16 {
		t.Fatalf("SRQ defaults: %+v", c)
	}
	for _, bad := range []Config{
		{Kind: RC, Size: -1}, {Kind: RC, MTU: 1500}, {Kind: RC, RxDepth: 1}, {Kind: RC, Iters: -1},
		{Kind: SRQ, NumQP: 600, RxDepth: 1000}, {Kind: SRQ, NumQP: 20, RxDepth: 10}, {Kind: UD, Check: true}, {Kind: 9},
	} {
		if _, err := bad.WithDefaults(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if k, err := ParseKind("srq"); err != nil || k != SRQ || k.Program() != "ibv_srq_pingpong" {
		t.Errorf("ParseKind(srq) = %v, %v", k, err)
	}
	if _, err := ParseKind("xrc"); err == nil {
		t.Error("ParseKind(xrc): no error")
	}
}
