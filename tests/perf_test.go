package tests

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
	"github.com/softrnic/softrnic/host/perftest"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/internal/testenv"
	"github.com/softrnic/softrnic/internal/topo"
)

// TestPerfVeth runs softrnic perf's tests between two softrnic NICs in two
// namespaces across a veth pair (xsk port), with the exchange over TCP
// between the namespaces, and checks each side prints perftest's table:
// the same column header line as perftest's own output (from the rxe
// logs) and a row with as many fields.
func TestPerfVeth(t *testing.T) {
	headers := perftestHeaders(t)
	spec := topo.PairSpec(9000, 1)
	tp := topo.New(t, spec)
	l := spec.Links[0]
	macs := map[netip.Addr]wire.MAC{l.A.Addrs[0].Addr(): wire.MAC(l.A.MAC), l.B.Addrs[0].Addr(): wire.MAC(l.B.MAC)}
	resolve := func(_ context.Context, ip netip.Addr) (wire.MAC, error) { return macs[ip], nil }
	env := func(ns string, end topo.End) perftest.Env {
		p := openPort(t, tp.NS(ns), end, "xsk")
		d, err := verbs.Open(verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: wire.MAC(end.MAC), IP: end.Addrs[0].Addr()}, Port: p, MTU: spec.Links[0].MTU})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return perftest.Env{Dev: d, GID: end.Addrs[0].Addr(), PortMTU: 5, Resolve: resolve, DevName: end.Name}
	}
	server, client := env("a", l.A), env("b", l.B)
	for _, cfg := range []perftest.Config{
		{Test: perftest.WriteBW, Iters: 2000},
		{Test: perftest.ReadBW, Iters: 1000},
		{Test: perftest.SendBW, Iters: 1000},
		{Test: perftest.AtomicBW, Iters: 1000},
		{Test: perftest.WriteLat, Iters: 1000},
		{Test: perftest.SendLat, Iters: 1000},
		{Test: perftest.ReadLat, Iters: 1000},
		{Test: perftest.WriteBW, All: true, Iters: 20, Gbits: true},
	} {
		name := cfg.Test.String()
		if cfg.All {
			name += "/all-sizes"
		}
		t.Run(name, func(t *testing.T) {
			sout, cout := perfPair(t, tp, server, client, cfg)
			kind := "bw"
			if !cfg.Test.BW() {
				kind = "lat"
			}
			want := headers[kind]
			if cfg.Gbits {
				want = strings.ReplaceAll(want, "MB/sec", "Gb/sec")
			}
			for side, out := range map[string]string{"client": cout, "server": sout} {
				if cfg.Test == perftest.ReadLat && side == "server" {
					continue // the passive side prints no table, as perftest's
				}
				rows := tableRows(out, want)
				if rows == nil {
					t.Fatalf("%s: no line %q in\n%s", side, want, out)
				}
				wantRows := 1
				if cfg.All && side == "client" {
					wantRows = 23 // 2 B to 8 MiB
				}
				if len(rows) != wantRows {
					t.Fatalf("%s: %d rows, want %d:\n%s", side, len(rows), wantRows, out)
				}
				fields := len(strings.Fields(want)) - 2 // "#bytes #iterations" and the units are one field each
				if kind == "lat" {
					fields = 9
				}
				for _, r := range rows {
					if f := strings.Fields(r); len(f) != fields {
						t.Errorf("%s: row %q has %d fields, want %d", side, r, len(f), fields)
					}
				}
			}
			t.Logf("client:\n%s", cout)
		})
	}
}

// perfPair runs one test: the server in namespace a, the client in b.
func perfPair(t *testing.T, tp *topo.Topo, server, client perftest.Env, cfg perftest.Config) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ln net.Listener
	if err := tp.NS("a").Do(func() (err error) {
		ln, err = net.Listen("tcp", "0.0.0.0:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	var sout, cout bytes.Buffer
	serr := make(chan error, 1)
	go func() {
		c, err := perftest.Accept(ctx, ln)
		if err != nil {
			serr <- err
			return
		}
		defer c.Close()
		_, err = perftest.Run(ctx, server, c, cfg, &sout)
		serr <- err
	}()
	var conn *perftest.Conn
	if err := tp.NS("b").Do(func() (err error) {
		conn, err = perftest.Dial(ctx, net.JoinHostPort(server.GID.String(), port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := perftest.Run(ctx, client, conn, cfg, &cout); err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	if err := <-serr; err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	return sout.String(), cout.String()
}

// perftestHeaders reads perftest's own table header lines from the rxe
// runs' logs.
func perftestHeaders(t *testing.T) map[string]string {
	t.Helper()
	shared, err := wiretest.SharedDir()
	if err != nil {
		testenv.Unavailable(t, "perftest's logs are needed: %v", err)
	}
	dir := filepath.Join(shared, "testdata", "rxe", "logs")
	h := map[string]string{}
	for kind, file := range map[string]string{"bw": "write_bw_s2.client.txt", "lat": "write_lat.client.txt"} {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), " #bytes") {
				h[kind] = sc.Text()
			}
		}
		f.Close()
		if h[kind] == "" {
			t.Fatalf("%s: no header line", file)
		}
	}
	return h
}

// tableRows returns the rows under the header line, up to the closing
// rule; nil without the header.
func tableRows(out, header string) []string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if l != header {
			continue
		}
		rows := []string{}
		for _, r := range lines[i+1:] {
			if strings.HasPrefix(r, "-----") || r == "" {
				break
			}
			rows = append(rows, r)
		}
		return rows
	}
	return nil
}
