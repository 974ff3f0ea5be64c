package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records a skip or a failure instead of
// ending the goroutine.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
}

// TestRequireRoot: a test that needs root skips without it outside CI,
// fails without it under CI, and runs as root either way.
func TestRequireRoot(t *testing.T) {
	defer func(f func() int) { geteuid = f }(geteuid)
	for _, tc := range []struct {
		name          string
		ci            string
		uid           int
		skip, fail    bool
		wantInMessage string
	}{
		{"unprivileged outside CI skips", "", 65534, true, false, "needs root (running as uid 65534)"},
		{"unprivileged under CI=true fails", "true", 65534, false, true, "needs root (running as uid 65534)"},
		{"unprivileged under CI=1 fails", "1", 1000, false, true, `CI="1"`},
		{"root outside CI runs", "", 0, false, false, ""},
		{"root under CI runs", "true", 0, false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			geteuid = func() int { return tc.uid }
			r := &recorder{TB: t}
			RequireRoot(r)
			if r.skipped != tc.skip || r.failed != tc.fail {
				t.Errorf("skipped %v failed %v (%q), want skipped %v failed %v", r.skipped, r.failed, r.msg, tc.skip, tc.fail)
			}
			if !strings.Contains(r.msg, tc.wantInMessage) {
				t.Errorf("message %q lacks %q", r.msg, tc.wantInMessage)
			}
		})
	}
}

// TestRequireTool: a missing program skips outside CI and fails under CI,
// naming the program and the hint; a present one is found.
func TestRequireTool(t *testing.T) {
	for _, tc := range []struct {
		ci         string
		tool       string
		skip, fail bool
	}{
		{"", "softrnic-no-such-tool", true, false},
		{"true", "softrnic-no-such-tool", false, true},
		{"true", "sh", false, false},
	} {
		t.Setenv("CI", tc.ci)
		r := &recorder{TB: t}
		path := RequireTool(r, tc.tool, "apt-get install it")
		if r.skipped != tc.skip || r.failed != tc.fail {
			t.Errorf("CI=%q %s: skipped %v failed %v (%q), want skipped %v failed %v", tc.ci, tc.tool, r.skipped, r.failed, r.msg, tc.skip, tc.fail)
		}
		if r.skipped || r.failed {
			if !strings.Contains(r.msg, tc.tool+" is not installed (apt-get install it)") {
				t.Errorf("message %q names neither the tool nor the hint", r.msg)
			}
		} else if path == "" {
			t.Errorf("%s: no path", tc.tool)
		}
	}
}
