package perftest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
)

// pairEnv opens two devices joined by an in-memory link.
func pairEnv(t *testing.T) (Env, Env) { return pairEnvLink(t, porttest.Config{Buffers: 8192}) }

// pairEnvLink is pairEnv over a link with faults.
func pairEnvLink(t *testing.T, link porttest.Config) (Env, Env) {
	pa, pb := porttest.NewPair(link)
	macs := map[netip.Addr]wire.MAC{
		netip.MustParseAddr("10.47.0.1"): {2, 0, 0, 0, 0, 1},
		netip.MustParseAddr("10.47.0.2"): {2, 0, 0, 0, 0, 2},
	}
	resolve := func(_ context.Context, ip netip.Addr) (wire.MAC, error) { return macs[ip], nil }
	open := func(p *porttest.Port, ip string) Env {
		a := netip.MustParseAddr(ip)
		d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: macs[a], IP: a}, Port: p})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return Env{Dev: d, GID: a, PortMTU: 3, Resolve: resolve, DevName: "softrnic0"}
	}
	return open(pa, "10.47.0.1"), open(pb, "10.47.0.2")
}

// runPair runs a test's server and client over loopback TCP and returns
// both outputs.
func runPair(t *testing.T, cfg Config) (server, client string, sres, cres []Result) {
	t.Helper()
	se, ce := pairEnv(t)
	return runEnvs(t, se, ce, cfg, cfg)
}

// runEnvs is runPair on two given devices, each side with its own flags.
func runEnvs(t *testing.T, se, ce Env, scfg, ccfg Config) (server, client string, sres, cres []Result) {
	t.Helper()
	server, client, sres, cres, serr, cerr := runSides(t, se, ce, scfg, ccfg)
	if cerr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, client, serr, server)
	}
	if serr != nil {
		t.Fatalf("server: %v\n%s", serr, server)
	}
	return server, client, sres, cres
}

// runSides runs a server on se and a client on ce over a TCP exchange on
// loopback and returns both sides' output, results and errors.
func runSides(t *testing.T, se, ce Env, scfg, ccfg Config) (server, client string, sres, cres []Result, serr, cerr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sout, cout bytes.Buffer
	done := make(chan error, 1)
	go func() {
		c, err := Accept(ctx, ln)
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		sres, err = Run(ctx, se, c, scfg, &sout)
		done <- err
	}()
	c, err := Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cres, cerr = Run(ctx, ce, c, ccfg, &cout)
	c.Close() // a server still in a step sees the client gone
	serr = <-done
	return sout.String(), cout.String(), sres, cres, serr, cerr
}

