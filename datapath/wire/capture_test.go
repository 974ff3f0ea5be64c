package wire_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
)

// TestCaptures walks every frame that two real rdma_rxe peers exchanged: each
// RoCEv2 frame parses, its ICRC verifies, and re-encoding its parsed fields
// reproduces it byte for byte; every other frame is refused as not RoCE. The
// totals must match the captures' manifest.
func TestCaptures(t *testing.T) {
	files := wiretest.CaptureFiles(t)
	wantFrames, wantRoCE, wantOps := readManifest(t, filepath.Join(filepath.Dir(files[0]), "MANIFEST.md"))

	var frames, roce int
	ops := map[int]int{}
	buf := make([]byte, 16384)
	for _, file := range files {
		capture, err := wiretest.ReadCapture(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range capture {
			frames++
			var p wire.Packet
			err := wire.Parse(fr.Data, &p)
			if errors.Is(err, wire.ErrNotIP) || errors.Is(err, wire.ErrNotUDP) || errors.Is(err, wire.ErrNotRoCE) {
				continue
			}
			if err != nil {
				t.Errorf("%s frame %d: %v", fr.File, fr.Index, err)
				continue
			}
			roce++
			ops[int(p.Opcode)]++
			if got, want := p.ICRC(), p.ComputeICRC(); got != want {
				t.Errorf("%s frame %d: ICRC %#x, computed %#x", fr.File, fr.Index, got, want)
			}
			var f wire.FrameFields
			p.Fields(&f)
			n, err := wire.Encode(buf, &f)
			if err != nil {
				t.Errorf("%s frame %d: re-encode: %v", fr.File, fr.Index, err)
				continue
			}
			if string(buf[:n]) != string(fr.Data[:p.Len()]) {
				t.Errorf("%s frame %d (%v): re-encoded frame differs\n got %x\nwant %x", fr.File, fr.Index, p.Opcode, buf[:n], fr.Data[:p.Len()])
			}
			for _, b := range fr.Data[p.Len():] { // Ethernet padding of short frames
				if b != 0 {
					t.Errorf("%s frame %d: non-zero Ethernet trailer", fr.File, fr.Index)
					break
				}
			}
		}
	}
	if frames != wantFrames || roce != wantRoCE {
		t.Errorf("walked %d frames, %d RoCEv2; manifest says %d and %d", frames, roce, wantFrames, wantRoCE)
	}
	for op, n := range wantOps {
		if ops[op] != n {
			t.Errorf("opcode %d (%v): %d frames, manifest says %d", op, wire.Opcode(op), ops[op], n)
		}
	}
	t.Logf("%d files, %d frames, %d RoCEv2 frames parsed, verified and re-encoded", len(files), frames, roce)
}

// readManifest reads the totals line and the opcode histogram of MANIFEST.md.
func readManifest(t *testing.T, path string) (frames, roce int, ops map[int]int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Totals: \d+ files, (\d+) frames, (\d+) RoCEv2 frames\. Opcodes: ([0-9× ]+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no totals line", path)
	}
	frames, _ = strconv.Atoi(string(m[1]))
	roce, _ = strconv.Atoi(string(m[2]))
	ops = map[int]int{}
	for _, kv := range strings.Fields(string(m[3])) {
		op, n, ok := strings.Cut(kv, "×")
		if !ok {
			t.Fatalf("bad opcode count %q", kv)
		}
		o, _ := strconv.Atoi(op)
		c, _ := strconv.Atoi(n)
		ops[o] = c
	}
	return frames, roce, ops
}

// TestCaptureSourcePorts checks SourcePort against rxe: on an RC or UC
// connection every packet's UDP source port is derived from the two QPNs.
func TestCaptureSourcePorts(t *testing.T) {
	checked := 0
	for _, file := range wiretest.CaptureFiles(t) {
		capture, err := wiretest.ReadCapture(file)
		if err != nil {
			t.Fatal(err)
		}
		qpBy := map[string]uint32{} // destination IP -> QPN it receives on
		var pkts []wire.Packet
		for _, fr := range capture {
			var p wire.Packet
			if wire.Parse(fr.Data, &p) != nil || p.Info.Transport == wire.TransportUD {
				continue
			}
			if q, ok := qpBy[p.IPv4Header().Dst().String()]; ok && q != p.BTH().DestQP() {
				qpBy = nil // several QPs per host (SRQ runs): ambiguous
				break
			}
			qpBy[p.IPv4Header().Dst().String()] = p.BTH().DestQP()
			pkts = append(pkts, p)
		}
		if len(qpBy) != 2 {
			continue
		}
		var qps []uint32
		for _, q := range qpBy {
			qps = append(qps, q)
		}
		checked++
		want := wire.SourcePort(qps[0], qps[1])
		for _, p := range pkts {
			if got := p.UDP().SrcPort(); got != want {
				t.Errorf("%s: QPs %d,%d: source port %#x, want %#x", filepath.Base(file), qps[0], qps[1], got, want)
				break
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d captures had one RC or UC connection", checked)
	}
}
