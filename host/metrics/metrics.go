// Package metrics serves a softrnic device's counters as Prometheus
// metrics (prometheus/client_golang), read at each scrape: the NIC's
// counters under rxe's names, its engines', its ports', its context
// caches' and its DMA engine's, and the Go runtime's.
package metrics

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/verbs"
)

// Source is one device to export, under its name (the device label).
type Source struct {
	Name  string
	Dev   *verbs.Device
	Ports []datapath.Port // its port's queues, for their counters (optional)
}

// Handler serves the sources' metrics and the Go runtime's at any path
// (mount it at /metrics).
func Handler(srcs ...Source) http.Handler {
	s := &Set{}
	for _, src := range srcs {
		s.Add(src)
	}
	return s.Handler()
}

// Set is a changing set of sources: the devices a benchmark opens and
// closes while the listener serves. The zero Set is empty.
type Set struct {
	mu   sync.Mutex
	next int
	srcs map[int]Source
}

// Add puts a source in the set until remove is called (before its
// device closes).
func (s *Set) Add(src Source) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srcs == nil {
		s.srcs = make(map[int]Source)
	}
	id := s.next
	s.next++
	s.srcs[id] = src
	return func() {
		s.mu.Lock()
		delete(s.srcs, id)
		s.mu.Unlock()
	}
}

// Handler serves the metrics of the sources in the set at each scrape,
// and the Go runtime's.
func (s *Set) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(&collector{set: s})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// sources returns the set's sources in the order they were added. A
// scrape holds the set's lock, so a device leaves only between scrapes.
func (s *Set) sources() []Source {
	ids := make([]int, 0, len(s.srcs))
	for id := range s.srcs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]Source, len(ids))
	for i, id := range ids {
		out[i] = s.srcs[id]
	}
	return out
}

// collector reads the counters at each scrape. It is unchecked (it
// describes nothing ahead): the set of counters is the NIC's.
type collector struct{ set *Set }

func (c *collector) Describe(chan<- *prometheus.Desc) {}

