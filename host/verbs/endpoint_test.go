package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/host/verbs/verbstest"
)

// endpointCases are Endpoints and their canonical text forms.
var endpointCases = []struct {
	name string
	ep   verbs.Endpoint
	text string
}{
	{"RC with a region", verbs.Endpoint{Type: verbs.QPTRC, QPN: 17, PSN: 0x123456, GID: netip.MustParseAddr("10.47.0.1"),
		MAC: wire.MAC{2, 0x53, 0x52, 0, 0, 1}, MTU: 3, RKey: 0x15a, Addr: 0x10000, Len: 65536},
		"softrnic-endpoint/1 type=RC qpn=17 psn=1193046 gid=10.47.0.1 mac=02:53:52:00:00:01 mtu=1024 rkey=0x15a addr=0x10000 len=65536"},
	{"UC, address only", verbs.Endpoint{Type: verbs.QPTUC, QPN: 0xffffff, PSN: 0, GID: netip.MustParseAddr("fd47::2")},
		"softrnic-endpoint/1 type=UC qpn=16777215 psn=0 gid=fd47::2"},
	{"selective repeat, MTU 4096", verbs.Endpoint{Type: verbs.QPTRC, QPN: 2, PSN: 0xffffff, GID: netip.MustParseAddr("192.168.1.200"),
		MTU: 5, SelectiveRepeat: true},
		"softrnic-endpoint/1 type=RC qpn=2 psn=16777215 gid=192.168.1.200 mtu=4096 sr=1"},
	{"region at the top of the address space", verbs.Endpoint{Type: verbs.QPTRC, QPN: 300, PSN: 7, GID: netip.MustParseAddr("2001:db8::7"),
		MAC: wire.MAC{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff}, MTU: 1, RKey: 0xffffffff, Addr: 0xffffffffffff0000, Len: 0x10000},
		"softrnic-endpoint/1 type=RC qpn=300 psn=7 gid=2001:db8::7 mac=fe:ff:ff:ff:ff:ff mtu=256 rkey=0xffffffff addr=0xffffffffffff0000 len=65536"},
}

func TestEndpointText(t *testing.T) {
	for _, c := range endpointCases {
		t.Run(c.name, func(t *testing.T) {
			b, err := c.ep.MarshalText()
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.text {
				t.Fatalf("text\n %s\nwant\n %s", b, c.text)
			}
			if s := c.ep.String(); s != c.text {
				t.Fatalf("String %q", s)
			}
			for _, in := range []string{c.text, c.text + "\n", c.text + "\r\n"} {
				got, err := verbs.ParseEndpoint(in)
				if err != nil {
					t.Fatalf("parse %q: %v", in, err)
				}
				if got != c.ep {
					t.Fatalf("parse %q:\n %+v\nwant\n %+v", in, got, c.ep)
				}
			}
			var u verbs.Endpoint
			if err := u.UnmarshalText([]byte(c.text)); err != nil || u != c.ep {
				t.Fatalf("UnmarshalText: %+v, %v", u, err)
			}
		})
	}
}

