package metrics_test

import (
	"io"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/metrics"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// scrape reads one metric's value from a scrape.
func scrape(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in the scrape", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestScrape: the counters a user watches move between two scrapes of a
// NIC that is sending, and the Go runtime's are there.
func TestScrape(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 4096})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 1<<20)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 1<<20)
	verbstest.Connect(t, a, b, 3, 14)
	srv := httptest.NewServer(metrics.Handler(metrics.Source{Name: "a", Dev: a.Dev, Ports: []datapath.Port{pa}}))
	defer srv.Close()
	get := func() string {
		resp, err := srv.Client().Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}
	write := func(n int) {
		for range n {
			if _, err := a.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, 8192),
				RemoteAddr: b.MR.Addr, RKey: b.MR.RKey}}); err != nil {
				t.Fatal(err)
			}
			if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
	}
	write(5)
	first := get()
	write(10)
	second := get()
	for _, series := range []string{`softrnic_sent_pkts_total{device="a"}`, `softrnic_port_tx_frames_total{device="a",queue="0"}`,
		`softrnic_engine_doorbells_total{device="a",engine="0"}`, `softrnic_dma_read_bytes_total{device="a"}`} {
		if v0, v1 := scrape(t, first, series), scrape(t, second, series); v1 <= v0 {
			t.Errorf("%s did not move: %v then %v", series, v0, v1)
		}
	}
	if v := scrape(t, second, `softrnic_cache_lookups_total{context="qpc",device="a"}`); v == 0 {
		t.Error("no QPC lookups counted")
	}
	if v := scrape(t, second, "go_goroutines"); v == 0 {
		t.Error("no Go runtime metrics")
	}
	// The device's tables: one QP, one CQ, one MR of 256 pages.
	for series, want := range map[string]float64{`softrnic_qps_in_use{device="a"}`: 1, `softrnic_cqs_in_use{device="a"}`: 1,
		`softrnic_mrs_in_use{device="a"}`: 1, `softrnic_mtt_entries_in_use{device="a"}`: 256, `softrnic_qps_max{device="a"}`: 256} {
		if v := scrape(t, second, series); v != want {
			t.Errorf("%s is %v, want %v", series, v, want)
		}
	}
	cq, _ := a.Dev.CreateCQ(4)
	if v := scrape(t, get(), `softrnic_cqs_in_use{device="a"}`); v != 2 {
		t.Errorf("cqs in use %v after CreateCQ, want 2", v)
	}
	cq.Destroy()
	if v := scrape(t, get(), `softrnic_cqs_in_use{device="a"}`); v != 1 {
		t.Errorf("cqs in use %v after Destroy, want 1", v)
	}
}

// TestSet: a device is in the scrapes from Add until its remove, and
// others stay.
func TestSet(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 1024})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 4096)
	b := verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.47.0.2"), 4096)
	var set metrics.Set
	srv := httptest.NewServer(set.Handler())
	defer srv.Close()
	devices := func() []string {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var out []string
		for _, m := range regexp.MustCompile(`(?m)^softrnic_sent_pkts_total\{device="([^"]+)"\}`).FindAllStringSubmatch(string(body), -1) {
			out = append(out, m[1])
		}
		return out
	}
	if d := devices(); len(d) != 0 {
		t.Fatalf("an empty set exports %v", d)
	}
	removeA := set.Add(metrics.Source{Name: "a", Dev: a.Dev})
	removeB := set.Add(metrics.Source{Name: "b", Dev: b.Dev})
	if d := devices(); len(d) != 2 || d[0] != "a" || d[1] != "b" {
		t.Fatalf("devices %v, want [a b]", d)
	}
	removeA()
	if d := devices(); len(d) != 1 || d[0] != "b" {
		t.Fatalf("after removing a: %v, want [b]", d)
	}
	removeB()
	if d := devices(); len(d) != 0 {
		t.Fatalf("after removing both: %v", d)
	}
}

// TestPromlint: the softrnic series follow Prometheus' naming conventions
// as promlint checks them (counters end in _total, times are in seconds,
// no camel case), so that a Prometheus user finds them where they look.
func TestPromlint(t *testing.T) {
	pa, _ := porttest.NewPair(porttest.Config{Buffers: 256})
	a := verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.47.0.1"), 4096)
	srv := httptest.NewServer(metrics.Handler(metrics.Source{Name: "a", Dev: a.Dev, Ports: []datapath.Port{pa}}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	problems, err := promlint.New(resp.Body).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "softrnic_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}
