package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
)

// TestRunConn runs the tests perftest runs over UC and UD between two
// devices: every message arrives on the lossless link, and each side
// prints its table.
func TestRunConn(t *testing.T) {
	for _, tc := range []Config{
		{Test: SendBW, Conn: verbs.QPTUC, Iters: 200, Size: 4096},
		{Test: WriteBW, Conn: verbs.QPTUC, Iters: 200, Size: 65536},
		{Test: SendLat, Conn: verbs.QPTUC, Iters: 100},
		{Test: WriteLat, Conn: verbs.QPTUC, Iters: 100},
		{Test: SendBW, Conn: verbs.QPTUD, Iters: 200, Size: 1024, QPs: 2},
		{Test: SendLat, Conn: verbs.QPTUD, Iters: 100, Size: 100},
		{Test: SendBW, Conn: verbs.QPTUD, Iters: 100, Size: 512, Bidir: true},
	} {
		t.Run(tc.Conn.String()+"/"+tc.Test.String(), func(t *testing.T) {
			sout, cout, sres, cres := runPair(t, tc)
			if len(cres) != 1 || len(sres) != 1 {
				t.Fatalf("results: server %d, client %d\n%s\n%s", len(sres), len(cres), sout, cout)
			}
			for _, r := range append(sres, cres...) {
				if r.Lost != 0 {
					t.Errorf("%s: %d messages lost on a lossless link", r.Role, r.Lost)
				}
				if tc.Test.BW() && r.BWAvg <= 0 || !tc.Test.BW() && r.TTypical <= 0 {
					t.Errorf("%s: no figures: %+v", r.Role, r)
				}
			}
		})
	}
}

// TestUDSize: a UD message larger than the path MTU is refused before the
// run, naming the MTU; the default size is cut to the MTU, and with -a
// the sizes stop there.
func TestUDSize(t *testing.T) {
	se, ce := pairEnv(t) // 1024-byte path MTU
	_, cout, _, _, serr, cerr := runSides(t, se, ce, Config{Test: SendBW, Conn: verbs.QPTUD, Size: 2048}, Config{Test: SendBW, Conn: verbs.QPTUD, Size: 2048})
	if cerr == nil || !strings.Contains(cerr.Error(), "MTU") {
		t.Fatalf("client: %v, want the MTU named (server: %v)\n%s", cerr, serr, cout)
	}
	_, _, _, cres := runPair(t, Config{Test: SendBW, Conn: verbs.QPTUD, Iters: 20})
	if len(cres) != 1 || cres[0].Bytes != 1024 {
		t.Fatalf("UD's default size: %+v, want the 1024-byte MTU", cres)
	}
	_, _, sres, cres := runPair(t, Config{Test: SendBW, Conn: verbs.QPTUD, All: true, Iters: 20})
	if len(cres) != 10 || cres[len(cres)-1].Bytes != 1024 || len(sres) != len(cres) {
		t.Fatalf("-a over UD ran %d sizes (server %d), want 2..1024", len(cres), len(sres))
	}
}

// TestMismatchedConn: a side run with another -c than its peer stops with
// an error naming both transports instead of waiting for ever.
func TestMismatchedConn(t *testing.T) {
	for _, tc := range []struct {
		test           Test
		server, client verbs.QPType
	}{
		{SendBW, verbs.QPTRC, verbs.QPTUC},
		{SendBW, verbs.QPTRC, verbs.QPTUD},
		{SendBW, verbs.QPTUD, verbs.QPTRC},
		{WriteBW, verbs.QPTRC, verbs.QPTUC},
		{WriteBW, verbs.QPTUC, verbs.QPTRC},
	} {
		t.Run(tc.test.String()+"/"+tc.server.String()+"-"+tc.client.String(), func(t *testing.T) {
			sout, cout, serr, cerr := runMismatched(t, Config{Test: tc.test, Conn: tc.server, Iters: 50, Size: 512},
				Config{Test: tc.test, Conn: tc.client, Iters: 50, Size: 512})
			var named bool
			for _, err := range []error{serr, cerr} {
				if errors.Is(err, ErrTransport) && strings.Contains(err.Error(), "-c") {
					named = true
				}
			}
			if !named {
				t.Fatalf("server: %v\nclient: %v\nwant ErrTransport on one side\n%s\n%s", serr, cerr, sout, cout)
			}
			if testing.Verbose() {
				t.Logf("server: %v\nclient: %v", serr, cerr)
			}
		})
	}
}

