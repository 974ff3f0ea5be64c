package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummary: a curve of several rounds is drawn through each x's
// median, with bars to its smallest and largest value.
func TestSummary(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "bw.txt")
	data := "1 64 3\n2 64 1\n3 64 2\n1 128 5\n2 128 7\n# a comment\n"
	if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := readRounds(name, "")
	if err != nil {
		t.Fatal(err)
	}
	s := rs.summary()
	want := []struct{ x, y, low, high float64 }{{64, 2, 1, 1}, {128, 6, 1, 1}}
	if len(s.pts) != len(want) || s.rounds != 3 {
		t.Fatalf("%d points of %d rounds, want %d of 3", len(s.pts), s.rounds, len(want))
	}
	for i, w := range want {
		if p, e := s.pts[i], s.errs[i]; p.X != w.x || p.Y != w.y || e.Low != w.low || e.High != w.high {
			t.Errorf("point %d: %v %+v, want %+v", i, p, e, w)
		}
	}
	if s.top() != 7 {
		t.Errorf("top %v, want 7", s.top())
	}
}

// TestReadRoundsErrors: a malformed data file is an error naming it.
func TestReadRoundsErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ data, key string }{
		{"1 64\n", ""}, {"1 64 x\n", ""}, {"1 GCCache 16\n", "GCCache"}, {"1 64 NaN\n", ""},
	} {
		name := filepath.Join(dir, "f.txt")
		if err := os.WriteFile(name, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readRounds(name, tc.key); err == nil || !strings.Contains(err.Error(), "f.txt") {
			t.Errorf("%q: %v, want an error naming the file", tc.data, err)
		}
	}
	if rs, err := readRounds(filepath.Join(dir, "missing.txt"), ""); err != nil || len(rs) != 0 {
		t.Errorf("a missing file: %v, %v", rs, err)
	}
}

// TestRun draws the three plots from a data directory, embedding the
// fonts.
func TestRun(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	files := map[string]string{
		"bw.txt":             "1 2 0.1\n1 65536 5\n2 2 0.2\n2 65536 6\n",
		"tcp.txt":            "1 64 0.3\n1 65536 9\n",
		"raw.txt":            "1 64 0.4\n1 4096 11\n",
		"scale.txt":          "1 GCCache 1 6\n1 GCCache 16 5\n1 baseline 1 4\n1 baseline 16 4\n",
		"lat-softrnic.1.txt": "7\n8\n9\n",
		"lat-udp.1.txt":      "50\n60\n",
	}
	for n, d := range files {
		if err := os.WriteFile(filepath.Join(data, n), []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(data, out); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"bandwidth.svg", "latency-cdf.svg", "qp-scaling.svg"} {
		b, err := os.ReadFile(filepath.Join(out, n))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "@font-face") {
			t.Errorf("%s embeds no font", n)
		}
	}
}
