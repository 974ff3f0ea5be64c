// Package testenv decides what a test does when the machine lacks
// something it needs (root, a tool, test data): outside CI it skips and
// says what is missing; under CI (the environment variable CI set to
// anything, as CI systems do: CI=true) it fails, because CI must run every
// test and a skip there would pass without running anything.
//
// It imports only the standard library, so any test in the repository may
// use it without an import cycle.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// geteuid is os.Geteuid; tests replace it.
var geteuid = os.Geteuid

// CI reports whether the tests run under CI: CI is set and not empty.
func CI() bool { return os.Getenv("CI") != "" }

// Unavailable stops a test that cannot run here: it skips with the message
// outside CI and fails with it under CI.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		tb.Fatalf("%s (CI=%q: under CI a test that cannot run fails instead of skipping)", msg, os.Getenv("CI"))
		return
	}
	tb.Skip(msg)
}

// RequireRoot stops the test unless it runs as root: network namespaces,
// veth pairs, XDP programs and AF_XDP sockets need CAP_SYS_ADMIN,
// CAP_NET_ADMIN, CAP_BPF and CAP_IPC_LOCK.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if uid := geteuid(); uid != 0 {
		Unavailable(tb, "needs root (running as uid %d): run the tests as root to build network namespaces and open AF_XDP sockets", uid)
	}
}

// RequireTool returns the path of a program, or stops the test when it is
// not on PATH.
func RequireTool(tb testing.TB, name, hint string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Unavailable(tb, "%s is not installed (%s): %v", name, hint, err)
	}
	return path
}