// TestConnChecks: the tests a transport does not run are refused before
// anything starts, as perftest refuses them.
func TestConnChecks(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Test: ReadBW, Conn: verbs.QPTUC}, false},
		{Config{Test: AtomicLat, Conn: verbs.QPTUC}, false},
		{Config{Test: WriteBW, Conn: verbs.QPTUD}, false},
		{Config{Test: SendLat, Conn: verbs.QPTUD}, true},
		{Config{Test: SendBW, Conn: verbs.QPTUC, RDMACM: true}, false},
		{Config{Test: WriteBW, Conn: verbs.QPTUC, SR: true}, false},
		{Config{Test: WriteBW, Conn: verbs.QPTUC}, true},
		{Config{Test: WriteBW, Inline: verbs.MaxInlineData + 1}, false},
		{Config{Test: WriteBW, PostList: 200}, false},
		{Config{Test: WriteBW, PostList: 8}, true},
		{Config{Test: WriteBW, PostList: 16}, false}, // 5000 iterations are no whole lists of 16
		{Config{Test: SendBW, PostList: 8, CQMod: 3}, false},
		{Config{Test: ReadBW, Inline: 16}, false},
		{Config{Test: WriteBW, Events: true}, false},
		{Config{Test: SendBW, Events: true, Duration: 2 * time.Second}, false},
		{Config{Test: SendBW, Events: true}, true},
		{Config{Test: SendLat, PostList: 1}, false},
		{Config{Test: WriteBW, Timeout: 32}, false},
		{Config{Test: WriteBW, TOS: 0xb8}, false}, // rdma_cm's, for -R
		{Config{Test: WriteBW, TOS: 0xb8, RDMACM: true}, true},
	} {
		if err := tc.cfg.Check(); (err == nil) != tc.ok {
			t.Errorf("%+v: Check() = %v, want ok %v", tc.cfg, err, tc.ok)
		}
	}
	for _, tc := range []struct {
		in   string
		want verbs.QPType
	}{{"RC", verbs.QPTRC}, {"uc", verbs.QPTUC}, {"UD", verbs.QPTUD}, {"XRC", 0}, {"", 0}} {
		got, err := ParseConn(tc.in)
		if got != tc.want || (err == nil) != (tc.want != 0) {
			t.Errorf("ParseConn(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// TestFlagRuns runs the tests with perftest's other flags between two
// devices: each run completes with figures on both sides.
func TestFlagRuns(t *testing.T) {
	for _, tc := range []Config{
		{Test: WriteBW, Iters: 200, Size: 4096, PostList: 8},
		{Test: SendBW, Iters: 200, Size: 1024, PostList: 4, CQMod: 2, Events: true},
		{Test: ReadBW, Iters: 100, Size: 4096, WarmUp: true, QPs: 2},
		{Test: AtomicBW, Iters: 100, WarmUp: true},
		{Test: WriteBW, Iters: 100, Size: 4096, NoPeak: true, Timeout: 18},
		{Test: SendLat, Iters: 50, Size: 200, Inline: 200},
		{Test: ReadLat, Iters: 50, Events: true},
	} {
		t.Run(fmt.Sprintf("%s/%+v", tc.Test, tc), func(t *testing.T) {
			sout, cout, _, cres := runPair(t, tc)
			if len(cres) != 1 || tc.Test.BW() && cres[0].BWAvg <= 0 || !tc.Test.BW() && cres[0].TTypical <= 0 {
				t.Fatalf("client results %+v\n%s\n%s", cres, sout, cout)
			}
			if tc.NoPeak && cres[0].BWPeak != 0 {
				t.Errorf("-N: peak %v", cres[0].BWPeak)
			}
		})
	}
}

// TestLatencyLists: -U prints every sample in the order taken and -H the
// sorted ones without the two largest, each as perftest's "#, usec"
// list, and the header is printed again before the row.
func TestLatencyLists(t *testing.T) {
	const n = 20
	_, cout, _, _ := runPair(t, Config{Test: SendLat, Iters: n, Unsorted: true, Histogram: true})
	blocks := strings.Split(cout, "#, usec\n")
	if len(blocks) != 3 {
		t.Fatalf("%d lists, want 2:\n%s", len(blocks)-1, cout)
	}
	count := func(b string) (k int, sorted bool) {
		sorted = true
		prev := -1.0
		for _, line := range strings.Split(b, "\n") {
			var i int
			var v float64
			if _, err := fmt.Sscanf(line, "%d, %g", &i, &v); err != nil {
				break
			}
			if k++; i != k {
				t.Errorf("index %d at line %d", i, k)
			}
			sorted = sorted && v >= prev
			prev = v
		}
		return k, sorted
	}
	if k, _ := count(blocks[1]); k != n-1 {
		t.Errorf("-U: %d samples, want %d", k, n-1)
	}
	if k, sorted := count(blocks[2]); k != n-1-latTail || !sorted {
		t.Errorf("-H: %d samples (sorted %v), want %d sorted", k, sorted, n-1-latTail)
	}
	if strings.Count(cout, " #bytes #iterations") != 2 {
		t.Errorf("the header is printed %d times, want 2:\n%s", strings.Count(cout, " #bytes #iterations"), cout)
	}
}

// TestRunInfinitely: --run_infinitely prints a row every period until the
// run is stopped.
func TestRunInfinitely(t *testing.T) {
	se, ce := pairEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	cfg := Config{Test: WriteBW, Size: 4096, Infinite: true, Duration: time.Second}
	served := make(chan struct{})
	defer func() { cancel(); <-served }()
	go func() {
		defer close(served)
		c, err := Accept(ctx, ln)
		if err == nil {
			defer c.Close()
			Run(ctx, se, c, cfg, nil)
		}
	}()
	c, err := Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out bytes.Buffer
	_, err = Run(ctx, ce, c, cfg, &out)
	if err == nil {
		t.Fatal("an endless run ended by itself")
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		var size, iters int
		if _, err := fmt.Sscanf(line, " %d %d", &size, &iters); err == nil && size == 4096 && iters > 0 {
			rows++
		}
	}
	if rows < 2 {
		t.Errorf("%d rows in 3.5 s of 1 s periods, want at least 2:\n%s", rows, out.String())
	}
}

// TestParseCPUTime: --cpu_util's reading of /proc/stat's first line.
func TestParseCPUTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want cpuTime
	}{
		{"cpu  100 5 30 900 1 0 2 0 0 0\ncpu0 50 2 15 450\n", cpuTime{user: 100, idle: 900}},
		{"cpu 1 2 3 4\n", cpuTime{user: 1, idle: 4}},
		{"cpu0 1 2 3 4\n", cpuTime{}},
		{"cpu 1 2\n", cpuTime{}},
		{"cpu x 2 3 4\n", cpuTime{}},
		{"", cpuTime{}},
	} {
		if got := parseCPUTime([]byte(tc.in)); got != tc.want {
			t.Errorf("parseCPUTime(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if u := (cpuTime{user: 150, idle: 950}).since(cpuTime{user: 100, idle: 900}); u != 50 {
		t.Errorf("since: %v, want 50", u)
	}
}
