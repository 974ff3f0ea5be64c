package perftest

import (
	"math"
	"testing"
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
			got, conv := c.inOwnUnits(Report{Size: 65536, Iters: 1000, AvgBW: tc.avg, PeakBW: tc.peak, MsgMpp: rate})
			if conv != tc.converted || math.Abs(got.AvgBW-tc.wantAvg) > 1e-6*tc.wantAvg {
				t.Fatalf("got avg %v (converted %v), want %v (%v)", got.AvgBW, conv, tc.wantAvg, tc.converted)
			}
			if math.Abs(got.PeakBW/got.AvgBW-tc.peak/tc.avg) > 1e-9 && tc.avg != 0 {
				t.Errorf("peak %v no longer 1.2x avg %v", got.PeakBW, got.AvgBW)
			}
		})
	}
}