// TestEndpointParseVariants: forms other than the canonical one that
// mean the same Endpoint.
func TestEndpointParseVariants(t *testing.T) {
	want := endpointCases[0].ep
	for _, in := range []string{
		"softrnic-endpoint/1 len=65536 addr=0x10000 rkey=0x15a mtu=1024 mac=02:53:52:00:00:01 gid=10.47.0.1 psn=1193046 qpn=17 type=RC",
		"softrnic-endpoint/1 type=RC qpn=0x11 psn=0x123456 gid=::ffff:10.47.0.1 mac=02-53-52-00-00-01 mtu=0x400 sr=0 rkey=346 addr=65536 len=0x10000",
		"softrnic-endpoint/1 type=RC qpn=0x0000011 psn=001193046 gid=10.47.0.1 mac=0253.5200.0001 mtu=1024 rkey=0x0000015A addr=0x10000 len=65536",
	} {
		got, err := verbs.ParseEndpoint(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got != want {
			t.Fatalf("%q:\n %+v\nwant\n %+v", in, got, want)
		}
	}
}

func TestEndpointParseErrors(t *testing.T) {
	const ok = "softrnic-endpoint/1 type=RC qpn=17 psn=5 gid=10.0.0.1"
	if _, err := verbs.ParseEndpoint(ok); err != nil {
		t.Fatalf("base case: %v", err)
	}
	for _, c := range []struct{ name, in string }{
		{"empty", ""},
		{"newline only", "\n"},
		{"no version", "type=RC qpn=17 psn=5 gid=10.0.0.1"},
		{"other version", "softrnic-endpoint/2 type=RC qpn=17 psn=5 gid=10.0.0.1"},
		{"version only", "softrnic-endpoint/1"},
		{"no type", "softrnic-endpoint/1 qpn=17 psn=5 gid=10.0.0.1"},
		{"no qpn", "softrnic-endpoint/1 type=RC psn=5 gid=10.0.0.1"},
		{"no psn", "softrnic-endpoint/1 type=RC qpn=17 gid=10.0.0.1"},
		{"no gid", "softrnic-endpoint/1 type=RC qpn=17 psn=5"},
		{"UD", "softrnic-endpoint/1 type=UD qpn=17 psn=5 gid=10.0.0.1"},
		{"lower-case type", "softrnic-endpoint/1 type=rc qpn=17 psn=5 gid=10.0.0.1"},
		{"unknown field", ok + " colour=blue"},
		{"repeated field", ok + " qpn=18"},
		{"no value", ok + " mtu="},
		{"no equals", ok + " mtu"},
		{"bare equals", ok + " ="},
		{"double space", "softrnic-endpoint/1  type=RC qpn=17 psn=5 gid=10.0.0.1"},
		{"trailing space", ok + " "},
		{"tab", strings.Replace(ok, " ", "\t", 1)},
		{"two lines", ok + "\n" + ok},
		{"NUL", ok + "\x00"},
		{"non-ASCII", ok + " mac=02:53:52:00:00:0\u00e9"},
		{"QP0", "softrnic-endpoint/1 type=RC qpn=0 psn=5 gid=10.0.0.1"},
		{"QP1", "softrnic-endpoint/1 type=RC qpn=1 psn=5 gid=10.0.0.1"},
		{"qpn over 24 bits", "softrnic-endpoint/1 type=RC qpn=16777216 psn=5 gid=10.0.0.1"},
		{"psn over 24 bits", "softrnic-endpoint/1 type=RC qpn=17 psn=0x1000000 gid=10.0.0.1"},
		{"negative", "softrnic-endpoint/1 type=RC qpn=-17 psn=5 gid=10.0.0.1"},
		{"plus sign", "softrnic-endpoint/1 type=RC qpn=+17 psn=5 gid=10.0.0.1"},
		{"underscore", "softrnic-endpoint/1 type=RC qpn=1_7 psn=5 gid=10.0.0.1"},
		{"empty hex", "softrnic-endpoint/1 type=RC qpn=0x psn=5 gid=10.0.0.1"},
		{"octal prefix", "softrnic-endpoint/1 type=RC qpn=0o21 psn=5 gid=10.0.0.1"},
		{"upper-case hex prefix", "softrnic-endpoint/1 type=RC qpn=0X11 psn=5 gid=10.0.0.1"},
		{"gid not an address", "softrnic-endpoint/1 type=RC qpn=17 psn=5 gid=host.example"},
		{"gid unspecified", "softrnic-endpoint/1 type=RC qpn=17 psn=5 gid=0.0.0.0"},
		{"gid unspecified v6", "softrnic-endpoint/1 type=RC qpn=17 psn=5 gid=::"},
		{"gid with zone", "softrnic-endpoint/1 type=RC qpn=17 psn=5 gid=fe80::1%eth0"},
		{"mac of 8 bytes", ok + " mac=02:00:00:00:00:00:00:01"},
		{"mac zero", ok + " mac=00:00:00:00:00:00"},
		{"mac garbage", ok + " mac=02:53:52"},
		{"mtu not a power of two", ok + " mtu=1000"},
		{"mtu 9000", ok + " mtu=9000"},
		{"mtu 0", ok + " mtu=0"},
		{"sr 2", ok + " sr=2"},
		{"sr true", ok + " sr=true"},
		{"rkey alone", ok + " rkey=0x15a"},
		{"no len", ok + " rkey=0x15a addr=0x1000"},
		{"no rkey", ok + " addr=0x1000 len=4096"},
		{"len 0", ok + " rkey=0x15a addr=0x1000 len=0"},
		{"region wraps", ok + " rkey=0x15a addr=0xffffffffffffff00 len=512"},
		{"rkey over 32 bits", ok + " rkey=0x100000000 addr=0x1000 len=4096"},
		{"addr over 64 bits", ok + " rkey=1 addr=0x10000000000000000 len=4096"},
		{"too long", ok + strings.Repeat(" sr=1", 100)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := verbs.ParseEndpoint(c.in)
			if !errors.Is(err, verbs.ErrEndpoint) {
				t.Fatalf("%q: %+v, %v; want an ErrEndpoint", c.in, e, err)
			}
			if e != (verbs.Endpoint{}) {
				t.Fatalf("%q: returned %+v with the error", c.in, e)
			}
		})
	}
}