// gauges are the counters that go down as well as up.
var gauges = map[string]bool{
	"replay_entries": true, "replay_entries_reserved": true, "replay_entries_in_use": true, "replay_entries_high": true,
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.set.mu.Lock()
	defer c.set.mu.Unlock()
	for _, s := range c.set.sources() {
		nic := s.Dev.NIC()
		nic.Counters().Each(func(name string, v uint64) {
			kind, fv := prometheus.CounterValue, float64(v)
			if gauges[name] {
				kind = prometheus.GaugeValue
			}
			if n, ok := strings.CutSuffix(name, "_ns"); ok { // Prometheus counts time in seconds
				name, fv = n+"_seconds", fv/1e9
			}
			ch <- metric("softrnic_"+name, "the NIC's "+strings.ReplaceAll(name, "_", " ")+" (rxe's name where rxe has one)", kind, fv, s.Name)
		})
		for i, e := range nic.Engines() {
			q := strconv.Itoa(i)
			ch <- metric("softrnic_engine_rx_frames", "frames an engine took from its queue", prometheus.CounterValue, float64(e.RxFrames.Load()), s.Name, "engine", q)
			ch <- metric("softrnic_engine_doorbells", "send doorbells an engine served", prometheus.CounterValue, float64(e.Doorbells.Load()), s.Name, "engine", q)
			ch <- metric("softrnic_engine_handoff_in", "frames other engines passed to an engine", prometheus.CounterValue, float64(e.HandoffIn.Load()), s.Name, "engine", q)
			ch <- metric("softrnic_engine_idle_polls", "idle turns an engine polled instead of sleeping", prometheus.CounterValue, float64(e.IdlePolls.Load()), s.Name, "engine", q)
			ch <- metric("softrnic_engine_sleeps", "times an engine slept on its port", prometheus.CounterValue, float64(e.Sleeps.Load()), s.Name, "engine", q)
		}
		for i, p := range s.Ports {
			st, q := p.Stats(), strconv.Itoa(i)
			ch <- metric("softrnic_port_rx_frames", "RoCEv2 frames a port queue passed up", prometheus.CounterValue, float64(st.RxFrames.Load()), s.Name, "queue", q)
			ch <- metric("softrnic_port_tx_frames", "frames a port queue sent", prometheus.CounterValue, float64(st.TxFrames.Load()), s.Name, "queue", q)
			ch <- metric("softrnic_port_rx_bytes", "bytes of the frames a port queue passed up", prometheus.CounterValue, float64(st.RxBytes.Load()), s.Name, "queue", q)
			ch <- metric("softrnic_port_tx_bytes", "bytes of the frames a port queue sent", prometheus.CounterValue, float64(st.TxBytes.Load()), s.Name, "queue", q)
			ch <- metric("softrnic_port_tx_segmented", "frames a port queue sent as segments of a message of several (UDP GSO)", prometheus.CounterValue, float64(st.TxSegmented.Load()), s.Name, "queue", q)
			ch <- metric("softrnic_port_rx_coalesced", "frames a port queue received coalesced with others (UDP GRO)", prometheus.CounterValue, float64(st.RxCoalesced.Load()), s.Name, "queue", q)
			ch <- metric("softrnic_port_rx_fill_grown", "times a port queue lent the kernel more of its receive chunks (xsk: a load beyond its warm stock)", prometheus.CounterValue, float64(st.RxFillGrown.Load()), s.Name, "queue", q)
			ch <- metric("softrnic_port_tx_offload_off", "times the kernel refused a port queue's GSO message and it went on without", prometheus.CounterValue, float64(st.TxOffloadOff.Load()), s.Name, "queue", q)
			drops := st.RxDropNotRoCE.Load() + st.RxDropFragment.Load() + st.RxDropRunt.Load() + st.RxDropMalformed.Load() + st.RxDropTooLong.Load() + st.RxDropKernel.Load()
			ch <- metric("softrnic_port_rx_dropped", "frames a port queue dropped (the sum of the port_rx_drop_ counters)", prometheus.CounterValue, float64(drops), s.Name, "queue", q)
			for _, d := range []struct {
				name, help string
				v          uint64
			}{
				{"not_roce", "not IPv4 or IPv6 UDP to port 4791", st.RxDropNotRoCE.Load()},
				{"fragment", "IPv4 fragments of datagrams to port 4791 (RoCEv2 is never fragmented)", st.RxDropFragment.Load()},
				{"runt", "cut short: shorter than their headers or lengths say", st.RxDropRunt.Load()},
				{"malformed", "RoCEv2 with a bad header field (checksum, opcode, pad, lengths)", st.RxDropMalformed.Load()},
				{"too_long", "longer than the port's largest frame", st.RxDropTooLong.Load()},
				{"kernel", "dropped before the port saw them (ring full, no buffers), as the kernel reports", st.RxDropKernel.Load()},
			} {
				ch <- metric("softrnic_port_rx_drop_"+d.name, "frames a port queue dropped: "+d.help, prometheus.CounterValue, float64(d.v), s.Name, "queue", q)
			}
		}
		for t := range hostmem.NumContextTypes {
			st, ty := nic.Cache(t).Stats(), strings.ToLower(t.String())
			ch <- metric("softrnic_cache_lookups", "context cache lookups", prometheus.CounterValue, float64(st.Lookups), s.Name, "context", ty)
			ch <- metric("softrnic_cache_hits", "context cache hits", prometheus.CounterValue, float64(st.Hits), s.Name, "context", ty)
			ch <- metric("softrnic_cache_misses", "context cache misses", prometheus.CounterValue, float64(st.Misses), s.Name, "context", ty)
			ch <- metric("softrnic_cache_host_fetches", "context cache fetches from host memory", prometheus.CounterValue, float64(st.HostFetches), s.Name, "context", ty)
			ch <- metric("softrnic_cache_evictions", "context cache evictions", prometheus.CounterValue, float64(st.Evictions), s.Name, "context", ty)
		}
		for _, u := range s.Dev.Usage() {
			what := strings.ReplaceAll(u.Name, "_", " ")
			ch <- metric("softrnic_"+u.Name+"_in_use", "the device's "+what+" in use", prometheus.GaugeValue, float64(u.InUse), s.Name)
			ch <- metric("softrnic_"+u.Name+"_max", "the device's "+what+" at most (fixed at start)", prometheus.GaugeValue, float64(u.Capacity), s.Name)
		}
		d := s.Dev.DMA()
		ch <- metric("softrnic_dma_reads", "DMA reads of host memory", prometheus.CounterValue, float64(d.Reads.Load()), s.Name)
		ch <- metric("softrnic_dma_read_bytes", "bytes the NIC read from host memory", prometheus.CounterValue, float64(d.ReadBytes.Load()), s.Name)
		ch <- metric("softrnic_dma_writes", "DMA writes to host memory", prometheus.CounterValue, float64(d.Writes.Load()), s.Name)
		ch <- metric("softrnic_dma_write_bytes", "bytes the NIC wrote to host memory", prometheus.CounterValue, float64(d.WriteBytes.Load()), s.Name)
	}
}

// metric is one sample with the device label and any other label pairs.
// A counter's name ends in _total, as Prometheus names counters
// (softrnic_sent_pkts_total); softrnic stat shows it without.
func metric(name, help string, kind prometheus.ValueType, v float64, dev string, labels ...string) prometheus.Metric {
	if kind == prometheus.CounterValue && !strings.HasSuffix(name, "_total") {
		name += "_total"
	}
	keys, vals := []string{"device"}, []string{dev}
	for i := 0; i+1 < len(labels); i += 2 {
		keys, vals = append(keys, labels[i]), append(vals, labels[i+1])
	}
	return prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, keys, nil), kind, v, vals...)
}
