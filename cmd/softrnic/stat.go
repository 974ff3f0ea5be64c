package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/datapath"
)

const statText = `Reads the counters of a running softrnic (softrnic perf --metrics ADDR, or
demo or bench with -metrics ADDR) from http://ADDR/metrics and prints them
as iproute2's "rdma statistic show" does: one line per device,
"link DEVICE/1" and then name and value pairs, rxe's counters first. The
counters of queues, engines and context caches are summed unless -d is given.

With -w it reads them again every interval and prints, until interrupted or
for -n readings, the rates per second of the counters that moved and the
values of the gauges that changed ("link DEVICE/1 idle" when none did).

ADDR is HOST:PORT, :PORT (this host) or a URL.
`

// runStat is `softrnic stat ADDR`: a softrnic's counters from its metrics
// endpoint, once or as rates.
func runStat(args []string, stdout io.Writer) error {
	fs := newFlagSet("stat", "stat [flags] ADDR", statText)
	jsonOut := fs.Bool("j", false, "print JSON: an array of one object per device (with -w, one array a line per reading)")
	watch := fs.Duration("w", 0, "watch: read the counters every this often and print rates per second")
	count := fs.Int("n", 0, "with -w, stop after this many readings (0: until interrupted)")
	details := fs.Bool("d", false, "one entry per queue, engine and context cache (name[label=value]) instead of their sums")
	var words []string
	for rest := args; ; {
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		words, rest = append(words, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(words) == 0:
		return badUsage(flagUsage(fs), "no address given (the ADDR of softrnic perf --metrics ADDR)")
	case len(words) > 1:
		return badUsage(flagUsage(fs), "one address, not %q", words)
	case *watch < 0 || (*watch == 0 && flagGiven(fs, "w")):
		return badValue("-w %v: want a positive interval", *watch)
	case *count < 0:
		return badValue("-n %d: want a count of readings, 0 for no limit", *count)
	case *count > 0 && *watch == 0:
		return badValue("-n counts the readings of -w: give -w too")
	}
	u, err := metricsURL(words[0])
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	client := &http.Client{Timeout: 5 * time.Second}
	read := func() ([]*devCounters, time.Time, error) {
		s, err := fetchMetrics(ctx, client, u)
		if err != nil {
			return nil, time.Time{}, err
		}
		return softrnicCounters(s, *details), time.Now(), nil
	}
	prev, t0, err := read()
	if err != nil {
		return err
	}
	if *watch == 0 {
		return printCounters(stdout, prev, *jsonOut, nil)
	}
	tick := time.NewTicker(*watch)
	defer tick.Stop()
	for n := 0; *count == 0 || n < *count; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, t1, err := read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := printCounters(stdout, rates(prev, cur, t1.Sub(t0)), *jsonOut, prev); err != nil {
			return err
		}
		prev, t0 = cur, t1
	}
	return nil
}

