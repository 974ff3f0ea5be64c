package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// withTerminal makes the status line's console a terminal writing to a
// buffer for the test.
func withTerminal(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	prev := stderrConsole
	stderrConsole = &console{w: &buf, tty: true}
	t.Cleanup(func() { stderrConsole = prev })
	return &buf
}

// TestProgressQuiet: without a terminal there is no status line, and the
// output and hooks pass through.
func TestProgressQuiet(t *testing.T) {
	p := startProgress("bench x")
	if p != nil {
		t.Fatal("a status line without a terminal")
	}
	var out bytes.Buffer
	if w := p.output(&out); w != &out {
		t.Error("output wrapped without a terminal")
	}
	if p.stepFunc() != nil || p.perfSizes(nil) != nil {
		t.Error("hooks without a terminal")
	}
	p.set("x")
	p.step(1, 2, "y")
	p.stop()
}

// TestProgress: the status line says the step, it is cleared at the end,
// and perf -a's rows step it through the sizes.
func TestProgress(t *testing.T) {
	term := withTerminal(t)
	p := startProgress("bench scale")
	p.stepFunc()(4, 10, "baseline, 256 QPs")
	p.stop()
	if s := term.String(); !strings.Contains(s, "\r\x1b[Kbench scale: baseline, 256 QPs (5/10), 0s") || !strings.HasSuffix(s, "\r\x1b[K") {
		t.Errorf("status lines %q", s)
	}

	term.Reset()
	p = startProgress("perf write-bw")
	var out bytes.Buffer
	w := p.perfSizes(&out)
	fmt.Fprint(w, " #bytes     #iterations    BW peak[MB/sec]\n")
	fmt.Fprint(w, " 2          1000           1.23\n 4          1000     ")
	fmt.Fprint(w, "      2.46\n")
	if !strings.Contains(term.String(), "size 2 (1/23)") || !strings.Contains(term.String(), "size 4 (2/23)") ||
		!strings.HasSuffix(term.String(), "size 8 (3/23), 0s") {
		t.Errorf("status lines %q", term.String())
	}
	if want := " #bytes     #iterations    BW peak[MB/sec]\n 2          1000           1.23\n 4          1000           2.46\n"; out.String() != want {
		t.Errorf("perftest's output changed: %q", out.String())
	}
	p.stop()
	if p2 := startProgress("perf"); p2.perfSizes(nil) == nil {
		t.Error("no size watcher for --json's nil output")
	} else {
		p2.stop()
	}
}

// TestConsoleOutput: the command's output to the same terminal clears the
// status line first, and the status waits while a line is unfinished.
func TestConsoleOutput(t *testing.T) {
	var buf bytes.Buffer
	c := &console{w: &buf, tty: true}
	o := &output{c: c, w: &buf}
	c.setStatus("S")
	fmt.Fprint(o, "row 1\n")
	fmt.Fprint(o, "row ")
	c.setStatus("T") // waits for the line's end
	fmt.Fprint(o, "2\n")
	c.setStatus("")
	if want := "\r\x1b[KS" + "\r\x1b[Krow 1\nS" + "\r\x1b[Krow " + "2\nT" + "\r\x1b[K"; buf.String() != want {
		t.Errorf("got %q\nwant %q", buf.String(), want)
	}
}
