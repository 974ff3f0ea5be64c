package wire_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
)

// tsharkFields are the Wireshark fields the test reads, in column order.
var tsharkFields = []string{
	"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.padcnt",
	"infiniband.bth.se", "infiniband.bth.a", "infiniband.bth.p_key",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn",
	"infiniband.deth.q_key", "infiniband.deth.srcqp",
	"infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt",
	"infiniband.immdt", "infiniband.ieth", "infiniband.invariant.crc",
}

// wantTshark renders the fields of f the way tshark prints them.
func wantTshark(f *wire.FrameFields, icrc uint32) []string {
	info := f.BTH.Opcode.Info()
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	row := make([]string, len(tsharkFields))
	row[0] = fmt.Sprint(uint8(f.BTH.Opcode))
	row[1] = fmt.Sprintf("0x%06x", f.BTH.DestQP)
	row[2] = fmt.Sprint(uint32(f.BTH.PSN))
	row[3] = fmt.Sprint(-len(f.Payload) & 3)
	row[4], row[5] = b(f.BTH.SE), b(f.BTH.AckReq)
	row[6] = fmt.Sprint(f.BTH.PKey)
	if info.Has(wire.HdrRETH) {
		row[7], row[8], row[9] = fmt.Sprintf("0x%016x", f.RETH.VA), fmt.Sprintf("0x%08x", f.RETH.RKey), fmt.Sprint(f.RETH.DMALen)
	}
	if info.Has(wire.HdrAtomicETH) { // Wireshark shows the AtomicETH VA and R_Key in the RETH fields
		row[7], row[8] = fmt.Sprintf("0x%016x", f.AtomicETH.VA), fmt.Sprintf("0x%08x", f.AtomicETH.RKey)
		row[14], row[15] = fmt.Sprint(f.AtomicETH.SwapAdd), fmt.Sprint(f.AtomicETH.Compare)
	}
	if info.Has(wire.HdrAETH) {
		row[10], row[11] = fmt.Sprint(uint8(f.AETH.Syndrome)), fmt.Sprint(f.AETH.MSN)
	}
	if info.Has(wire.HdrDETH) {
		row[12], row[13] = fmt.Sprintf("0x%016x", f.DETH.QKey), fmt.Sprintf("0x%08x", f.DETH.SrcQP)
	}
	if info.Has(wire.HdrAtomicAckETH) {
		row[16] = fmt.Sprint(f.AtomicOrigData)
	}
	if info.Has(wire.HdrImmDt) {
		row[17] = fmt.Sprintf("%08x", f.Imm)
	}
	if info.Has(wire.HdrIETH) {
		row[18] = fmt.Sprintf("%08x", f.InvalidateRKey)
	}
	// Wireshark reads the ICRC's four bytes big-endian; it is sent little-endian.
	row[19] = fmt.Sprintf("0x%08x", icrc>>24|icrc>>8&0xff00|icrc<<8&0xff0000|icrc<<24)
	if f.BTH.Opcode == wire.CNP {
		row[19] = "" // Wireshark 4.0 reads a CNP's BTH but not what follows
	}
	return row
}

// TestTshark writes a frame of every opcode, over IPv4 and IPv6, with
// distinctive values in every header, and checks that Wireshark's dissector
// reads back the opcode, QP, PSN, every extension header field and the ICRC.
func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tshark is not installed; .ci/run installs it")
		}
		t.Skip("tshark not installed (apt-get install tshark); skipping the Wireshark cross-check")
	}
	var frames [][]byte
	var want [][]string
	var ops []wire.Opcode
	for i, op := range wiretest.Opcodes() {
		for _, ipv6 := range []bool{false, true} {
			size := 0
			if op.Info().Flags&wire.OpPayload != 0 {
				size = 13 + 8*i
			}
			seq := uint32(len(frames))
			f := wiretest.SampleFields(op, size, ipv6, seq)
			f.AETH.Syndrome = wire.Syndrome(seq % 0x80)
			buf := make([]byte, 2048)
			n, err := wire.Encode(buf, &f)
			if err != nil {
				t.Fatal(err)
			}
			var p wire.Packet
			if err := wire.Parse(buf[:n], &p); err != nil {
				t.Fatal(err)
			}
			frames = append(frames, buf[:n])
			ops = append(ops, op)
			want = append(want, wantTshark(&f, p.ICRC()))
		}
	}
	path := filepath.Join(t.TempDir(), "opcodes.pcap")
	if err := wiretest.WritePcap(path, frames); err != nil {
		t.Fatal(err)
	}
	args := []string{"-r", path, "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark printed %d lines for %d frames", len(lines), len(frames))
	}
	for i, line := range lines {
		got := strings.Split(line, "|")
		if len(got) != len(tsharkFields) {
			t.Fatalf("frame %d: %d columns: %q", i+1, len(got), line)
		}
		for c := range got {
			if got[c] != want[i][c] {
				t.Errorf("frame %d (%v): %s = %q, want %q", i+1, ops[i], tsharkFields[c], got[c], want[i][c])
			}
		}
	}
	t.Logf("tshark decoded %d frames, %d opcodes over IPv4 and IPv6", len(frames), len(frames)/2)
}