// TestRunPair runs every test between two softrnic devices and checks
// both sides report what perftest would: the table's header and a row of
// figures for every size.
func TestRunPair(t *testing.T) {
	for _, tc := range []struct {
		cfg        Config
		serverRows bool // the server prints a table too
	}{
		{Config{Test: WriteBW, Iters: 200, Size: 4096}, true},
		{Config{Test: ReadBW, Iters: 200, Size: 3000}, true},
		{Config{Test: SendBW, Iters: 200, Size: 1024}, true},
		{Config{Test: AtomicBW, Iters: 200, Atomic: CmpAndSwap}, true},
		{Config{Test: AtomicBW, Iters: 200}, true},
		{Config{Test: WriteLat, Iters: 100}, true},
		{Config{Test: SendLat, Iters: 100}, true},
		{Config{Test: ReadLat, Iters: 100}, false},
		{Config{Test: AtomicLat, Iters: 100}, false},
		{Config{Test: WriteBW, Iters: 50, Gbits: true, Size: 65536}, true},
		{Config{Test: WriteBW, Iters: 200, Size: 3000, QPs: 3}, true},
		{Config{Test: ReadBW, Iters: 100, Size: 5000, QPs: 4}, true},
		{Config{Test: SendBW, Iters: 200, Size: 100, QPs: 2}, true},
		{Config{Test: AtomicBW, Iters: 100, QPs: 5}, true},
	} {
		name := tc.cfg.Test.String()
		if tc.cfg.QPs > 1 {
			name += fmt.Sprintf("/q%d", tc.cfg.QPs)
		}
		t.Run(name, func(t *testing.T) {
			sout, cout, sres, cres := runPair(t, tc.cfg)
			header := "BW average["
			if !tc.cfg.Test.BW() {
				header = "t_typical[usec]"
			}
			for side, out := range map[string]string{"client": cout, "server": sout} {
				if n := strings.Count(out, "remote address: LID 0000 QPN"); n != max(1, tc.cfg.QPs) {
					t.Errorf("%s output shows %d remote addresses:\n%s", side, n, out)
				}
				if (side == "client" || tc.serverRows) != strings.Contains(out, header) {
					t.Errorf("%s output: table header %q expected %v:\n%s", side, header, side == "client" || tc.serverRows, out)
				}
			}
			if len(cres) != 1 || cres[0].Iters != tc.cfg.Iters*max(1, tc.cfg.QPs) {
				t.Fatalf("client results %+v", cres)
			}
			r := cres[0]
			if tc.cfg.Test.BW() && (r.BWAvg <= 0 || r.MsgRate <= 0 || r.BWPeak < r.BWAvg*0.999) {
				// The peak is the best rate over any run of messages (over
				// all QPs); the whole run is one, at the average rate.
				t.Errorf("bandwidth figures %+v", r)
			}
			if !tc.cfg.Test.BW() && !(r.TMin > 0 && r.TMin <= r.TTypical && r.TTypical <= r.TMax && r.P99 <= r.TMax*1.001 && r.P99 >= r.TTypical) {
				t.Errorf("latency figures %+v", r)
			}
			if tc.serverRows != (len(sres) == 1) {
				t.Errorf("server results %+v", sres)
			}
			t.Logf("client:\n%s", cout)
		})
	}
}

// TestRunBidir: with -b both sides send, and both print the sum of their
// own and the peer's figures.
func TestRunBidir(t *testing.T) {
	for _, cfg := range []Config{
		{Test: WriteBW, Iters: 300, Size: 4096},
		{Test: ReadBW, Iters: 200, Size: 3000, QPs: 2},
		{Test: SendBW, Iters: 300, Size: 2048},
		{Test: SendBW, Iters: 100, Size: 100, QPs: 3},
	} {
		cfg.Bidir = true
		t.Run(fmt.Sprintf("%v/q%d/all=%v", cfg.Test, cfg.QPs, cfg.All), func(t *testing.T) {
			se, ce := pairEnv(t)
			sout, cout, sres, cres := runEnvs(t, se, ce, cfg, cfg)
			if len(sres) == 0 || len(sres) != len(cres) {
				t.Fatalf("server results %+v, client %+v\nserver:\n%s\nclient:\n%s", sres, cres, sout, cout)
			}
			for i := range cres {
				c, s := cres[i], sres[i]
				if c.BWAvg <= 0 || c.BWAvg != s.BWAvg || c.MsgRate != s.MsgRate || c.BWPeak != s.BWPeak || c.Bytes != s.Bytes {
					t.Errorf("size %d: the sides print different sums: client %+v, server %+v", c.Bytes, c, s)
				}
			}
			// Both NICs sent the data: each side's requests reached the
			// other (WRITE and SEND: the packets each sent; READ: each
			// answered the other's).
			for name, e := range map[string]Env{"server": se, "client": ce} {
				var sends, recvd uint64
				e.Dev.NIC().Counters().Each(func(n string, v uint64) {
					switch n {
					case "sent_pkts":
						sends = v
					case "rcvd_pkts":
						recvd = v
					}
				})
				if min(sends, recvd) < uint64(cfg.Iters*max(1, cfg.QPs)) {
					t.Errorf("%s NIC sent %d and received %d packets: not both directions", name, sends, recvd)
				}
			}
			if !strings.Contains(sout, "BW average[") || !strings.Contains(cout, "BW average[") {
				t.Errorf("a side printed no table:\nserver:\n%s\nclient:\n%s", sout, cout)
			}
		})
	}
	if err := (Config{Test: WriteLat, Bidir: true}).Check(); err == nil {
		t.Error("-b accepted for write-lat")
	}
}

