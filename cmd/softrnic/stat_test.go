package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/metrics"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// cannedMetrics is a scrape in the shape host/metrics serves: families in
// name order, each with HELP and TYPE, and the Go runtime's beside them.
const cannedMetrics = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 12
# HELP softrnic_cache_lookups context cache lookups
# TYPE softrnic_cache_lookups counter
softrnic_cache_lookups{context="mrc",device="veth0"} 5
softrnic_cache_lookups{context="qpc",device="veth0"} 20
# HELP softrnic_duplicate_request the NIC's duplicate request
# TYPE softrnic_duplicate_request counter
softrnic_duplicate_request{device="veth0"} 0
softrnic_duplicate_request{device="veth1"} 2
# HELP softrnic_port_tx_frames frames a port queue sent
# TYPE softrnic_port_tx_frames counter
softrnic_port_tx_frames{device="veth0",queue="0"} 100
softrnic_port_tx_frames{device="veth0",queue="1"} 23
# HELP softrnic_rcvd_pkts the NIC's rcvd pkts (rxe's name where rxe has one)
# TYPE softrnic_rcvd_pkts counter
softrnic_rcvd_pkts{device="veth0"} 456
softrnic_rcvd_pkts{device="veth1"} 7 1700000000000
# HELP softrnic_replay_entries_in_use the NIC's replay entries in use
# TYPE softrnic_replay_entries_in_use gauge
softrnic_replay_entries_in_use{device="veth0"} 3
# HELP softrnic_retransmits the NIC's retransmits
# TYPE softrnic_retransmits counter
softrnic_retransmits{device="veth0"} 1
# HELP softrnic_sent_pkts the NIC's sent pkts (rxe's name where rxe has one)
# TYPE softrnic_sent_pkts counter
softrnic_sent_pkts{device="veth0"} 1.23e+08
softrnic_sent_pkts { device = "veth1" , } 8
`

// TestStatFormat: the parser and the printer on a canned scrape. rxe's
// counters come first in rxe's order, the NIC's others next, the rest in
// the scrape's order; per-queue and per-context series are summed, or
// kept apart with -d; the Go runtime's metrics are left out.
func TestStatFormat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		details bool
		json    bool
		want    string
	}{
		{"text", false, false, "link veth0/1 sent_pkts 123000000 rcvd_pkts 456 duplicate_request 0 retransmits 1 replay_entries_in_use 3 cache_lookups 25 port_tx_frames 123\n" +
			"link veth1/1 sent_pkts 8 rcvd_pkts 7 duplicate_request 2\n"},
		{"details", true, false, "link veth0/1 sent_pkts 123000000 rcvd_pkts 456 duplicate_request 0 retransmits 1 replay_entries_in_use 3 cache_lookups[context=mrc] 5 cache_lookups[context=qpc] 20 port_tx_frames[queue=0] 100 port_tx_frames[queue=1] 23\n" +
			"link veth1/1 sent_pkts 8 rcvd_pkts 7 duplicate_request 2\n"},
		{"json", false, true, `[{"ifname":"veth0","port":1,"sent_pkts":123000000,"rcvd_pkts":456,"duplicate_request":0,"retransmits":1,"replay_entries_in_use":3,"cache_lookups":25,"port_tx_frames":123},` +
			`{"ifname":"veth1","port":1,"sent_pkts":8,"rcvd_pkts":7,"duplicate_request":2}]` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseProm(strings.NewReader(cannedMetrics))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := printCounters(&out, softrnicCounters(s, tc.details), tc.json, nil); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", out.String(), tc.want)
			}
		})
	}

	// Rates: counters that moved as NAME RATE/s, gauges that changed,
	// "idle" for a device where nothing did.
	s0, _ := parseProm(strings.NewReader(cannedMetrics))
	later := strings.NewReplacer(`softrnic_rcvd_pkts{device="veth0"} 456`, `softrnic_rcvd_pkts{device="veth0"} 476`,
		`softrnic_replay_entries_in_use{device="veth0"} 3`, `softrnic_replay_entries_in_use{device="veth0"} 5`,
		`queue="1"} 23`, `queue="1"} 24`).Replace(cannedMetrics)
	s1, err := parseProm(strings.NewReader(later))
	if err != nil {
		t.Fatal(err)
	}
	prev, cur := softrnicCounters(s0, false), softrnicCounters(s1, false)
	var out bytes.Buffer
	printCounters(&out, rates(prev, cur, 2*time.Second), false, prev)
	if want := "link veth0/1 rcvd_pkts 10/s replay_entries_in_use 5 port_tx_frames 0.5/s\nlink veth1/1 idle\n"; out.String() != want {
		t.Errorf("rates: got\n%s\nwant\n%s", out.String(), want)
	}

	for _, bad := range []string{
		"softrnic_sent_pkts{device=\"a\"}\n",                // no value
		"softrnic_sent_pkts{device=\"a\"} many\n",           // not a number
		"softrnic_sent_pkts{device=\"a} 1\n",                // unterminated value
		"softrnic_sent_pkts{device=a} 1\n",                  // unquoted
		"soft-rnic 1\n",                                     // not a name
		"softrnic_sent_pkts{device=\"a\"} 1 2 3\n",          // too many fields
		"softrnic_sent_pkts{device=\"a\" queue=\"0\"} 1\n",  // no comma
		"<html><body>Not the metrics</body></html>\n",       // a web page
		"# HELP only comments\n# TYPE softrnic_x counter\n", // no samples
	} {
		if _, err := parseProm(strings.NewReader(bad)); err == nil {
			t.Errorf("parseProm(%q) succeeded", bad)
		}
	}
	if s, err := parseProm(strings.NewReader(`softrnic_x{device="a\"b\\c\nd"} +Inf` + "\n")); err != nil || s.samples[0].label("device") != "a\"b\\c\nd" {
		t.Errorf("escapes: %v %+v", err, s)
	}

	for addr, want := range map[string]string{
		"127.0.0.1:9100":                "http://127.0.0.1:9100/metrics",
		":9100":                         "http://localhost:9100/metrics",
		"[::1]:9100":                    "http://[::1]:9100/metrics",
		"http://h:1/":                   "http://h:1/metrics",
		"http://h:1/softrnic/metrics":   "http://h:1/softrnic/metrics",
		"https://h.example:443/metrics": "https://h.example:443/metrics",
	} {
		if got, err := metricsURL(addr); err != nil || got != want {
			t.Errorf("metricsURL(%q) = %q, %v, want %q", addr, got, err, want)
		}
	}
	if _, err := metricsURL("ftp://h/x"); err == nil {
		t.Error("metricsURL took ftp")
	}
}

// TestStat runs `softrnic stat` against host/metrics' handler over a NIC
// that is sending (over the in-memory port): the counters, their JSON,
// and with -w their rates.
func TestStat(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 4096})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<20)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<20)
	verbstest.Connect(t, a, b, 3, 14)
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(metrics.Source{Name: "a", Dev: a.Dev, Ports: []datapath.Port{pa}}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	var mu sync.Mutex // a's QP, between the writer and the checks
	write := func(n int) {
		mu.Lock()
		defer mu.Unlock()
		for range n {
			if _, err := a.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, 8192),
				RemoteAddr: b.MR.Addr, RKey: b.MR.RKey}}); err != nil {
				t.Error(err)
				return
			}
			if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Errorf("completion %+v", wc)
				return
			}
		}
	}
	stat := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"stat"}, args...), &stdout, &stderr); code != 0 {
			t.Fatalf("stat %q: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	// counter reads NAME's value from a text line.
	counter := func(line, name string) float64 {
		t.Helper()
		f := strings.Fields(line)
		for i := 2; i+1 < len(f); i += 2 {
			if f[i] == name {
				v, err := strconv.ParseFloat(strings.TrimSuffix(f[i+1], "/s"), 64)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return v
			}
		}
		t.Fatalf("no %s in %q", name, line)
		return 0
	}

	write(5)
	first := stat(addr)
	if !strings.HasPrefix(first, "link a/1 sent_pkts ") || strings.Count(first, "\n") != 1 {
		t.Fatalf("stat output:\n%s", first)
	}
	t.Logf("stat:\n%s", first)
	write(10)
	second := stat(":" + strings.Split(addr, ":")[1])
	for _, name := range []string{"sent_pkts", "rcvd_pkts", "port_tx_frames", "engine_doorbells", "dma_read_bytes"} {
		if v0, v1 := counter(first, name), counter(second, name); v1 <= v0 {
			t.Errorf("%s did not move: %v then %v", name, v0, v1)
		}
	}
	if counter(second, "cache_lookups") == 0 {
		t.Error("no cache lookups")
	}

	var devs []map[string]any
	if err := json.Unmarshal([]byte(stat("-j", addr)), &devs); err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0]["ifname"] != "a" || devs[0]["port"] != 1.0 || devs[0]["sent_pkts"].(float64) < counter(second, "sent_pkts") {
		t.Errorf("stat -j: %v", devs)
	}

	// -w with the NIC busy: every reading shows sent_pkts moving.
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			write(1)
		}
	}()
	watched := stat(addr, "-w", "200ms", "-n", "2")
	jsonWatch := stat("-j", "-w", "100ms", "-n", "2", addr)
	stop.Store(true)
	<-done
	lines := strings.Split(strings.TrimSpace(watched), "\n")
	if len(lines) != 2 {
		t.Fatalf("stat -w -n 2: %d lines:\n%s", len(lines), watched)
	}
	t.Logf("stat -w:\n%s", watched)
	for _, l := range lines {
		if !strings.Contains(l, " sent_pkts ") || !strings.HasSuffix(strings.Fields(l)[3], "/s") || counter(l, "sent_pkts") <= 0 {
			t.Errorf("stat -w: a reading without sent_pkts moving: %q", l)
		}
	}
	dec := json.NewDecoder(strings.NewReader(jsonWatch))
	for i := range 2 {
		var r []map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("stat -j -w: reading %d: %v\n%s", i, err, jsonWatch)
		}
		if len(r) != 1 || r[0]["sent_pkts"].(float64) <= 0 {
			t.Errorf("stat -j -w: reading %d: %v", i, r)
		}
	}
}

// TestStatErrors: an address nothing listens on, an endpoint that is not
// a softrnic's, and command-line mistakes.
func TestStatErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Write([]byte("# TYPE node_load1 gauge\nnode_load1 0.5\n"))
		case "/html/metrics":
			w.Write([]byte("<html>hello</html>\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer other.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{closed}, 1, "connection refused"},
		{[]string{other.URL}, 1, "serves no softrnic counters"},
		{[]string{other.URL + "/html/metrics"}, 1, "not Prometheus metrics"},
		{[]string{other.URL + "/nothing"}, 1, "404 Not Found: not a softrnic metrics endpoint"},
		{[]string{"ftp://x/y"}, 1, "want HOST:PORT"},
		{nil, 2, "no address given"},
		{[]string{"a:1", "b:2"}, 2, "one address"},
		{[]string{"-w", "0s", "a:1"}, 2, "-w 0s: want a positive interval"},
		{[]string{"-n", "3", "a:1"}, 2, "give -w too"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"stat"}, tc.args...), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) || stdout.Len() > 0 {
			t.Errorf("stat %q: exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.code, tc.want, stdout.String(), stderr.String())
		}
	}
}
