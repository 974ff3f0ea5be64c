package main

import (
	"bytes"
	"path/filepath"
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
