package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/softrnic/softrnic/host/metrics"
)

// serveMetrics serves the sources' metrics at http://addr/metrics (and
// Go's pprof at /debug/pprof/ with withPprof) until stop.
func serveMetrics(addr string, withPprof bool, srcs ...metrics.Source) (stop func(), err error) {
	return serveHandler(addr, withPprof, metrics.Handler(srcs...))
}

// serveHandler serves h at http://addr/metrics (and pprof with
// withPprof) until stop.
func serveHandler(addr string, withPprof bool, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	u := "http://" + ln.Addr().String()
	slog.Info("serving metrics at "+u+"/metrics", "pprof", withPprof)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}
