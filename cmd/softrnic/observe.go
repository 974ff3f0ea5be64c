package main

import (
	"flag"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/capture"
	"github.com/softrnic/softrnic/host/metrics"
	"github.com/softrnic/softrnic/host/observe"
	"github.com/softrnic/softrnic/host/verbs"
)

// addBenchObserveFlags are -pcap, -metrics and -pprof of the benchmarks
// that open their NICs over the in-memory port, one pair per
// measurement.
func addBenchObserveFlags(fs *flag.FlagSet) *observeFlags {
	return &observeFlags{
		pcap:    fs.String("pcap", "", "record every frame each NIC sends and receives in this pcapng file (interfaces \"NIC rx\" and \"NIC tx\", one pair per NIC the benchmark opens)"),
		metrics: fs.String("metrics", "", "serve the counters of the NICs open at the time as Prometheus metrics at http://ADDR/metrics (softrnic stat ADDR reads them)"),
		pprof:   fs.Bool("pprof", false, "with -metrics, serve Go's pprof at /debug/pprof/ on the same listener"),
	}
}

// hooks watches the NICs a benchmark opens, as the flags ask: their
// ports recorded (-pcap) and their counters served while they are open
// (-metrics). stop ends both after the benchmark.
func (o *observeFlags) hooks() (h *observe.Hooks, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	h = &observe.Hooks{}
	if *o.pcap != "" {
		w, done, err := openRecording(*o.pcap, "-pcap")
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, done)
		h.Port = func(name string, p datapath.Port) datapath.Port {
			c, err := capture.Wrap(p, w, name)
			if err != nil {
				return p // the recording failed: the benchmark runs unrecorded
			}
			return c
		}
	}
	if *o.metrics != "" {
		set := &metrics.Set{}
		done, err := serveHandler(*o.metrics, *o.pprof, set.Handler())
		if err != nil {
			stop()
			return nil, nil, err
		}
		stops = append(stops, done)
		h.Device = func(name string, dev *verbs.Device, ports []datapath.Port) func() {
			return set.Add(metrics.Source{Name: name, Dev: dev, Ports: ports})
		}
	}
	return h, stop, nil
}
