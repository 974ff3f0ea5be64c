package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

// every message with every field set, at the top of its range.
func fullMessages() []Message {
	gid := func(s string) [16]byte { return netip.MustParseAddr(s).As16() }
	priv := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		return b
	}
	ari := [72]byte{1, 2, 3}
	return []Message{
		&REQ{LocalCommID: 0xdeadbeef, ServiceID: ServiceID(PortSpaceTCP, 18515), LocalCAGUID: 0x0002c90300001234,
			LocalQKey: 0x11111111, LocalQPN: 0xffffff, ResponderResources: 16, LocalEECN: 0xabcdef, InitiatorDepth: 8,
			RemoteEECN: 0x123456, RemoteCMResponseTimeout: 31, TransportType: TransportUC, EndToEndFlowControl: true,
			StartingPSN: 0xfedcba, LocalCMResponseTimeout: 30, RetryCount: 7, PKey: 0xffff, PathMTU: 5, RDCExists: true,
			RNRRetryCount: 7, MaxCMRetries: 15, SRQ: true, ExtendedTransportType: 7,
			Primary: Path{LocalLID: 1, RemoteLID: 2, LocalGID: gid("::ffff:10.77.0.1"), RemoteGID: gid("::ffff:10.77.0.2"),
				FlowLabel: 0xfffff, PacketRate: 63, TrafficClass: 0xb8, HopLimit: 64, SL: 15, SubnetLocal: true, LocalACKTimeout: 31},
			Private: priv(REQPrivate)},
		&REP{LocalCommID: 1, RemoteCommID: 2, LocalQKey: 3, LocalQPN: 0x11, LocalEECN: 0xffffff, StartingPSN: 0xffffff,
			ResponderResources: 255, InitiatorDepth: 255, TargetACKDelay: 31, FailoverAccepted: 3, EndToEndFlowControl: true,
			RNRRetryCount: 7, SRQ: true, LocalCAGUID: ^uint64(0), Private: priv(REPPrivate)},
		&RTU{LocalCommID: 5, RemoteCommID: 6, Private: priv(RTUPrivate)},
		&REJ{LocalCommID: 7, RemoteCommID: 8, MessageRejected: MsgREP, RejectInfoLength: 72, Reason: RejConsumer, ARI: ari, Private: priv(REJPrivate)},
		&MRA{LocalCommID: 9, RemoteCommID: 10, MessageMRAed: MsgOther, ServiceTimeout: 31, Private: priv(MRAPrivate)},
		&DREQ{LocalCommID: 11, RemoteCommID: 12, RemoteQPN: 0xffffff, Private: priv(DREQPrivate)},
		&DREP{LocalCommID: 13, RemoteCommID: 14, Private: priv(DREPPrivate)},
		&SIDRREQ{RequestID: 15, PKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, 7174), Private: priv(SIDRREQPrivate)},
		&SIDRREP{RequestID: 16, Status: SIDRValid, QPN: 0xffffff, ServiceID: ServiceID(PortSpaceUDP, 7174), QKey: 0x01234567, Private: priv(SIDRREPPrivate)},
	}
}

// TestRoundTrip: each message encodes to a 256-byte CM MAD that decodes
// to the same message and transaction ID.
func TestRoundTrip(t *testing.T) {
	for _, m := range fullMessages() {
		t.Run(m.Attr().String(), func(t *testing.T) {
			mad, err := Encode(m, 0x0123456789abcdef)
			if err != nil {
				t.Fatal(err)
			}
			if len(mad) != MADSize || mad[0] != 1 || mad[1] != 0x07 || mad[2] != 2 || mad[3] != 0x03 {
				t.Fatalf("header % x", mad[:24])
			}
			h, got, err := Decode(mad)
			if err != nil {
				t.Fatal(err)
			}
			if h.TID != 0x0123456789abcdef || h.AttrID != m.Attr() {
				t.Fatalf("header %+v", h)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", got, m)
			}
		})
	}
}

