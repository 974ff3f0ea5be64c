package main

import (
	"bytes"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
	"github.com/softrnic/softrnic/internal/testenv"
)

// TestDecodeCaptures runs `softrnic decode` over the rxe captures: every
// RoCEv2 frame is accounted for with a good ICRC.
func TestDecodeCaptures(t *testing.T) {
	files := wiretest.CaptureFiles(t)
	var out bytes.Buffer
	if err := runDecode(append([]string{"-s"}, files...), &out); err != nil {
		t.Fatalf("decode: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "3949 frames: 3013 RoCEv2 (ICRC good), 0 malformed, 936 other traffic") {
		t.Errorf("summary:\n%s", out.String())
	}
	out.Reset()
	if err := runDecode([]string{filepath.Join(filepath.Dir(files[0]), "atomic_bw_cas.pcapng")}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RC_COMPARE_SWAP", "swap/add=", "RC_ATOMIC_ACKNOWLEDGE", "orig="} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("decode output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDecodeBadFrames: a capture with a damaged frame makes decode report it
// and fail.
func TestDecodeBadFrames(t *testing.T) {
	good := wiretest.SampleFrame(wire.RCSendOnly, 100, false, 1)
	bad := append([]byte{}, good...)
	bad[len(bad)-10] ^= 0xff
	path := filepath.Join(t.TempDir(), "bad.pcap")
	if err := wiretest.WritePcap(path, [][]byte{good, bad}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := runDecode([]string{path}, &out)
	if err == nil || !strings.Contains(out.String(), "bad ICRC") || !strings.Contains(out.String(), "1 RoCEv2 (ICRC good), 1 malformed") {
		t.Errorf("decode = %v\n%s", err, out.String())
	}
	if err := runDecode([]string{filepath.Join(t.TempDir(), "missing.pcap")}, &out); err == nil {
		t.Error("decode of a missing file succeeded")
	}
}

// TestDemo runs `softrnic demo` across a real veth pair (root only).
func TestDemo(t *testing.T) {
	testenv.RequireRoot(t) // the demo creates network namespaces
	var out bytes.Buffer
	if err := runDemo([]string{"-frames"}, &out); err != nil {
		t.Fatalf("demo -frames: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "38 of 38 frames crossed the veth pair intact") {
		t.Errorf("demo -frames output:\n%s", out.String())
	}
	for _, port := range []string{"xsk", "udp"} {
		out.Reset()
		if err := runDemo([]string{"-port", port, "-n", "20"}, &out); err != nil {
			t.Fatalf("demo -port %s: %v\n%s", port, err, out.String())
		}
		for _, want := range []string{"SEND/RECV", "WRITE_WITH_IMM", "READ", "CMP_AND_SWAP", "FETCH_AND_ADD", "all operations verified"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("demo -port %s output lacks %q:\n%s", port, want, out.String())
			}
		}
	}
}

// TestRunExit: the exit status of each kind of command line and the stream
// its usage goes to. Help asked for goes to stdout with status 0; a
// missing command, test, benchmark or argument, an unknown one and a bad
// flag or value go to stderr with status 2, each error printed once; a
// command that fails exits 1 without the usage.
func TestRunExit(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pcap")
	for _, tc := range []struct {
		args  []string
		code  int
		usage string // "stdout", "stderr" or "" (none)
		want  []string
	}{
		{nil, 2, "stderr", []string{"no command given", "usage: softrnic <command>", "hol, scale, hpu"}},
		{[]string{"help"}, 0, "stdout", []string{"usage: softrnic <command>", "hol, scale, hpu"}},
		{[]string{"-h"}, 0, "stdout", []string{"usage: softrnic <command>"}},
		{[]string{"--help"}, 0, "stdout", []string{"usage: softrnic <command>"}},
		{[]string{"help", "help"}, 0, "stdout", []string{"usage: softrnic <command>"}},
		{[]string{"bogus"}, 2, "stderr", []string{`unknown command "bogus"`, "usage: softrnic <command>"}},
		{[]string{"help", "bogus"}, 2, "stderr", []string{`softrnic help: unknown command "bogus"`, "usage: softrnic <command>"}},

		{[]string{"perf"}, 2, "stderr", []string{"no test named", "usage: softrnic perf", "-report_gbits"}},
		{[]string{"perf", "-h"}, 0, "stdout", []string{"usage: softrnic perf", "write-lat", "-report_gbits", "-s int"}},
		{[]string{"perf", "--help"}, 0, "stdout", []string{"usage: softrnic perf", "-report_gbits", "-s int"}},
		{[]string{"help", "perf"}, 0, "stdout", []string{"usage: softrnic perf", "-report_gbits", "-s int"}},
		{[]string{"perf", "write-bw", "--help"}, 0, "stdout", []string{"usage: softrnic perf", "-report_gbits"}},
		{[]string{"help", "perf", "write-bw"}, 0, "stdout", []string{"usage: softrnic perf", "-report_gbits"}},
		{[]string{"perf", "write-bw"}, 2, "stderr", []string{"-d: name the network device", "usage: softrnic perf"}},
		{[]string{"perf", "write-bw", "-zz"}, 2, "stderr", []string{"flag provided but not defined: -zz", "usage: softrnic perf"}},
		{[]string{"perf", "bogus-bw", "-d", "eth0"}, 2, "stderr", []string{`unknown test "bogus-bw"`}},
		{[]string{"perf", "write-bw", "-d", "eth0", "-s", "0"}, 2, "", []string{"-s 0: a message size is at least 1 byte", "softrnic help perf"}},
		{[]string{"perf", "write-lat", "-d", "eth0", "-s", "-5"}, 2, "", []string{"-s -5: a message size is at least 1 byte"}},
		{[]string{"perf", "write-bw", "-d", "eth0", "-n", "3"}, 2, "", []string{"at least 5 iterations, not 3"}},
		{[]string{"perf", "write-bw", "-d", "lo"}, 2, "", []string{"lo has no Ethernet address (it is the loopback device)"}},

		{[]string{"bench"}, 2, "stderr", []string{"no benchmark named", "usage: softrnic bench", "write"}},
		{[]string{"bench", "-h"}, 0, "stdout", []string{"usage: softrnic bench", "frames", "cache", "write"}},
		{[]string{"help", "bench"}, 0, "stdout", []string{"usage: softrnic bench", "frames", "cache", "write"}},
		{[]string{"help", "bench", "write"}, 0, "stdout", []string{"usage: softrnic bench write", "-cpuprofile"}},
		{[]string{"bench", "frames", "-h"}, 0, "stdout", []string{"usage: softrnic bench frames", "-mtu"}},
		{[]string{"bench", "bogus"}, 2, "stderr", []string{`unknown benchmark "bogus"`, "usage: softrnic bench"}},
		{[]string{"bench", "cache", "-zz"}, 2, "stderr", []string{"flag provided but not defined: -zz", "usage: softrnic bench cache"}},
		{[]string{"bench", "write", "-s", "0"}, 2, "", []string{"-s 0"}},
		{[]string{"bench", "scale", "-sets", "0"}, 2, "", []string{"-sets 0: want 1 to"}},
		{[]string{"bench", "scale", "-ways", "33"}, 2, "", []string{"-ways 33: want 1 to 32"}},

		{[]string{"help", "decode"}, 0, "stdout", []string{"usage: softrnic decode", "-s"}},
		{[]string{"decode"}, 2, "stderr", []string{"no capture files given", "usage: softrnic decode"}},
		{[]string{"decode", missing}, 1, "", []string{"softrnic decode: open " + missing}},
		{[]string{"help", "demo"}, 0, "stdout", []string{"usage: softrnic demo", "-port"}},
		{[]string{"demo", "-port", "dpdk"}, 2, "", []string{`-port "dpdk": want xsk or udp`}},
		{[]string{"demo", "extra"}, 2, "stderr", []string{"demo takes no arguments", "usage: softrnic demo"}},
		{[]string{"demo", "-frames", "-pcap", "x.pcapng"}, 2, "", []string{"-pcap and -metrics do not apply"}},
		{[]string{"bench", "hpu", "-veth=false", "-metrics", ":9100"}, 2, "", []string{"drop -veth=false"}},
		{[]string{"help", "bench", "write"}, 0, "stdout", []string{"-metrics", "-pcap", "-pprof"}},
		{[]string{"stat"}, 2, "stderr", []string{"no address given", "usage: softrnic stat"}},
		{[]string{"help", "stat"}, 0, "stdout", []string{"usage: softrnic stat", "-w duration"}},
		{[]string{"version"}, 0, "", []string{"softrnic ", runtime.Version()}},
		{[]string{"help", "-h"}, 0, "stdout", []string{"usage: softrnic <command>"}},
		{[]string{"devinfo"}, 2, "stderr", []string{"no netdev given", "usage: softrnic devinfo"}},
		{[]string{"devinfo", "-io", "rdma", "lo"}, 2, "", []string{`-io "rdma": want xsk or udp`}},
		{[]string{"devinfo", "lo"}, 0, "", []string{"hca_id:\tsoftrnic_lo", "udp (a kernel UDP socket on port 4791)", "::ffff:127.0.0.1, RoCE v2"}},
		{[]string{"-h"}, 0, "stdout", []string{"frames, cache, write, replay, loss, shallow, incast, isolation, hol, scale, hpu"}},
		{[]string{"help", "version"}, 0, "stdout", []string{"usage: softrnic version"}},
		{[]string{"version", "x"}, 2, "stderr", []string{"takes no arguments", "usage: softrnic version"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout.String(), stderr.String())
			}
			out := map[string]string{"stdout": stdout.String(), "stderr": stderr.String()}
			for stream, text := range out {
				if has := strings.Contains(text, "usage: softrnic"); has != (stream == tc.usage) {
					t.Errorf("usage on %s: %v, want it on %q\n%s", stream, has, tc.usage, text)
				}
			}
			all := stdout.String() + stderr.String()
			for _, want := range tc.want {
				if !strings.Contains(all, want) {
					t.Errorf("output lacks %q\nstdout:\n%s\nstderr:\n%s", want, stdout.String(), stderr.String())
				}
			}
			if tc.code != 0 {
				if stdout.Len() > 0 {
					t.Errorf("a failure wrote to stdout:\n%s", stdout.String())
				}
				// The error is printed once: the first line, whole, appears once.
				first, _, _ := strings.Cut(stderr.String(), "\n")
				if n := strings.Count(stderr.String(), first); first == "" || n != 1 {
					t.Errorf("error line %q printed %d times:\n%s", first, n, stderr.String())
				}
			} else if stderr.Len() > 0 {
				t.Errorf("a success wrote to stderr:\n%s", stderr.String())
			}
		})
	}
}
