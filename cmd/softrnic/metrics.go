package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"time"

	"github.com/softrnic/softrnic/host/metrics"
)

// serveMetrics serves the sources' metrics at http://addr/metrics (and
// Go's pprof at /debug/pprof/ with withPprof) until stop.
func serveMetrics(addr string, withPprof bool, srcs ...metrics.Source) (stop func(), err error) {
	return serveHandler(addr, withPprof, metrics.Handler(srcs...))
}

// serveHandler serves h at http://addr/metrics (and pprof with
// withPprof) until stop. An address without a host (":9100") is
// loopback's: the counters, and much more pprof's heap, goroutine stacks,
// command line and traces, are for whoever runs the NIC, not for anyone
// who can reach the host; name a host ("0.0.0.0:9100") to serve the
// metrics beyond it. pprof answers loopback clients only, whatever the
// address. Where they are served is said on stderr.
func serveHandler(addr string, withPprof bool, h http.Handler) (stop func(), err error) {
	ln, err := listenMetrics(addr)
	if err != nil {
		return nil, err
	}
	return serveOn(ln, withPprof, h), nil
}

// listenMetrics opens the metrics listener, before anything else is set
// up: an address that cannot be had (a namespace whose loopback device is
// down) fails the command before its NIC opens.
func listenMetrics(addr string) (net.Listener, error) {
	a := loopbackDefault(addr)
	ln, err := net.Listen("tcp", a)
	if err != nil {
		hint := ""
		if host, _, _ := net.SplitHostPort(a); host == "127.0.0.1" || host == "::1" || host == "localhost" {
			hint = " (is the loopback device up? ip link set lo up)"
		}
		return nil, fmt.Errorf("--metrics %s: %w%s", addr, err, hint)
	}
	return ln, nil
}

// serveOn serves h on ln as serveHandler does.
func serveOn(ln net.Listener, withPprof bool, h http.Handler) (stop func()) {
	srv := &http.Server{Handler: metricsMux(h, withPprof), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	u := "http://" + ln.Addr().String()
	fmt.Fprintf(os.Stderr, "softrnic: metrics at %s/metrics\n", u)
	if withPprof {
		fmt.Fprintf(os.Stderr, "softrnic: pprof at %s/debug/pprof/ (loopback clients only)\n", u)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
}

// loopbackDefault is addr with loopback's host if it names none.
func loopbackDefault(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// metricsMux serves h at /metrics and, with withPprof, Go's pprof at
// /debug/pprof/ to loopback clients.
func metricsMux(h http.Handler, withPprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	if withPprof {
		for path, fn := range map[string]http.HandlerFunc{"/debug/pprof/": pprof.Index, "/debug/pprof/cmdline": pprof.Cmdline,
			"/debug/pprof/profile": pprof.Profile, "/debug/pprof/symbol": pprof.Symbol, "/debug/pprof/trace": pprof.Trace} {
			mux.Handle(path, loopbackOnly(fn))
		}
	}
	return mux
}

// loopbackOnly refuses (403) a request from anywhere but loopback.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.Unmap().IsLoopback() {
			http.Error(w, "pprof answers loopback clients only", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