// TestRunDurationSendAndLatency: -D on send-bw (each side measures its
// own window: the client what it sent, the server what it received) and
// on the latency tests (the mean over the window, and round trips a
// second, as perftest prints them).
func TestRunDurationSendAndLatency(t *testing.T) {
	for _, cfg := range []Config{
		{Test: SendBW, Size: 1024, Duration: 3 * time.Second},
		{Test: WriteLat, Duration: 3 * time.Second},
		{Test: SendLat, Duration: 3 * time.Second},
		{Test: ReadLat, Duration: 3 * time.Second},
	} {
		t.Run(cfg.Test.String(), func(t *testing.T) {
			sout, cout, sres, cres := runPair(t, cfg)
			if len(cres) != 1 || cres[0].Iters <= 0 {
				t.Fatalf("client results %+v\n%s", cres, cout)
			}
			c := cres[0]
			switch {
			case cfg.Test.BW():
				if len(sres) != 1 || sres[0].Iters <= 0 || sres[0].BWAvg <= 0 || c.BWAvg <= 0 {
					t.Fatalf("results: client %+v, server %+v", c, sres)
				}
				// The windows are a second apart at most: the rates agree
				// within a factor.
				if r := sres[0].BWAvg / c.BWAvg; r < 0.5 || r > 2 {
					t.Errorf("server %.2f and client %.2f disagree", sres[0].BWAvg, c.BWAvg)
				}
			default:
				div := 2.0
				if cfg.Test == ReadLat {
					div = 1
				}
				// t_avg and tps describe one window: t_avg x tps x div is
				// one second.
				if c.TAvg <= 0 || c.TPS <= 0 || math.Abs(c.TAvg*c.TPS*div/1e6-1) > 0.01 {
					t.Errorf("latency figures %+v", c)
				}
				if !strings.Contains(cout, "t_avg[usec]    tps average") {
					t.Errorf("client printed no duration table:\n%s", cout)
				}
				if cfg.Test != ReadLat && (len(sres) != 1 || sres[0].Iters <= 0 || sres[0].TAvg <= 0) {
					t.Errorf("server results %+v\n%s", sres, sout)
				}
			}
		})
	}
}

// TestRunDuration: with -D the client runs for the duration, measures the
// middle (a quarter of warm-up and of cool-down, in whole seconds) and reports how many
// messages completed in it; the server prints the same figures.
func TestRunDuration(t *testing.T) {
	_, _, sres, cres := runPair(t, Config{Test: WriteBW, Size: 1024, Duration: 3 * time.Second})
	if len(cres) != 1 || cres[0].Iters <= 0 || cres[0].BWAvg <= 0 || cres[0].BWPeak != 0 {
		t.Fatalf("client results %+v", cres)
	}
	if len(sres) != 1 || sres[0].Iters != cres[0].Iters || sres[0].BWAvg != cres[0].BWAvg {
		t.Fatalf("server results %+v, client %+v", sres, cres)
	}
	for _, c := range []Config{{Test: WriteBW, Duration: time.Second / 2}, {Test: SendBW, Duration: 3 * time.Second, All: true}, {Test: SendBW, Duration: 3 * time.Second, Bidir: true}} {
		if err := c.Check(); err == nil {
			t.Errorf("%v with -D %v accepted", c.Test, c.Duration)
		}
	}
}

// TestSelectiveRepeatAgreed: --sr on both sides agrees selective repeat
// through the keys exchange, and over a lossy link the server places
// WRITE packets that come ahead of order; with --sr on one side only,
// both stay on go-back-N.
func TestSelectiveRepeatAgreed(t *testing.T) {
	for _, both := range []bool{true, false} {
		se, ce := pairEnvLink(t, porttest.Config{Buffers: 8192, Loss: 0.02, Seed: 3})
		scfg := Config{Test: WriteBW, Iters: 100, Size: 65536, SR: true}
		ccfg := scfg
		ccfg.SR = both // without it, the server alone asks
		runEnvs(t, se, ce, scfg, ccfg)
		placed := se.Dev.NIC().Counters().PlacedAhead.Load()
		if both != (placed > 0) {
			t.Errorf("both ask %v: %d packets placed ahead", both, placed)
		}
	}
}
