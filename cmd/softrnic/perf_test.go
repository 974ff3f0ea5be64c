package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/host/perftest"
	"github.com/softrnic/softrnic/internal/topo"
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
		// perftest -R and -z: the exchange over rdma_cm, and with -R the
		// test's QPs connected through it.
		{[]string{"write-bw", "-d", "veth0", "-n", "200", "-s", "4096", "-R", "--json"}, true},
		{[]string{"send-lat", "-d", "veth0", "-n", "100", "-z"}, false},
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
				if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != 1 || res[0].BWAvg <= 0 || res[0].Bytes != 4096 || res[0].Iters < 200 {
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
		{[]string{"write-bw", "-d", "lo", "-R", "-z"}, "-R or -z, not both"},
		{[]string{"write-bw", "-d", "lo", "-R", "--sr"}, "--sr"},
		{[]string{"write-bw", "-d", "lo", "-p", "70000"}, "-p 70000"},
		{[]string{}, "no test named"},
		{[]string{"-d", "lo"}, "no test named"},
		{[]string{"write-bw", "-d", "lo", "-s", "0"}, "-s 0: a message size is at least 1 byte"},
		{[]string{"write-lat", "-d", "lo", "-s", "0"}, "-s 0: a message size is at least 1 byte"},
		{[]string{"atomic-bw", "-d", "lo", "-s", "0"}, "-s 0: a message size is at least 1 byte"},
		{[]string{"write-bw", "-d", "lo", "-s", "-5"}, "-s -5: a message size is at least 1 byte"},
		{[]string{"write-bw", "-d", "lo"}, "lo has no Ethernet address (it is the loopback device)"},
		{[]string{"-d", "lo", "write-bw"}, "lo has no Ethernet address"},
		{[]string{"write-lat", "-d", "lo", "-s", "2"}, "lo has no Ethernet address"},
		{[]string{"read-bw", "-d", "lo", "-c", "UC"}, "-c UC runs the send and write tests"},
		{[]string{"write-bw", "-d", "lo", "-c", "UD"}, "-c UD runs the send tests"},
		{[]string{"send-bw", "-d", "lo", "-c", "XRC"}, "want RC, UC or UD"},
		{[]string{"send-bw", "-d", "lo", "-T", "32"}, "-T 32"},
		{[]string{"send-bw", "-d", "lo", "-S", "16"}, "-S 16"},
		{[]string{"send-bw", "-d", "lo", "-u", "40"}, "-u 40"},
		{[]string{"send-bw", "-d", "lo", "--ib-port", "2"}, "-i 2"},
		{[]string{"send-bw", "-d", "lo", "--source_ip", "host"}, "--source_ip"},
		{[]string{"write-bw", "-d", "lo", "-e"}, "-e"},
		{[]string{"write-lat", "-d", "lo", "--run_infinitely"}, "--run_infinitely is for the bandwidth tests"},
		{[]string{"write-bw", "-d", "lo", "-H"}, "-U and -H are for the latency tests"},
		{[]string{"write-bw", "-d", "lo", "--post_list", "7"}, "multiple of the post list"},
		{[]string{"read-bw", "-d", "lo", "--inline_size", "64"}, "-I"},
	} {
		var out bytes.Buffer
		err := runPerf(tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("perf %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// TestPerfSizeDefault: leaving -s out takes the test's default size (bw
// 65536, lat 2); giving it takes exactly what was given.
func TestPerfSizeDefault(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"write-bw", "-d", "eth0"}, 65536},
		{[]string{"send-bw", "-d", "eth0"}, 65536},
		{[]string{"write-lat", "-d", "eth0"}, 2},
		{[]string{"read-lat", "-d", "eth0"}, 2},
		{[]string{"atomic-bw", "-d", "eth0"}, 8},
		{[]string{"write-bw", "-d", "eth0", "-s", "1"}, 1},
		{[]string{"write-lat", "-s", "4096", "-d", "eth0"}, 4096},
		// perftest's long forms, with a space or an '='
		{[]string{"write-lat", "--size", "64", "--ib-dev", "eth0"}, 64},
		{[]string{"write-bw", "--size=128", "--ib-dev=eth0", "--iters=100", "--qp", "2", "--tx-depth", "16"}, 128},
	} {
		pf := newPerfFlags()
		if _, err := pf.parse(tc.args); err != nil {
			t.Errorf("perf %v: %v", tc.args, err)
			continue
		}
		cfg, err := pf.cfg.WithDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Size != tc.want {
			t.Errorf("perf %v: size %d, want %d", tc.args, cfg.Size, tc.want)
		}
	}
}

