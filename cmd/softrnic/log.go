package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/host/verbs"
)

// logLevel is the level of the default logger: Info, or Debug with -v.
var logLevel = new(slog.LevelVar)

// stderrConsole is the command's stderr, shared by the log and the
// progress line.
var stderrConsole = &console{w: os.Stderr}

// startLogging points slog's default logger at stderr, at level Info, and
// takes the global -v (before the command) that lowers it to Debug. It
// returns the rest of the arguments and a function that restores the
// logger as it was.
func startLogging(args []string, stderr io.Writer) (rest []string, restore func()) {
	prev, prevConsole := slog.Default(), stderrConsole
	stderrConsole = &console{w: stderr, tty: isTerminal(stderr)}
	logLevel.Set(slog.LevelInfo)
	for len(args) > 0 && (args[0] == "-v" || args[0] == "--v") {
		logLevel.Set(slog.LevelDebug)
		args = args[1:]
	}
	slog.SetDefault(slog.New(&cliHandler{c: stderrConsole, level: logLevel}))
	return args, func() {
		slog.SetDefault(prev)
		stderrConsole = prevConsole
	}
}

// verboseFlag is every command's -v: it sets the level as it is parsed.
func verboseFlag(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	if v {
		logLevel.Set(slog.LevelDebug)
	} else {
		logLevel.Set(slog.LevelInfo)
	}
	return nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// console writes whole lines to stderr, and on a terminal keeps a status
// line (progress) below them, redrawn after each.
type console struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	status  string // the status line, "" for none
	midLine bool   // the command's output to the terminal stopped mid-line: the status waits
}

const clearLine = "\r\x1b[K"

// around runs write, of a line of log, with the status line cleared, and
// redraws it after.
func (c *console) around(write func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	write()
	c.draw()
}

// clear takes the status line off the terminal.
func (c *console) clear() {
	if c.status != "" && !c.midLine {
		io.WriteString(c.w, clearLine)
	}
}

// draw puts the status line back.
func (c *console) draw() {
	if c.status != "" && !c.midLine {
		io.WriteString(c.w, c.status)
	}
}

// setStatus shows s as the status line, on a terminal; "" clears it.
func (c *console) setStatus(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.tty || s == c.status {
		return
	}
	if s == "" {
		c.clear()
		c.status = ""
		return
	}
	c.status = s
	if !c.midLine {
		io.WriteString(c.w, clearLine+s)
	}
}

// output is the command's output to the terminal the status line is on:
// the status line is cleared before each write and redrawn after one
// that ends a line.
type output struct {
	c *console
	w io.Writer
}

func (o *output) Write(b []byte) (n int, err error) {
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	o.c.clear()
	n, err = o.w.Write(b)
	if len(b) > 0 {
		o.c.midLine = b[len(b)-1] != '\n'
	}
	o.c.draw()
	return n, err
}

// cliHandler writes records as "softrnic: [LEVEL: ]message key=value…",
// the level named for all but Info.
type cliHandler struct {
	c      *console
	level  slog.Leveler
	attrs  string // preformatted, from WithAttrs
	prefix string // the groups, "g.h."
}

func (h *cliHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *cliHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("softrnic: ")
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	case r.Level < slog.LevelInfo:
		b.WriteString("debug: ")
	}
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.prefix, a)
		return true
	})
	b.WriteByte('\n')
	var err error
	h.c.around(func() { _, err = io.WriteString(h.c.w, b.String()) })
	return err
}

func (h *cliHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	for _, a := range attrs {
		appendAttr(&b, h.prefix, a)
	}
	h2 := *h
	h2.attrs += b.String()
	return &h2
}

func (h *cliHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix += name + "."
	return &h2
}

// appendAttr writes " key=value", a value with spaces, quotes or = quoted.
func appendAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			appendAttr(b, p, g)
		}
		return
	}
	v := a.Value.String()
	if v == "" || strings.ContainsAny(v, " \t\n\"=") {
		v = strconv.Quote(v)
	}
	b.WriteString(" " + prefix + a.Key + "=" + v)
}

// quietHandler passes every record on at Debug at most: for messages that
// are news in perf but not in the demo (a veth has no zero-copy).
type quietHandler struct{ h slog.Handler }

func (q quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return q.h.Enabled(ctx, min(l, slog.LevelDebug))
}

func (q quietHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = min(r.Level, slog.LevelDebug)
	return q.h.Handle(ctx, r)
}

func (q quietHandler) WithAttrs(a []slog.Attr) slog.Handler { return quietHandler{q.h.WithAttrs(a)} }
func (q quietHandler) WithGroup(n string) slog.Handler      { return quietHandler{q.h.WithGroup(n)} }

// debugLogger is the default logger with every record lowered to Debug.
func debugLogger() *slog.Logger { return slog.New(quietHandler{slog.Default().Handler()}) }

// nicDrops are the NIC's counters of packets it dropped: a warning when
// not zero.
var nicDrops = map[string]bool{
	"rcvd_bad_icrc": true, "rcvd_malformed": true, "rcvd_unknown_qp": true, "rcvd_wrong_transport": true, "rcvd_bad_pkey": true,
	"park_dropped": true, "handoff_dropped": true,
}

// logCounters logs, as a NIC closes, its non-zero counters (debug) and its
// ports' and its drops (warnings).
func logCounters(name string, dev *verbs.Device, ports []datapath.Port) {
	var attrs []any
	dev.NIC().Counters().Each(func(counter string, v uint64) {
		if v == 0 {
			return
		}
		attrs = append(attrs, counter, v)
		if nicDrops[counter] {
			slog.Warn("the NIC dropped packets", "dev", name, "counter", counter, "packets", v)
		}
	})
	slog.Debug("NIC counters", append([]any{"dev", name}, attrs...)...)
	for i, p := range ports {
		s := p.Stats()
		if n := s.RxDropFragment.Load() + s.RxDropRunt.Load() + s.RxDropMalformed.Load() + s.RxDropTooLong.Load() + s.RxDropKernel.Load() + s.TxDropTooLong.Load(); n > 0 {
			slog.Warn("the port dropped frames", "dev", name, "queue", i, "fragment", s.RxDropFragment.Load(), "runt", s.RxDropRunt.Load(), "malformed", s.RxDropMalformed.Load(),
				"too_long", s.RxDropTooLong.Load(), "kernel", s.RxDropKernel.Load(), "tx_too_long", s.TxDropTooLong.Load())
		}
		slog.Debug("port counters", "dev", name, "queue", i, "rx", s.RxFrames.Load(), "tx", s.TxFrames.Load(), "not_roce", s.RxDropNotRoCE.Load(),
			"tx_segmented", s.TxSegmented.Load(), "rx_coalesced", s.RxCoalesced.Load(), "tx_offload_off", s.TxOffloadOff.Load())
	}
}