// TestEndpointInvalid: an Endpoint that does not Validate has no text
// form.
func TestEndpointInvalid(t *testing.T) {
	good := endpointCases[0].ep
	for _, c := range []struct {
		name string
		edit func(*verbs.Endpoint)
	}{
		{"zero", func(e *verbs.Endpoint) { *e = verbs.Endpoint{} }},
		{"UD", func(e *verbs.Endpoint) { e.Type = verbs.QPTUD }},
		{"QPN 1", func(e *verbs.Endpoint) { e.QPN = 1 }},
		{"QPN 25 bits", func(e *verbs.Endpoint) { e.QPN = 1 << 24 }},
		{"PSN 25 bits", func(e *verbs.Endpoint) { e.PSN = 1 << 24 }},
		{"no GID", func(e *verbs.Endpoint) { e.GID = netip.Addr{} }},
		{"MTU 6", func(e *verbs.Endpoint) { e.MTU = 6 }},
		{"region without length", func(e *verbs.Endpoint) { e.Len = 0 }},
		{"region wraps", func(e *verbs.Endpoint) { e.Addr = ^uint64(0) }},
	} {
		e := good
		c.edit(&e)
		if _, err := e.MarshalText(); !errors.Is(err, verbs.ErrEndpoint) {
			t.Errorf("%s: MarshalText: %v, want an ErrEndpoint", c.name, err)
		}
		if err := verbs.WriteEndpoint(io.Discard, e); !errors.Is(err, verbs.ErrEndpoint) {
			t.Errorf("%s: WriteEndpoint: %v, want an ErrEndpoint", c.name, err)
		}
	}
}

