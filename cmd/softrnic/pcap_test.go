package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"github.com/softrnic/softrnic/internal/testenv"
	"github.com/softrnic/softrnic/internal/topo"
)

// TestPerfPcap runs `softrnic perf write-bw --pcap` on both sides of a
// veth pair (root only): each file holds the side's frames in both
// directions, tshark reads every one as RoCEv2 and flags none, and
// softrnic decode finds every ICRC good.
func TestPerfPcap(t *testing.T) {
	testenv.RequireRoot(t)
	tshark := testenv.RequireTool(t, "tshark", "apt-get install tshark; .ci/run installs it")
	tp := topo.New(t, topo.PairSpec(1500, 1))
	dir := t.TempDir()
	args := []string{"write-bw", "-d", "veth0", "-n", "50", "-s", "4096", "-p", "18610"}
	files := map[string]string{"server": filepath.Join(dir, "server.pcapng"), "client": filepath.Join(dir, "client.pcapng")}
	var sout, cout bytes.Buffer
	serr := make(chan error, 1)
	go func() {
		serr <- tp.NS("a").Do(func() error { return runPerf(append(args, "--pcap", files["server"]), &sout) })
	}()
	if err := tp.NS("b").Do(func() error {
		return runPerf(append(args, "--pcap", files["client"], "10.47.0.1"), &cout)
	}); err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	if err := <-serr; err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	for side, f := range files {
		out, err := exec.Command(tshark, "-r", f, "-Y", "_ws.malformed || _ws.expert.severity == error", "-T", "fields", "-e", "frame.number").Output()
		if err != nil {
			t.Fatalf("%s: tshark: %v", side, err)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			t.Errorf("%s: frames flagged malformed or in error: %s", side, s)
		}
		out, err = exec.Command(tshark, "-r", f, "-T", "fields", "-e", "frame.interface_name", "-e", "infiniband.bth.opcode").Output()
		if err != nil {
			t.Fatalf("%s: tshark: %v", side, err)
		}
		dirs := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fs := strings.Split(line, "\t")
			if len(fs) != 2 || fs[1] == "" {
				t.Errorf("%s: a frame tshark did not read as RoCEv2: %q", side, line)
				continue
			}
			dirs[fs[0][strings.LastIndex(fs[0], " ")+1:]]++
		}
		if dirs["rx"] == 0 || dirs["tx"] == 0 {
			t.Errorf("%s: frames by direction %v, want both", side, dirs)
		}
		var dec bytes.Buffer
		if err := runDecode([]string{"-s", f}, &dec); err != nil || !strings.Contains(dec.String(), "(ICRC good), 0 malformed") {
			t.Errorf("%s: softrnic decode: %v\n%s", side, err, dec.String())
		}
		t.Logf("%s: %v", side, dirs)
	}
}

