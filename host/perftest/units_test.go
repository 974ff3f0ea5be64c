package perftest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/host/verbs"
)

// TestInOwnUnits: a server shows the client's report in its own unit,
// whichever unit the client used; a report already in it, or one that
// fits neither unit, is left as it came.
func TestInOwnUnits(t *testing.T) {
	// 1 Mpps of 65536-byte messages: 62500 MB/s (2^20) or 524.288 Gbit/s.
	const mb, gb = 62500.0, 524.288
	for _, tc := range []struct {
		name      string
		gbits     bool
		avg, peak float64
		wantAvg   float64
		converted bool
	}{
		{"MB/s to MB/s", false, mb, mb * 1.2, mb, false},
		{"Gb/s to MB/s", false, gb, gb * 1.2, mb, true},
		{"MB/s to Gb/s", true, mb, mb * 1.2, gb, true},
		{"Gb/s to Gb/s", true, gb, gb * 1.2, gb, false},
		{"neither", false, 3, 4, 3, false},
		{"no rate", false, 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Gbits: tc.gbits}
			rate := 1.0
			if tc.avg == 0 {
				rate = 0
			}
			got, from := c.inOwnUnits(Report{Size: 65536, Iters: 1000, AvgBW: tc.avg, PeakBW: tc.peak, MsgMpp: rate})
			conv := from != ""
			if conv != tc.converted || math.Abs(got.AvgBW-tc.wantAvg) > 1e-6*tc.wantAvg {
				t.Fatalf("got avg %v (converted %v), want %v (%v)", got.AvgBW, conv, tc.wantAvg, tc.converted)
			}
			if math.Abs(got.PeakBW/got.AvgBW-tc.peak/tc.avg) > 1e-9 && tc.avg != 0 {
				t.Errorf("peak %v no longer 1.2x avg %v", got.PeakBW, got.AvgBW)
			}
		})
	}
}

// TestAccessHint: a remote access error of a WRITE test names the
// likely cause (the two sides' -s differ) and still matches its status;
// other errors, and a SEND test's, pass unchanged.
func TestAccessHint(t *testing.T) {
	access := fmt.Errorf("perftest: completion with error: %w (WR 0, opcode %v)", verbs.WCRemAccessErr, verbs.WCRDMAWrite)
	other := errors.New("perftest: keys exchange: no answer")
	for _, tc := range []struct {
		test Test
		err  error
		hint bool
	}{{WriteBW, access, true}, {ReadLat, access, true}, {SendBW, access, false}, {WriteBW, other, false}} {
		s := &session{cfg: Config{Test: tc.test}}
		got := s.accessHint(tc.err, 65536)
		if has := strings.Contains(got.Error(), "same test, -s and -a"); has != tc.hint {
			t.Errorf("%v, %v: %q", tc.test, tc.err, got)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%v: the hint lost the error it wraps: %v", tc.test, got)
		}
		if tc.err == access && !errors.Is(got, verbs.WCRemAccessErr) {
			t.Errorf("%v: no longer a remote access error: %v", tc.test, got)
		}
	}
}