// TestReadEndpoint: ReadEndpoint takes one line and leaves what follows
// it unread.
func TestReadEndpoint(t *testing.T) {
	c := endpointCases[0]
	r := strings.NewReader(c.text + "\nready\n")
	e, err := verbs.ReadEndpoint(r)
	if err != nil || e != c.ep {
		t.Fatalf("%+v, %v", e, err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "ready\n" {
		t.Fatalf("left %q, want %q", rest, "ready\n")
	}
	if _, err := verbs.ReadEndpoint(strings.NewReader(c.text)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("no newline, then EOF: %v", err)
	}
	if _, err := verbs.ReadEndpoint(strings.NewReader("")); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("nothing: %v", err)
	}
	r = strings.NewReader(strings.Repeat("x", 10000))
	if _, err := verbs.ReadEndpoint(r); !errors.Is(err, verbs.ErrEndpoint) {
		t.Fatalf("endless line: %v", err)
	}
	if r.Len() != 10000-verbs.MaxEndpointLen {
		t.Fatalf("read %d bytes of an endless line, want %d", 10000-r.Len(), verbs.MaxEndpointLen)
	}
}

// TestExchangeEndpoints: two sides swap Endpoints over a connection; a
// silent peer is cut off by the context.
func TestExchangeEndpoints(t *testing.T) {
	ca, cb := net.Pipe()
	defer ca.Close()
	defer cb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ea, eb := endpointCases[0].ep, endpointCases[1].ep
	type res struct {
		e   verbs.Endpoint
		err error
	}
	got := make(chan res, 1)
	go func() {
		e, err := verbs.ExchangeEndpoints(ctx, cb, eb)
		got <- res{e, err}
	}()
	e, err := verbs.ExchangeEndpoints(ctx, ca, ea)
	if err != nil || e != eb {
		t.Fatalf("a got %+v, %v", e, err)
	}
	if r := <-got; r.err != nil || r.e != ea {
		t.Fatalf("b got %+v, %v", r.e, r.err)
	}
	// The connection goes on after the exchange, without deadlines.
	go ca.Write([]byte("ready\n"))
	var b [6]byte
	if _, err := io.ReadFull(cb, b[:]); err != nil || string(b[:]) != "ready\n" {
		t.Fatalf("after the exchange: %q, %v", b, err)
	}

	// A peer that reads but never answers.
	sa, sb := net.Pipe()
	defer sa.Close()
	defer sb.Close()
	go io.Copy(io.Discard, sb)
	sctx, scancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer scancel()
	start := time.Now()
	if _, err := verbs.ExchangeEndpoints(sctx, sa, ea); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent peer: %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("silent peer: gave up after %v", d)
	}
	// A context cancelled while the exchange waits.
	cctx, ccancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, ccancel)
	if _, err := verbs.ExchangeEndpoints(cctx, sa, ea); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want context.Canceled", err)
	}
	// A peer that sends garbage.
	ga, gb := net.Pipe()
	defer ga.Close()
	defer gb.Close()
	go func() {
		io.ReadFull(gb, make([]byte, len(endpointCases[0].text)+1))
		gb.Write([]byte("hello\n"))
	}()
	if _, err := verbs.ExchangeEndpoints(ctx, ga, ea); !errors.Is(err, verbs.ErrEndpoint) {
		t.Fatalf("garbage: %v, want an ErrEndpoint", err)
	}
}

