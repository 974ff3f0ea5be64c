package cachebench

import (
	"strings"
	"testing"
	"time"
)

// TestScale runs the QP-scaling benchmark small, with each cache in front
// of the NIC's QP contexts: every WRITE completes, and with more QPs than
// the QPC cache holds lines, the QP contexts miss (the cache holds 128 lines: more than the WRITEs in flight, fewer than the QPs).
func TestScale(t *testing.T) {
	rows, err := Scale(ScaleConfig{QPs: []int{1, 512}, Duration: 100 * time.Millisecond, Sets: 32, Ways: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for _, r := range rows {
		if r.WRs == 0 || r.Lookups == 0 {
			t.Errorf("%s, %d QPs: %d WRITEs, %d QPC lookups", r.Cache, r.QPs, r.WRs, r.Lookups)
		}
		if r.QPs == 512 && r.Misses < uint64(r.WRs)/4 {
			t.Errorf("%s, 512 QPs over 128 cache lines: %d misses for %d WRITEs", r.Cache, r.Misses, r.WRs)
		}
	}
}

// TestScaleGCCacheOnly: without the baseline's points the report has
// GCCache's rows and no ratio against a baseline it did not run.
func TestScaleGCCacheOnly(t *testing.T) {
	var out strings.Builder
	if err := ReportScale(&out, ScaleConfig{QPs: []int{1, 64}, Duration: 50 * time.Millisecond, Sets: 32, Ways: 4, GCCacheOnly: true}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if strings.Contains(s, "baseline") || strings.Count(s, "GCCache ") < 2 || !strings.Contains(s, "64 QPs: GCCache") {
		t.Errorf("report:\n%s", s)
	}
}
