package main

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestLogFormat: the records' lines, each level's prefix, attributes
// (quoted when they must be) and groups; the quiet handler's Debug; and
// the status line cleared around a line and redrawn after it.
func TestLogFormat(t *testing.T) {
	var buf bytes.Buffer
	level := new(slog.LevelVar)
	level.Set(slog.LevelDebug)
	log := slog.New(&cliHandler{c: &console{w: &buf}, level: level})
	log.Info("serving metrics", "addr", "127.0.0.1:9100")
	log.Warn("the port dropped frames", "queue", 0, "why", "ring full")
	log.Error("recording frames: disk full", "err", errors.New(`say "no"`))
	log.With("dev", "veth0").WithGroup("port").Debug("counters", "rx", 5, slog.Group("drops", "runt", 1))
	log.Info("empty", "v", "")
	want := `softrnic: serving metrics addr=127.0.0.1:9100
softrnic: warning: the port dropped frames queue=0 why="ring full"
softrnic: error: recording frames: disk full err="say \"no\""
softrnic: debug: counters dev=veth0 port.rx=5 port.drops.runt=1
softrnic: empty v=""
`
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}

	buf.Reset()
	level.Set(slog.LevelInfo)
	slog.New(quietHandler{log.Handler()}).Warn("xsk: copy mode")
	if buf.Len() != 0 {
		t.Errorf("the quiet handler passed a warning at Info: %q", buf.String())
	}
	level.Set(slog.LevelDebug)
	slog.New(quietHandler{log.Handler()}).Warn("xsk: copy mode")
	if buf.String() != "softrnic: debug: xsk: copy mode\n" {
		t.Errorf("the quiet handler at Debug: %q", buf.String())
	}

	buf.Reset()
	c := &console{w: &buf, tty: true}
	c.setStatus("size 2 (1/23)")
	slog.New(&cliHandler{c: c, level: level}).Info("hello")
	c.setStatus("")
	if want := "\r\x1b[Ksize 2 (1/23)\r\x1b[Ksoftrnic: hello\nsize 2 (1/23)\r\x1b[K"; buf.String() != want {
		t.Errorf("status around a line: %q, want %q", buf.String(), want)
	}
}

// TestVerbose: -v before the command or among its flags logs the debug
// messages on stderr; without it stderr stays empty.
func TestVerbose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`softrnic_sent_pkts{device="x"} 1` + "\n"))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args  []string
		debug bool
	}{
		{[]string{"stat", srv.URL}, false},
		{[]string{"-v", "stat", srv.URL}, true},
		{[]string{"stat", srv.URL, "-v"}, true},
		{[]string{"-v", "stat", "-v=false", srv.URL}, false},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != 0 || stdout.String() != "link x/1 sent_pkts 1\n" {
			t.Errorf("%q: exit %d\n%s%s", tc.args, code, stdout.String(), stderr.String())
		}
		want := ""
		if tc.debug {
			want = "softrnic: debug: reading counters url=" + srv.URL + "/metrics\n"
		}
		if stderr.String() != want {
			t.Errorf("%q: stderr %q, want %q", tc.args, stderr.String(), want)
		}
	}
	if _, ok := slog.Default().Handler().(*cliHandler); ok {
		t.Error("run left its logger the default")
	}
}