// TestDemoPcap runs `softrnic demo -pcap` (root only): the file holds
// frames on all four interfaces, each NIC's both directions.
func TestDemoPcap(t *testing.T) {
	testenv.RequireRoot(t)
	f := filepath.Join(t.TempDir(), "demo.pcapng")
	var out bytes.Buffer
	if err := runDemo([]string{"-s", "4096", "-n", "5", "-pcap", f}, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	checkPairCapture(t, f)
}

// checkPairCapture checks a pcapng file of two NICs over a lossless veth
// pair: frames on all four interfaces, as many received as sent.
func checkPairCapture(t *testing.T, name string) {
	t.Helper()
	file, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	r, err := pcapgo.NewNgReader(file, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for {
		_, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		intf, _ := r.Interface(ci.InterfaceIndex)
		per[intf.Name]++
	}
	for _, name := range []string{"a rx", "a tx", "b rx", "b tx"} {
		if per[name] == 0 {
			t.Errorf("no frame on %q: %v", name, per)
		}
	}
	if per["a tx"] != per["b rx"] || per["b tx"] != per["a rx"] {
		t.Errorf("frames sent and received differ on a lossless veth: %v", per)
	}
}

// TestBenchPcap runs `softrnic bench write -pcap` and the veth rows of
// `softrnic bench hpu -pcap`, short (root only): each file holds both
// NICs' frames, each ICRC good.
func TestBenchPcap(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"write": {"write", "-s", "4096", "-n", "20", "-d", "100ms"},
		"hpu":   {"hpu", "-samples", "10", "-d", "10ms", "-n", "200", "-apps=false"},
	} {
		f := filepath.Join(dir, name+".pcapng")
		var out bytes.Buffer
		if err := runBench(append(args, "-pcap", f), &out); err != nil {
			t.Fatalf("bench %s: %v\n%s", name, err, out.String())
		}
		checkPairCapture(t, f)
		var dec bytes.Buffer
		if err := runDecode([]string{"-s", f}, &dec); err != nil || !strings.Contains(dec.String(), "(ICRC good), 0 malformed, 0 other") {
			t.Errorf("bench %s: softrnic decode: %v\n%s", name, err, dec.String())
		}
	}
}

// TestDemoMetrics runs `softrnic demo -metrics` (root only) and reads
// both NICs' counters with `softrnic stat` while it runs.
func TestDemoMetrics(t *testing.T) {
	testenv.RequireRoot(t)
	addr := freeAddr(t)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- runDemo([]string{"-s", "64", "-n", "2000", "-metrics", addr, "-pprof"}, &out) }()
	got := statWhile(t, addr, done, "the demo", &out)
	if resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("pprof: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	if err := <-done; err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "link a/1 sent_pkts ") || !strings.HasPrefix(lines[1], "link b/1 sent_pkts ") {
		t.Errorf("stat during the demo:\n%s", got)
	}
}

// TestInMemoryBenchObserve: the benchmarks whose NICs run over the
// in-memory port record them with -pcap (each NIC an rx and a tx
// interface, every frame a good RoCEv2 frame) and serve the NICs open at
// the time with -metrics. No root needed.
func TestInMemoryBenchObserve(t *testing.T) {
	f := filepath.Join(t.TempDir(), "loss.pcapng")
	addr := freeAddr(t)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runBench([]string{"loss", "-l", "0,1", "-n", "40", "-rtt", "20ms", "-pcap", f, "-metrics", addr}, &out)
	}()
	// While it runs, stat finds the open NICs, under their names.
	got := statWhile(t, addr, done, "bench loss", &out)
	if !strings.Contains(got, "loss ") {
		t.Errorf("stat shows no NIC named after its cell:\n%s", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("bench loss: %v\n%s", err, out.String())
	}
	var dec bytes.Buffer
	if err := runDecode([]string{"-s", f}, &dec); err != nil || !strings.Contains(dec.String(), "(ICRC good), 0 malformed, 0 other") {
		t.Errorf("softrnic decode: %v\n%s", err, dec.String())
	}
	// Eight cells of two NICs, each with an rx and a tx interface.
	r, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ng, err := pcapgo.NewNgReader(r, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, _, err := ng.ReadPacketData(); err != nil {
			break
		}
	}
	named := 0
	for i := range ng.NInterfaces() {
		if in, err := ng.Interface(i); err == nil && strings.HasPrefix(in.Name, "loss ") {
			named++
		}
	}
	if named != 8*2*2 {
		t.Errorf("%d interfaces named after a cell, want 32 (8 cells, 2 NICs, rx and tx)", named)
	}
}

// freeAddr returns a loopback TCP address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// statWhile runs softrnic stat on addr until it shows a NIC's counters,
// failing if the command serving them (what, whose result done gives)
// ends first. It calls runStat, not run: run points the process's logger
// at its own stderr, which the running command writes to meanwhile.
func statWhile(t *testing.T, addr string, done <-chan error, what string, out *bytes.Buffer) string {
	t.Helper()
	for {
		select {
		case err := <-done:
			t.Fatalf("%s ended (%v) before stat read its counters\n%s", what, err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		var stdout bytes.Buffer
		if runStat([]string{addr}, &stdout) == nil && strings.Contains(stdout.String(), "sent_pkts") {
			return stdout.String()
		}
	}
}