// TestPerfFlags: perftest's flags reach the run's configuration, by
// their short and long names alike.
func TestPerfFlags(t *testing.T) {
	pf := newPerfFlags()
	args := []string{"send-bw", "--ib-dev", "eth0", "--connection=UD", "--iters", "300", "--qp=3", "--tx-depth", "64",
		"--rx-depth", "32", "--cq-mod", "4", "--post_list", "4", "--inline_size", "100", "--qp-timeout", "18", "-N",
		"--mtu", "1024", "--gid-index", "1", "--port", "18600", "--duration", "3", "--cpu_util"}
	if _, err := pf.parse(args); err != nil {
		t.Fatal(err)
	}
	c, err := pf.cfg.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := struct {
		conn                               string
		iters, qps, tx, rx, cqmod, list, i int
		timeout                            uint8
		mtu, gid, port                     int
	}{"UD", 300, 3, 64, 32, 4, 4, 100, 18, 3, 1, 18600}
	got := want
	got.conn, got.iters, got.qps, got.tx, got.rx, got.cqmod, got.list, got.i = c.Conn.String(), c.Iters, c.QPs, c.TxDepth, c.RxDepth, c.CQMod, c.PostList, c.Inline
	got.timeout, got.mtu, got.gid, got.port = c.Timeout, c.MTU, *pf.gidIndex, *pf.tcpPort
	if got != want || !c.NoPeak || !c.CPUUtil || c.Duration != 3e9 {
		t.Errorf("parsed %+v (NoPeak %v CPUUtil %v Duration %v), want %+v", got, c.NoPeak, c.CPUUtil, c.Duration, want)
	}
	// -H's long form is perftest's own spelling, report-histogrm; the
	// spelling its usage text gives works too.
	for _, f := range []string{"--report-histogrm", "--report-histogram", "-H"} {
		pf := newPerfFlags()
		if _, err := pf.parse([]string{"send-lat", "-d", "eth0", f, "--report-unsorted"}); err != nil || !pf.cfg.Histogram || !pf.cfg.Unsorted {
			t.Errorf("%s: %v, histogram %v unsorted %v", f, err, pf.cfg.Histogram, pf.cfg.Unsorted)
		}
	}
}

// TestXSKError: an AF_XDP port refused for want of privileges says to run
// as root or to use the udp port; other errors only say which port failed.
// The original error stays reachable with errors.Is.
func TestXSKError(t *testing.T) {
	memlock := errors.New("bpf: load XDP program: map create: operation not permitted (MEMLOCK may be too low, consider rlimit.RemoveMemlock)")
	for _, tc := range []struct {
		name    string
		err     error
		udpFlag string
		hint    bool
	}{
		{"EPERM wrapped", fmt.Errorf("map create: %w (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", unix.EPERM), "--io udp", true},
		{"MEMLOCK text only", memlock, "--io udp", true},
		{"EACCES", fmt.Errorf("bind: %w", unix.EACCES), "-port udp", true},
		{"EPERM, no udp flag", fmt.Errorf("xsk: %w", unix.EPERM), "", true},
		{"no such device", fmt.Errorf("xsk: %w", unix.ENODEV), "--io udp", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := xskError("veth7", tc.err, tc.udpFlag)
			msg := err.Error()
			if !errors.Is(err, tc.err) {
				t.Errorf("%v does not wrap %v", err, tc.err)
			}
			if !strings.Contains(msg, "AF_XDP port on veth7") || !strings.Contains(msg, tc.err.Error()) {
				t.Errorf("%q names neither the device nor the cause", msg)
			}
			hasHint := strings.Contains(msg, "run softrnic as root") && strings.Contains(msg, "CAP_NET_ADMIN, CAP_BPF and CAP_IPC_LOCK")
			if hasHint != tc.hint {
				t.Errorf("hint %v, want %v: %q", hasHint, tc.hint, msg)
			}
			if hasUDP := strings.Contains(msg, "use "+tc.udpFlag+" for a kernel UDP socket"); tc.hint && tc.udpFlag != "" && !hasUDP {
				t.Errorf("%q does not name %s", msg, tc.udpFlag)
			}
			if tc.udpFlag == "" && strings.Contains(msg, "udp") {
				t.Errorf("%q names a udp flag there is not", msg)
			}
		})
	}
}
