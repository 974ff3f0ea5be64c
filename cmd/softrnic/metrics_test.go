package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// pprof answers loopback clients only, and an address without a host
// listens on loopback.
func TestPprofLoopbackOnly(t *testing.T) {
	mux := metricsMux(http.NotFoundHandler(), true)
	for _, c := range []struct {
		remote string
		want   int
	}{{"127.0.0.1:5000", http.StatusOK}, {"[::1]:5000", http.StatusOK}, {"192.0.2.7:5000", http.StatusForbidden}, {"[2001:db8::1]:5000", http.StatusForbidden}} {
		r := httptest.NewRequest("GET", "/debug/pprof/cmdline", nil)
		r.RemoteAddr = c.remote
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("pprof from %s: %d, want %d", c.remote, w.Code, c.want)
		}
	}
}

// An address without a host is loopback's; one that names a host keeps it.
func TestMetricsListenLoopbackByDefault(t *testing.T) {
	for _, c := range []struct{ addr, want string }{{":9100", "127.0.0.1:9100"}, {"0.0.0.0:9100", "0.0.0.0:9100"}, {"[::1]:80", "[::1]:80"}} {
		if got := loopbackDefault(c.addr); got != c.want {
			t.Errorf("%s: %s, want %s", c.addr, got, c.want)
		}
	}
	stop, err := serveHandler(":0", true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	if err != nil {
		t.Fatal(err)
	}
	stop()
}
