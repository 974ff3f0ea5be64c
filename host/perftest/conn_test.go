package perftest

import (
	"errors"
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
// run, naming the MTU; with -a the sizes stop at the MTU.
func TestUDSize(t *testing.T) {
	se, ce := pairEnv(t) // 1024-byte path MTU
	_, cout, _, _, serr, cerr := runSides(t, se, ce, Config{Test: SendBW, Conn: verbs.QPTUD, Size: 2048}, Config{Test: SendBW, Conn: verbs.QPTUD, Size: 2048})
	if cerr == nil || !strings.Contains(cerr.Error(), "MTU") {
		t.Fatalf("client: %v, want the MTU named (server: %v)\n%s", cerr, serr, cout)
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