// metricsURL makes a URL of stat's ADDR: HOST:PORT or :PORT is
// http://HOST:PORT/metrics; a URL without a path gets /metrics.
func metricsURL(addr string) (string, error) {
	if !strings.Contains(addr, "://") {
		if strings.HasPrefix(addr, ":") {
			addr = "localhost" + addr
		}
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("address %q: want HOST:PORT, :PORT or an http:// URL (the ADDR of softrnic perf --metrics ADDR)", addr)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return u.String(), nil
}

// fetchMetrics reads and parses a Prometheus text exposition at u and
// checks that it is a softrnic's.
func fetchMetrics(ctx context.Context, client *http.Client, u string) (*promScrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	slog.Debug("reading counters", "url", u)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot read the counters: %w (is softrnic running with --metrics at that address?)", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: not a softrnic metrics endpoint (softrnic perf --metrics ADDR serves one)", u, resp.Status)
	}
	s, err := parseProm(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: not Prometheus metrics: %w", u, err)
	}
	for _, m := range s.samples {
		if strings.HasPrefix(m.name, "softrnic_") && m.label("device") != "" {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%s serves no softrnic counters (softrnic perf --metrics ADDR serves them)", u)
}

// promScrape is a parsed Prometheus text exposition: the samples in order
// and each family's type (counter, gauge, …) from its TYPE line.
type promScrape struct {
	types   map[string]string
	samples []promSample
}

type promSample struct {
	name   string
	labels []promLabel // in the order given
	value  float64
}

type promLabel struct{ name, value string }

// label returns a label's value, "" if the sample has none.
func (s *promSample) label(name string) string {
	for _, l := range s.labels {
		if l.name == name {
			return l.value
		}
	}
	return ""
}

// parseProm parses Prometheus's text format: comment lines (HELP, TYPE),
// and samples `name{label="value",…} value [timestamp]`.
func parseProm(r io.Reader) (*promScrape, error) {
	s := &promScrape{types: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if line[0] == '#' {
			if f := strings.Fields(line[1:]); len(f) >= 3 && f[0] == "TYPE" {
				s.types[f[1]] = f[2]
			}
			continue
		}
		m, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		s.samples = append(s.samples, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(s.samples) == 0 {
		return nil, errors.New("no samples")
	}
	return s, nil
}

// parseSample parses one sample line.
func parseSample(line string) (promSample, error) {
	var m promSample
	i := strings.IndexAny(line, "{ \t")
	if i < 0 {
		return m, fmt.Errorf("%q: no value", line)
	}
	m.name, line = line[:i], strings.TrimLeft(line[i:], " \t")
	if !validMetricName(m.name) {
		return m, fmt.Errorf("%q: not a metric name", m.name)
	}
	if strings.HasPrefix(line, "{") {
		var err error
		if m.labels, line, err = parseLabels(line[1:]); err != nil {
			return m, fmt.Errorf("%s: %w", m.name, err)
		}
	}
	f := strings.Fields(line)
	if len(f) < 1 || len(f) > 2 {
		return m, fmt.Errorf("%s: want a value and at most a timestamp after the name, not %q", m.name, line)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return m, fmt.Errorf("%s: value %q: not a number", m.name, f[0])
	}
	m.value = v
	return m, nil
}

// parseLabels parses `name="value",…}` and returns what follows.
func parseLabels(s string) ([]promLabel, string, error) {
	var labels []promLabel
	for {
		s = strings.TrimLeft(s, " \t")
		if strings.HasPrefix(s, "}") {
			return labels, s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, "", errors.New("label without a value")
		}
		name := strings.TrimSpace(s[:eq])
		if !validMetricName(name) || strings.Contains(name, ":") {
			return nil, "", fmt.Errorf("%q: not a label name", name)
		}
		s = strings.TrimLeft(s[eq+1:], " \t")
		if !strings.HasPrefix(s, `"`) {
			return nil, "", fmt.Errorf("label %s: value not quoted", name)
		}
		var b strings.Builder
		i, closed := 1, false
		for ; i < len(s) && !closed; i++ {
			switch c := s[i]; c {
			case '"':
				closed = true
			case '\\':
				if i+1 == len(s) {
					return nil, "", fmt.Errorf("label %s: unterminated value", name)
				}
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				case '\\', '"':
					b.WriteByte(s[i])
				default:
					b.WriteByte('\\')
					b.WriteByte(s[i])
				}
			default:
				b.WriteByte(c)
			}
		}
		if !closed {
			return nil, "", fmt.Errorf("label %s: unterminated value", name)
		}
		labels = append(labels, promLabel{name, b.String()})
		s = strings.TrimLeft(s[i:], " \t")
		switch {
		case strings.HasPrefix(s, ","):
			s = s[1:]
		case strings.HasPrefix(s, "}"):
		default:
			return nil, "", fmt.Errorf("label %s: want , or } after the value", name)
		}
	}
}

// validMetricName reports whether s is a legacy Prometheus metric name,
// [a-zA-Z_:][a-zA-Z0-9_:]*.
func validMetricName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		ok := c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// devCounters are one device's counters, by name, in print order.
type devCounters struct {
	dev    string
	names  []string
	values map[string]float64
	gauges map[string]bool
}

// rxeCounters are the counters of the kernel's rxe driver, in its order:
// stat prints those softrnic has first.
var rxeCounters = []string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err",
	"rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
	"send_err", "link_downed", "rdma_sends", "rdma_recvs",
}

// counterRank orders the names: rxe's, then the rest of the NIC's in its
// own order; the others follow in the order of the scrape, those with the
// device label alone (DMA, the replay buffer's) before those of queues,
// engines and caches.
var counterRank = func() map[string]int {
	rank := map[string]int{}
	for i, n := range rxeCounters {
		rank[n] = i
	}
	var c datapath.Counters
	c.Each(func(name string, _ uint64) {
		if _, ok := rank[name]; !ok {
			rank[name] = len(rank)
		}
	})
	return rank
}()

// softrnicCounters gathers the softrnic_ samples of a scrape by device.
// Samples with labels besides the device (queue, engine, context) are
// summed under their name, or with details kept apart as
// name[label=value,…].
func softrnicCounters(s *promScrape, details bool) []*devCounters {
	var devs []*devCounters
	byDev := map[string]*devCounters{}
	rank := map[string]int{}
	for _, m := range s.samples {
		short, ok := strings.CutPrefix(m.name, "softrnic_")
		short = strings.TrimSuffix(short, "_total") // rxe's names, as rdma statistic shows them
		dev := m.label("device")
		if !ok || dev == "" {
			continue
		}
		d := byDev[dev]
		if d == nil {
			d = &devCounters{dev: dev, values: map[string]float64{}, gauges: map[string]bool{}}
			byDev[dev] = d
			devs = append(devs, d)
		}
		key := short
		if details {
			var extra []string
			for _, l := range m.labels {
				if l.name != "device" {
					extra = append(extra, l.name+"="+l.value)
				}
			}
			if len(extra) > 0 {
				key += "[" + strings.Join(extra, ",") + "]"
			}
		}
		if _, seen := d.values[key]; !seen {
			d.names = append(d.names, key)
		}
		d.values[key] += m.value
		if s.types[m.name] == "gauge" {
			d.gauges[key] = true
		}
		if _, ok := rank[short]; !ok {
			r, known := counterRank[short]
			if !known {
				// The NIC's other counters (with the device label
				// alone) before the queues', engines' and caches'.
				r = len(counterRank) + len(rank)
				if len(m.labels) > 1 {
					r += 1 << 20
				}
			}
			rank[short] = r
		}
	}
	for _, d := range devs {
		order := map[string]int{}
		for i, n := range d.names {
			order[n] = i
		}
		base := func(n string) string { b, _, _ := strings.Cut(n, "["); return b }
		slices.SortFunc(d.names, func(a, b string) int {
			return cmp.Or(cmp.Compare(rank[base(a)], rank[base(b)]), cmp.Compare(order[a], order[b]))
		})
	}
	return devs
}

// rates turns two readings into rates per second; gauges keep their
// latest value. Counters that went down (the process restarted) count
// from zero; names absent from the earlier reading are left out.
func rates(prev, cur []*devCounters, dt time.Duration) []*devCounters {
	secs := dt.Seconds()
	if secs <= 0 {
		secs = 1e-9
	}
	var out []*devCounters
	for _, c := range cur {
		var p *devCounters
		for _, d := range prev {
			if d.dev == c.dev {
				p = d
			}
		}
		if p == nil {
			continue
		}
		r := &devCounters{dev: c.dev, values: map[string]float64{}, gauges: c.gauges}
		for _, n := range c.names {
			v0, ok := p.values[n]
			if !ok {
				continue
			}
			v := c.values[n]
			if !c.gauges[n] {
				if v < v0 {
					v0 = 0
				}
				v = (v - v0) / secs
			}
			r.names = append(r.names, n)
			r.values[n] = v
		}
		out = append(out, r)
	}
	return out
}

// printCounters prints the devices' counters, one line per device as
// `rdma statistic show` does, or as JSON. With prev (rates of -w) the
// text lines hold only the counters that moved, as NAME RATE/s, and the
// gauges that changed; the JSON holds every one.
func printCounters(w io.Writer, devs []*devCounters, jsonOut bool, prev []*devCounters) error {
	if jsonOut {
		var b strings.Builder
		b.WriteByte('[')
		for i, d := range devs {
			if i > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(d.dev)
			fmt.Fprintf(&b, `{"ifname":%s,"port":1`, name)
			for _, n := range d.names {
				key, _ := json.Marshal(n)
				fmt.Fprintf(&b, ",%s:%s", key, jsonNumber(d.values[n], prev != nil))
			}
			b.WriteByte('}')
		}
		b.WriteString("]\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	var b strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&b, "link %s/1", d.dev)
		n0 := b.Len()
		for _, n := range d.names {
			v := d.values[n]
			switch {
			case prev == nil:
				fmt.Fprintf(&b, " %s %s", n, formatValue(v, false))
			case d.gauges[n]:
				if old, ok := lookupValue(prev, d.dev, n); !ok || old != v {
					fmt.Fprintf(&b, " %s %s", n, formatValue(v, false))
				}
			case v != 0:
				fmt.Fprintf(&b, " %s %s/s", n, formatValue(v, true))
			}
		}
		if b.Len() == n0 {
			b.WriteString(" idle")
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// lookupValue finds a device's value in a reading.
func lookupValue(devs []*devCounters, dev, name string) (float64, bool) {
	for _, d := range devs {
		if d.dev == dev {
			v, ok := d.values[name]
			return v, ok
		}
	}
	return 0, false
}

// formatValue prints a counter whole and a rate whole from 100 up, else
// to a tenth.
func formatValue(v float64, rate bool) string {
	switch {
	case rate && math.Abs(v) >= 100:
		v = math.Round(v)
	case rate:
		v = math.Round(v*10) / 10
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// jsonNumber is formatValue for JSON, where NaN and infinities are null.
func jsonNumber(v float64, rate bool) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "null"
	}
	return formatValue(v, rate)
}
