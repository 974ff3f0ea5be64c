package capture

import (
	"bytes"
	"io"
	"net/netip"
	"testing"

	"github.com/google/gopacket/pcapgo"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
)

// stingy is a port that takes at most two frames a Send.
type stingy struct{ datapath.Port }

func (s stingy) Send(frames []datapath.Frame) (int, error) {
	return s.Port.Send(frames[:min(2, len(frames))])
}

// TestEachFrameOnce: a port that takes only part of each Send, as a full
// ring does: every frame is recorded once, in order, on its direction's
// interface, and the file reads back.
func TestEachFrameOnce(t *testing.T) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 64})
	defer pa.Close()
	defer pb.Close()
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Wrap(stingy{pa}, w, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Wrap(pb, w, "b")
	if err != nil {
		t.Fatal(err)
	}
	frames := make([]datapath.Frame, 5)
	if n := a.Alloc(frames); n != 5 {
		t.Fatalf("allocated %d", n)
	}
	for i := range frames { // RoCEv2 SEND_ONLY frames, PSN i
		f := wire.FrameFields{Ethernet: wire.EthernetFields{Dst: wire.MAC{2, 0, 0, 0, 0, 2}, Src: wire.MAC{2, 0, 0, 0, 0, 1}},
			IP4:     wire.IPv4Fields{TTL: 64, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")},
			UDP:     wire.UDPFields{SrcPort: 49152, DstPort: wire.RoCEv2Port},
			BTH:     wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 17, PSN: wire.PSN(i)},
			Payload: []byte{byte(i)}}
		n, err := wire.Encode(frames[i].Data, &f)
		if err != nil {
			t.Fatal(err)
		}
		frames[i].Data = frames[i].Data[:n]
	}
	for sent := 0; sent < len(frames); { // the engine's flushTX: the rest again
		n, err := a.Send(frames[sent:])
		if err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	a.Flush()
	got := make([]datapath.Frame, 8)
	received := 0
	for tries := 0; received < 5 && tries < 1000; tries++ {
		n, err := b.Recv(got)
		if err != nil {
			t.Fatal(err)
		}
		received += n
		b.Release(got[:n])
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if w.Frames.Load() != 10 {
		t.Fatalf("%d frames recorded, want 5 sent and 5 received", w.Frames.Load())
	}
	var tx []byte
	for _, f := range readBack(t, &buf) {
		if f.intf == "a tx" {
			var p wire.Packet
			if err := wire.Parse(f.data, &p); err != nil {
				t.Fatal(err)
			}
			tx = append(tx, byte(p.BTH().PSN()))
		}
	}
	if !bytes.Equal(tx, []byte{0, 1, 2, 3, 4}) {
		t.Fatalf("frames sent, in the file: %v, want 0 to 4 once each", tx)
	}
}

// TestTap: frames recorded through a tap land on its own interface,
// beside a port's, as they were given, and the tap keeps no reference
// to them.
func TestTap(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 8})
	defer pa.Close()
	defer pb.Close()
	if _, err := Wrap(pa, w, "veth0 queue 0"); err != nil {
		t.Fatal(err)
	}
	tap, err := w.Tap("veth0 kernel rx")
	if err != nil {
		t.Fatal(err)
	}
	frame := []byte("a frame through the kernel's stack")
	tap(frame)
	copy(frame, "overwritten after the tap returned")
	tap([]byte("second"))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range readBack(t, &buf) {
		got = append(got, f.intf+": "+string(f.data))
	}
	want := []string{"veth0 kernel rx: a frame through the kernel's stack", "veth0 kernel rx: second"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("the file holds %q, want %q", got, want)
	}
}

// recorded is a frame read back from a pcapng file, with its
// interface's name.
type recorded struct {
	intf string
	data []byte
}

// readBack reads every frame of the pcapng file in buf.
func readBack(t *testing.T, buf *bytes.Buffer) []recorded {
	t.Helper()
	r, err := pcapgo.NewNgReader(buf, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	var out []recorded
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		intf, err := r.Interface(ci.InterfaceIndex)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recorded{intf.Name, data})
	}
}