// connectEnds builds two NICs over an in-memory link, each with a QP in
// RESET (of type typ) and a registered buffer.
func connectEnds(t *testing.T, typ verbs.QPType) (a, b *end, qa, qb *verbs.QP) {
	pa, pb := porttest.NewPair(porttest.Config{Buffers: 4096})
	a = verbstest.NewEnd(t, pa, wire.MAC{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.49.0.1"), 1<<20)
	b = verbstest.NewEnd(t, pb, wire.MAC{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.49.0.2"), 1<<20)
	qa, qb = a.QP, b.QP
	if typ != verbs.QPTRC {
		var err error
		attr := verbs.QPInitAttr{Type: typ, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
		if qa, err = a.PD.CreateQP(attr); err != nil {
			t.Fatal(err)
		}
		attr.SendCQ, attr.RecvCQ = b.CQ, b.CQ
		if qb, err = b.PD.CreateQP(attr); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, qa, qb
}

// TestConnectEndpoints connects an RC and a UC QP pair the way two
// processes do: each side describes its QP, the descriptions travel as
// text, each side connects with its own and the peer's; then a WRITE and
// a SEND with immediate cross, with the region and PSNs from the
// Endpoints.
func TestConnectEndpoints(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.QPTRC, verbs.QPTUC} {
		t.Run(typ.String(), func(t *testing.T) {
			a, b, qa, qb := connectEnds(t, typ)
			la, lb := qa.Endpoint(verbs.RandomPSN(), nil), qb.Endpoint(verbs.RandomPSN(), b.MR)
			if la.MAC != a.MAC || la.GID != a.IP || la.QPN != qa.Num || la.Type != typ || la.MTU != a.Dev.ActiveMTU() || la.Len != 0 {
				t.Fatalf("a's endpoint %+v", la)
			}
			if lb.RKey != b.MR.RKey || lb.Addr != b.MR.Addr || lb.Len != uint64(len(b.MR.Buf)) {
				t.Fatalf("b's endpoint %+v, region %#x %#x", lb, b.MR.RKey, b.MR.Addr)
			}
			ra, rb := roundTrip(t, lb), roundTrip(t, la) // what a and b receive
			if err := qa.Connect(la, ra, nil); err != nil {
				t.Fatal(err)
			}
			if err := qb.Connect(lb, rb, nil); err != nil {
				t.Fatal(err)
			}
			if qa.State() != verbs.QPSRTS || qb.State() != verbs.QPSRTS {
				t.Fatalf("states %v %v", qa.State(), qb.State())
			}
			const size = 8192
			verbstest.Fill(a.Buf[:size], 7)
			copy(a.Buf[size:], "notify")
			const recvOff = 64 << 10 // where b receives the SEND, beside the region a writes
			if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 9, SGL: verbstest.SGL(b, recvOff, 64)}}); err != nil {
				t.Fatal(err)
			}
			off := uint64(4096)
			if _, err := qa.PostSend([]verbs.SendWR{
				{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, 0, size), RemoteAddr: ra.Addr + off, RKey: ra.RKey},
				{WRID: 2, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, SGL: verbstest.SGL(a, size, 6), Imm: size},
			}); err != nil {
				t.Fatal(err)
			}
			for i := uint64(1); i <= 2; i++ {
				if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != i {
					t.Fatalf("a's completion %d: %+v", i, wc)
				}
			}
			wc := verbstest.WaitWC(t, b.CQ)
			if wc.Status != verbs.WCSuccess || wc.WRID != 9 || wc.Flags&verbs.WCWithImm == 0 || wc.Imm != size || wc.ByteLen != 6 {
				t.Fatalf("b's completion %+v", wc)
			}
			b.Dev.Fence()
			if !bytes.Equal(b.Buf[off:off+size], a.Buf[:size]) || string(b.Buf[recvOff:recvOff+6]) != "notify" {
				t.Fatal("data differs")
			}
		})
	}
}

// roundTrip sends an Endpoint through its text form.
func roundTrip(t *testing.T, e verbs.Endpoint) verbs.Endpoint {
	t.Helper()
	var buf bytes.Buffer
	if err := verbs.WriteEndpoint(&buf, e); err != nil {
		t.Fatal(err)
	}
	got, err := verbs.ReadEndpoint(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got != e {
		t.Fatalf("sent %+v, received %+v", e, got)
	}
	return got
}

// TestConnectPathMTU: without ConnectOptions.PathMTU the path runs at the
// smallest MTU either side has; a WRITE is cut to it.
func TestConnectPathMTU(t *testing.T) {
	a, b, qa, qb := connectEnds(t, verbs.QPTRC)
	la, lb := qa.Endpoint(1, nil), qb.Endpoint(2, b.MR)
	if la.MTU != 5 {
		t.Fatalf("in-memory port: active MTU %d, want 5 (4096)", la.MTU)
	}
	lb.MTU = 1 // b says its port carries 256 bytes
	if err := qa.Connect(la, lb, nil); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(lb, la, nil); err != nil {
		t.Fatal(err)
	}
	sent0, re0 := a.Counts.SentPkts.Load(), a.Counts.RetransmittedPkts.Load()
	if _, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: verbstest.SGL(a, 0, 4096), RemoteAddr: lb.Addr, RKey: lb.RKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := verbstest.WaitWC(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc)
	}
	if n := a.Counts.SentPkts.Load() - sent0 - (a.Counts.RetransmittedPkts.Load() - re0); n != 16 {
		t.Fatalf("4096 bytes went in %d packets, want 16 of 256 bytes", n)
	}
}

// TestConnectErrors: what Connect refuses before touching the QP.
func TestConnectErrors(t *testing.T) {
	a, b, qa, qb := connectEnds(t, verbs.QPTRC)
	la, lb := qa.Endpoint(1, nil), qb.Endpoint(2, b.MR)
	noMAC := lb
	noMAC.MAC = wire.MAC{}
	uc := lb
	uc.Type = verbs.QPTUC
	bad := lb
	bad.QPN = 0
	other := la
	other.QPN++
	for _, c := range []struct {
		name          string
		local, remote verbs.Endpoint
		opts          *verbs.ConnectOptions
		want          error
	}{
		{"another QP's endpoint as local", other, lb, nil, verbs.ErrInvalid},
		{"type mismatch", la, uc, nil, verbs.ErrInvalid},
		{"invalid remote", la, bad, nil, verbs.ErrInvalid},
		{"no MAC", la, noMAC, nil, verbs.ErrInvalid},
		{"path MTU above the port's", la, lb, &verbs.ConnectOptions{PathMTU: 6, Access: verbs.AccessRemoteWrite}, verbs.ErrInvalidAttr},
	} {
		if err := qa.Connect(c.local, c.remote, c.opts); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if err := qa.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
			t.Fatal(err)
		}
	}
	// A next hop given in the options stands in for the peer's MAC.
	o := verbs.DefaultConnectOptions()
	o.NextHop = b.MAC
	if err := qa.Connect(la, noMAC, &o); err != nil {
		t.Fatalf("no MAC, next hop given: %v", err)
	}
	if err := qa.Connect(la, lb, nil); !errors.Is(err, verbs.ErrInvalidTransition) {
		t.Fatalf("a QP in RTS: %v, want ErrInvalidTransition", err)
	}
	ud, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTUD, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ud.Connect(ud.Endpoint(1, nil), lb, nil); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("UD QP: %v, want ErrInvalid", err)
	}
}

