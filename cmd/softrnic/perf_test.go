package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/host/perftest"
	"github.com/softrnic/softrnic/tests/topo"
)

// TestPerfCommand runs `softrnic perf write-bw --json` and `write-lat`
// between two namespaces joined by a veth pair (root only): the server and
// the client each report figures, as JSON and as perftest's table.
func TestPerfCommand(t *testing.T) {
	spec := topo.PairSpec(1500, 1)
	tp := topo.New(t, spec)
	for _, tc := range []struct {
		args []string
		json bool
	}{
		{[]string{"write-bw", "-d", "veth0", "-n", "300", "-s", "4096", "--json"}, true},
		{[]string{"write-lat", "-d", "veth0", "-n", "200", "-p", "18600"}, false},
		{[]string{"read-bw", "-d", "veth0", "-n", "100", "--io", "udp", "--report_gbits"}, false},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var sout, cout bytes.Buffer
			serr := make(chan error, 1)
			go func() {
				serr <- tp.NS("a").Do(func() error { return runPerf(tc.args, &sout) })
			}()
			err := tp.NS("b").Do(func() error { return runPerf(append(append([]string{}, tc.args...), "10.47.0.1"), &cout) })
			if err != nil {
				t.Fatalf("client: %v\n%s", err, cout.String())
			}
			if err := <-serr; err != nil {
				t.Fatalf("server: %v\n%s", err, sout.String())
			}
			for side, out := range map[string]*bytes.Buffer{"client": &cout, "server": &sout} {
				if !tc.json {
					if !strings.Contains(out.String(), " #bytes ") {
						t.Errorf("%s: no table:\n%s", side, out.String())
					}
					continue
				}
				var res []perftest.Result
				if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != 1 || res[0].BWAvg <= 0 || res[0].Bytes != 4096 || res[0].Iters != 300 {
					t.Errorf("%s: JSON %v %+v:\n%s", side, err, res, out.String())
				}
			}
		})
	}
}

// TestPerfUsage: mistakes on the command line are named.
func TestPerfUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus-bw"}, "unknown test"},
		{[]string{"write-bw"}, "-d"},
		{[]string{"write-bw", "-d", "lo", "-m", "1500"}, "-m 1500"},
		{[]string{"write-bw", "-d", "lo", "-n", "3"}, "at least 5 iterations"},
		{[]string{"atomic-bw", "-d", "lo", "-s", "16"}, "8 bytes"},
		{[]string{"write-bw", "-d", "lo", "-A", "SWAP"}, "CMP_AND_SWAP"},
		{[]string{"write-bw", "-d", "lo", "1.2.3.4", "5.6.7.8"}, "more than one server address"},
		{[]string{"write-bw", "-d", "lo", "--io", "dpdk"}, "-io"},
	} {
		var out bytes.Buffer
		err := runPerf(tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("perf %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
