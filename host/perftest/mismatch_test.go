package perftest

import (
	"errors"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/host/verbs"
)

// runMismatched runs a server and a client with different flags and
// returns both sides' output and errors.
func runMismatched(t *testing.T, scfg, ccfg Config) (sout, cout string, serr, cerr error) {
	t.Helper()
	se, ce := pairEnv(t)
	sout, cout, _, _, serr, cerr = runSides(t, se, ce, scfg, ccfg)
	return sout, cout, serr, cerr
}

// TestMismatchedTests: a read-bw client against a write-bw server (and
// the other way) fails with a remote access error that asks whether both
// sides run the same test, as perftest's regions refuse it, instead of
// printing one test's figures under the other's header.
func TestMismatchedTests(t *testing.T) {
	for _, tc := range []struct{ server, client Test }{{WriteBW, ReadBW}, {ReadBW, WriteBW}, {AtomicBW, WriteBW}} {
		t.Run(tc.server.String()+"/"+tc.client.String(), func(t *testing.T) {
			_, cout, _, cerr := runMismatched(t, Config{Test: tc.server, Iters: 20}, Config{Test: tc.client, Iters: 20})
			if !errors.Is(cerr, verbs.WCRemAccessErr) || !strings.Contains(cerr.Error(), "same test") {
				t.Fatalf("client: %v, want a remote access error naming the mismatch\n%s", cerr, cout)
			}
		})
	}
}

// TestMismatchedUnits: a server without --report_gbits shows a client's
// Gbit/s report in MB/sec, and says it converted it.
func TestMismatchedUnits(t *testing.T) {
	sout, cout, serr, cerr := runMismatched(t, Config{Test: WriteBW, Iters: 200}, Config{Test: WriteBW, Iters: 200, Gbits: true})
	if serr != nil || cerr != nil {
		t.Fatalf("server: %v, client: %v\n%s\n%s", serr, cerr, sout, cout)
	}
	if !strings.Contains(sout, "the client reports in Gb/sec") || !strings.Contains(sout, "BW average[MB/sec]") {
		t.Fatalf("server's output:\n%s", sout)
	}
}

// TestMismatchedSizes: sides run with different -s or -a stop with an
// error naming both sizes, where what arrives shows them: a SEND's
// length, a WRITE or READ client's report.
func TestMismatchedSizes(t *testing.T) {
	for _, tc := range []struct {
		name           string
		server, client Config
		want           string
	}{
		{"send-bw -s", Config{Test: SendBW, Iters: 20, Size: 4096}, Config{Test: SendBW, Iters: 20, Size: 1024}, "1024-byte message arrived where this side runs 4096"},
		{"send-lat -s", Config{Test: SendLat, Iters: 20, Size: 64}, Config{Test: SendLat, Iters: 20, Size: 32}, "32-byte message"},
		{"send-bw -a", Config{Test: SendBW, Iters: 20}, Config{Test: SendBW, Iters: 20, All: true}, "2-byte message arrived where this side runs 65536"},
		{"write-bw -s", Config{Test: WriteBW, Iters: 20, Size: 8192}, Config{Test: WriteBW, Iters: 20, Size: 4096}, "last messages were 4096 bytes, this side's are 8192"},
		{"write-bw -a", Config{Test: WriteBW, Iters: 20, All: true}, Config{Test: WriteBW, Iters: 20}, "this side's are 2 to 8388608 (-a)"},
		{"read-bw -s", Config{Test: ReadBW, Iters: 20, Size: 8192}, Config{Test: ReadBW, Iters: 20, Size: 2048}, "last messages were 2048 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sout, cout, serr, cerr := runMismatched(t, tc.server, tc.client)
			var named bool
			for _, err := range []error{serr, cerr} {
				named = named || errors.Is(err, ErrMismatch) && strings.Contains(err.Error(), tc.want)
			}
			if !named {
				t.Fatalf("server: %v\nclient: %v\nwant ErrMismatch saying %q\n%s\n%s", serr, cerr, tc.want, sout, cout)
			}
		})
	}
}