// FuzzParseEndpoint: any input either parses or is an ErrEndpoint, never
// a panic; what parses has a text form that parses back to it.
func FuzzParseEndpoint(f *testing.F) {
	for _, c := range endpointCases {
		f.Add(c.text)
		f.Add(c.text + "\n")
	}
	f.Add("softrnic-endpoint/1 type=RC qpn=0x11 psn=0x123456 gid=::ffff:10.47.0.1 mac=02-53-52-00-00-01 mtu=0x400 sr=0 rkey=346 addr=65536 len=0x10000")
	f.Add("softrnic-endpoint/1 type=RC qpn=17 psn=5 gid=fe80::1%eth0")
	f.Add("softrnic-endpoint/1 type=UC qpn=17 psn=5 gid=10.0.0.1 rkey=1 addr=0xffffffffffffffff len=1")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		e, err := verbs.ParseEndpoint(s)
		if err != nil {
			if !errors.Is(err, verbs.ErrEndpoint) {
				t.Fatalf("%q: error %v is not an ErrEndpoint", s, err)
			}
			if e != (verbs.Endpoint{}) {
				t.Fatalf("%q: %+v with the error", s, e)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("%q parsed to %+v, which does not validate: %v", s, e, err)
		}
		text, err := e.MarshalText()
		if err != nil {
			t.Fatalf("%q parsed to %+v, which has no text form: %v", s, e, err)
		}
		again, err := verbs.ParseEndpoint(string(text))
		if err != nil || again != e {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, e, text, again, err)
		}
		if r, err := verbs.ReadEndpoint(strings.NewReader(string(text) + "\n")); err != nil || r != e {
			t.Fatalf("ReadEndpoint of %q: %+v, %v", text, r, err)
		}
	})
}
