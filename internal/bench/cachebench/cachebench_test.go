package cachebench_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/bench/cachebench"
)

// TestReport runs the whole report briefly: every section must print and
// GCCache's fetch count must match the driver's count of distinct misses.
// Latency and speed claims are for `softrnic bench cache`, not this test.
func TestReport(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a few seconds")
	}
	var out bytes.Buffer
	if _, err := cachebench.Report(&out, cachebench.Config{Duration: 100 * time.Millisecond, Lookups: 20000}); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	checked := 0
	for _, want := range []string{"1. Hit latency", "2. Head-of-line", "3. Redundant", "4. Throughput"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no section %q", want)
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "host fetches = distinct") || strings.Contains(line, "one host fetch per miss") {
			checked++
			if !strings.HasSuffix(strings.TrimSpace(line), "ok") {
				t.Errorf("%s", line)
			}
		}
	}
	if checked != 4 {
		t.Errorf("%d host-fetch claims printed, want 4", checked)
	}
}
