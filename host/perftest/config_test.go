package perftest

import (
	"strings"
	"testing"
	"time"
)

// TestConfigSize: size 0 is the test's default, never zero-byte messages;
// a size below 1 or above MaxSize is refused with the size named.
func TestConfigSize(t *testing.T) {
	for _, tc := range []struct {
		test    Test
		size    int
		want    int
		wantErr string
	}{
		{WriteBW, 0, 65536, ""},
		{SendBW, 0, 65536, ""},
		{ReadBW, 0, 65536, ""},
		{WriteLat, 0, 2, ""},
		{SendLat, 0, 2, ""},
		{ReadLat, 0, 2, ""},
		{AtomicBW, 0, 8, ""},
		{AtomicLat, 0, 8, ""},
		{WriteBW, 1, 1, ""},
		{WriteLat, 4096, 4096, ""},
		{WriteBW, MaxSize, MaxSize, ""},
		{AtomicBW, 8, 8, ""},
		{WriteBW, -5, 0, "size -5 out of range"},
		{WriteLat, -1, 0, "size -1 out of range"},
		{WriteBW, MaxSize + 1, 0, "size 8388609 out of range"},
		{AtomicBW, 16, 0, "not -s 16"},
		{AtomicLat, -5, 0, "not -s -5"},
	} {
		c, err := Config{Test: tc.test, Size: tc.size}.WithDefaults()
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v -s %d: %v, want an error saying %q", tc.test, tc.size, err, tc.wantErr)
			}
			if err := (Config{Test: tc.test, Size: tc.size}).Check(); err == nil {
				t.Errorf("%v -s %d: Check passed", tc.test, tc.size)
			}
		case err != nil:
			t.Errorf("%v -s %d: %v", tc.test, tc.size, err)
		case c.Size != tc.want:
			t.Errorf("%v -s %d: size %d, want %d", tc.test, tc.size, c.Size, tc.want)
		}
	}
}

// TestConfigQPs: -q takes what a device can have (perftest takes more
// than 64), and refuses what none can.
func TestConfigQPs(t *testing.T) {
	for _, tc := range []struct {
		qps  int
		ok   bool
		want int
	}{{0, true, 1}, {1, true, 1}, {64, true, 64}, {65, true, 65}, {256, true, 256}, {1000, true, 1000}, {-1, false, 0}, {maxQPs + 1, false, 0}} {
		c, err := Config{Test: WriteBW, QPs: tc.qps}.WithDefaults()
		if (err == nil) != tc.ok || tc.ok && c.QPs != tc.want {
			t.Errorf("-q %d: %d QPs, %v; want ok %v, %d QPs", tc.qps, c.QPs, err, tc.ok, tc.want)
		}
	}
}

// The server of a -D run waits for the client's report through the
// whole run: a 10-minute run must not end with the server gone at 10
// minutes.
func TestRunWaitCoversDuration(t *testing.T) {
	for _, d := range []time.Duration{0, 5 * time.Second, 10 * time.Minute, time.Hour} {
		s := &session{cfg: Config{Duration: d}}
		if got := s.runWait(); got < d+time.Minute {
			t.Errorf("-D %v: the server waits %v for the run", d, got)
		}
	}
}