// TestREQLayout: fields sit where IBTA's REQ puts them (the offsets in
// the class data, which starts at byte 24 of the MAD).
func TestREQLayout(t *testing.T) {
	m := fullMessages()[0].(*REQ)
	mad, err := Encode(m, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := mad[HeaderSize:]
	for _, c := range []struct {
		name string
		off  int
		want []byte
	}{
		{"attribute ID", -8, []byte{0x00, 0x10}},
		{"local communication ID", 0, []byte{0xde, 0xad, 0xbe, 0xef}},
		{"service ID (RDMA_PS_TCP, port 18515)", 8, []byte{0, 0, 0, 0, 0x01, 0x06, 0x48, 0x53}},
		{"local Q_Key", 28, []byte{0x11, 0x11, 0x11, 0x11}},
		{"local QPN, responder resources", 32, []byte{0xff, 0xff, 0xff, 16}},
		{"remote EECN, response timeout 31, UC, flow control", 40, []byte{0x12, 0x34, 0x56, 31<<3 | 1<<1 | 1}},
		{"starting PSN, local timeout 30, retry 7", 44, []byte{0xfe, 0xdc, 0xba, 30<<3 | 7}},
		{"P_Key, MTU 4096, RDC, RNR retry 7", 48, []byte{0xff, 0xff, 5<<4 | 1<<3 | 7}},
		{"max CM retries 15, SRQ, extended 7", 51, []byte{15<<4 | 1<<3 | 7}},
		{"local GID", 56, netip.MustParseAddr("::ffff:10.77.0.1").AsSlice()},
		{"remote GID", 72, netip.MustParseAddr("::ffff:10.77.0.2").AsSlice()},
		{"flow label, packet rate", 88, []byte{0xff, 0xff, 0xf0, 63}},
		{"traffic class, hop limit, SL, subnet local, ACK timeout", 92, []byte{0xb8, 64, 15<<4 | 1<<3, 31 << 3}},
		{"private data", 140, m.Private[:4]},
	} {
		if got := mad[HeaderSize+c.off : HeaderSize+c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("%s at %d: % x, want % x", c.name, c.off, got, c.want)
		}
	}
	if !bytes.Equal(d[96:140], make([]byte, 44)) {
		t.Error("the alternate path (bytes 96-139) is not empty")
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, _ := Encode(&RTU{LocalCommID: 1}, 1)
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	req, _ := Encode(fullMessages()[0], 1)
	for _, c := range []struct {
		name string
		mad  []byte
		want error
	}{
		{"short", good[:255], ErrMAD},
		{"empty", nil, ErrMAD},
		{"subnet management class", mod(func(b []byte) { b[1] = 0x01 }), ErrNotCM},
		{"class version 1", mod(func(b []byte) { b[2] = 1 }), ErrNotCM},
		{"base version 2", mod(func(b []byte) { b[0] = 2 }), ErrNotCM},
		{"LAP", mod(func(b []byte) { b[17] = byte(AttrLAP) }), ErrNotCM},
		{"REQ from QP 0", func() []byte {
			b := append([]byte(nil), req...)
			put24(b[HeaderSize+32:], 0)
			return b
		}(), ErrMAD},
		{"REJ with 73 bytes of ARI", mod(func(b []byte) { b[17] = byte(AttrREJ); b[HeaderSize+9] = 73 << 1 }), ErrMAD},
	} {
		if _, _, err := Decode(c.mad); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	for _, m := range []Message{&REQ{LocalQPN: 1, Private: make([]byte, REQPrivate+1)}, &REP{LocalQPN: 1, Private: make([]byte, REPPrivate+1)},
		&RTU{Private: make([]byte, RTUPrivate+1)}, &REJ{RejectInfoLength: 73}, &MRA{Private: make([]byte, MRAPrivate+1)}} {
		if _, err := Encode(m, 1); err == nil {
			t.Errorf("%v with too much in it encoded", m.Attr())
		}
	}
}

func TestServiceID(t *testing.T) {
	id := ServiceID(PortSpaceTCP, 7174)
	if id != 0x0000000001061c06 {
		t.Fatalf("ServiceID = %#x", id)
	}
	if ps, port, ok := SplitServiceID(id); !ok || ps != PortSpaceTCP || port != 7174 {
		t.Fatalf("SplitServiceID = %#x %d %v", ps, port, ok)
	}
	if _, _, ok := SplitServiceID(0x1234); ok {
		t.Fatal("a service ID outside the RDMA IP CM range was taken")
	}
}

func TestIPHeader(t *testing.T) {
	for _, h := range []IPHeader{
		{SrcPort: 40000, Src: netip.MustParseAddr("10.77.0.1"), Dst: netip.MustParseAddr("10.77.0.2")},
		{SrcPort: 1, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")},
	} {
		b := make([]byte, REQPrivate)
		if err := h.Put(b); err != nil {
			t.Fatal(err)
		}
		got, err := ParseIPHeader(b)
		if err != nil || got != h {
			t.Fatalf("ParseIPHeader = %+v, %v; want %+v", got, err, h)
		}
		if h.Src.Is4() && (b[1] != 0x40 || !bytes.Equal(b[16:20], []byte{10, 77, 0, 1}) || !bytes.Equal(b[4:16], make([]byte, 12))) {
			t.Fatalf("IPv4 header % x", b[:IPHeaderSize])
		}
	}
	if err := (IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("fd00::1")}).Put(make([]byte, 36)); err == nil {
		t.Error("mixed IP versions accepted")
	}
	if err := (IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}).Put(make([]byte, 35)); err == nil {
		t.Error("a short buffer accepted")
	}
	for _, b := range [][]byte{make([]byte, 35), append([]byte{1, 0x40}, make([]byte, 34)...), append([]byte{0, 0x50}, make([]byte, 34)...)} {
		if _, err := ParseIPHeader(b); !errors.Is(err, ErrMAD) {
			t.Errorf("ParseIPHeader(% x): %v", b[:2], err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range fullMessages() {
		mad, _ := Encode(m, 42)
		f.Add(mad)
	}
	f.Add(make([]byte, MADSize))
	f.Fuzz(func(t *testing.T, mad []byte) {
		h, m, err := Decode(mad)
		if err != nil {
			if !errors.Is(err, ErrMAD) && !errors.Is(err, ErrNotCM) {
				t.Fatalf("error %v is neither ErrMAD nor ErrNotCM", err)
			}
			return
		}
		again, err := Encode(m, h.TID)
		if err != nil {
			t.Fatalf("a decoded %v does not encode: %v", m.Attr(), err)
		}
		_, m2, err := Decode(again)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip of %v: %+v, %v", m.Attr(), m2, err)
		}
	})
}

func FuzzParseIPHeader(f *testing.F) {
	b := make([]byte, REQPrivate)
	IPHeader{SrcPort: 1, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}.Put(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseIPHeader(b)
		if err != nil {
			return
		}
		out := make([]byte, IPHeaderSize)
		if err := h.Put(out); err != nil {
			t.Fatalf("a parsed header does not encode: %v", err)
		}
		if h2, err := ParseIPHeader(out); err != nil || h2 != h {
			t.Fatalf("round trip: %+v, %v", h2, err)
		}
	})
}
