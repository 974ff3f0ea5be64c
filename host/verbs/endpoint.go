package verbs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
)

// Endpoint is what one side of an RC or UC connection tells the other so
// that each can connect its QP to the peer's (QP.Connect): the QP's
// number, type and first PSN, where the NIC is on the network, and
// optionally one memory region the peer may access with RDMA WRITE, READ
// or atomics. Two processes, on one host or two, exchange Endpoints out of
// band, over a TCP socket for instance (ExchangeEndpoints), as perftest
// and rdma_cm exchange theirs.
//
// Its text form (MarshalText, String) is one line of space-separated
// key=value fields after a version word:
//
//	softrnic-endpoint/1 type=RC qpn=17 psn=1193046 gid=10.47.0.1 mac=02:53:52:00:00:01 mtu=1024 rkey=0x15a addr=0x10000 len=65536
//
// type, qpn, psn and gid are required; mac, mtu, sr (0 or 1) and the
// region (rkey, addr and len, all three or none) are optional. Numbers
// are decimal or 0x-prefixed hex. ParseEndpoint reads it back and refuses
// anything else.
type Endpoint struct {
	Type QPType // QPTRC or QPTUC
	QPN  uint32 // the QP's number (24 bits)
	PSN  uint32 // the first PSN the QP sends (24 bits); the peer expects it
	// GID is the address the NIC answers at: an IPv4 address means
	// RoCEv2 over IPv4, an IPv6 address RoCEv2 over IPv6.
	GID netip.Addr
	// MAC is the NIC's own Ethernet address (zero: not given). A peer on
	// the same Ethernet segment sends its frames there; a peer behind a
	// router sends them to its next hop instead (ConnectOptions.NextHop).
	MAC wire.MAC
	// MTU is the port's active MTU as an ibv_mtu enum (1 = 256 …
	// 5 = 4096; 0: not given). Connect runs the path at the smaller of
	// the two sides' MTUs unless told otherwise.
	MTU int
	// SelectiveRepeat: this RC QP would recover losses by selective
	// repeat (QPAttr.SelectiveRepeat, a softrnic extension). Connect
	// enables it only when both Endpoints say so, so both sides agree.
	SelectiveRepeat bool
	// A memory region the peer may access (zero Len: none): its remote
	// key and the address range [Addr, Addr+Len) to use with it.
	RKey uint32
	Addr uint64
	Len  uint64
}

// Endpoint describes the QP for its peer: its number and type, the first
// PSN it will send (psn, 24 bits; RandomPSN picks one), its device's
// address, MAC and active MTU, and, when mr is not nil, the whole region
// mr with its remote key. Send the result to the peer, which passes it as
// remote to its QP.Connect.
func (qp *QP) Endpoint(psn uint32, mr *MR) Endpoint {
	d := qp.pd.dev
	e := Endpoint{Type: qp.Type, QPN: qp.Num, PSN: psn & 0xffffff, GID: d.cfg.IP.Unmap(), MAC: d.cfg.MAC, MTU: d.ActiveMTU()}
	if mr != nil {
		e.RKey, e.Addr, e.Len = mr.RKey, mr.Addr, uint64(len(mr.Buf))
	}
	return e
}

// RandomPSN returns a random 24-bit packet sequence number, a QP's first
// PSN as perftest and rdma_cm pick it.
func RandomPSN() uint32 { return rand.Uint32() & 0xffffff }

// ErrEndpoint is wrapped by every error about an Endpoint's text form or
// contents.
var ErrEndpoint = errors.New("verbs: bad endpoint")

// endpointVersion is the first word of an Endpoint's text form.
const endpointVersion = "softrnic-endpoint/1"

// MaxEndpointLen bounds an Endpoint's text form, newline included:
// ReadEndpoint reads no more before giving up.
const MaxEndpointLen = 512

// Validate reports whether the Endpoint can be sent and connected to: an
// RC or UC QP with a number other than 0 and 1, 24-bit numbers, a
// usable address, a known MTU and a region that does not wrap around.
func (e Endpoint) Validate() error {
	switch {
	case e.Type != QPTRC && e.Type != QPTUC:
		return fmt.Errorf("%w: type %v: RC or UC", ErrEndpoint, e.Type)
	case e.QPN > 0xffffff:
		return fmt.Errorf("%w: QP number %#x is wider than 24 bits", ErrEndpoint, e.QPN)
	case e.QPN < 2:
		return fmt.Errorf("%w: QP number %d is a special QP (QP0 or QP1)", ErrEndpoint, e.QPN)
	case e.PSN > 0xffffff:
		return fmt.Errorf("%w: PSN %#x is wider than 24 bits", ErrEndpoint, e.PSN)
	case !e.GID.IsValid() || e.GID.IsUnspecified() || e.GID.Zone() != "":
		return fmt.Errorf("%w: GID %v is no address a peer can send to", ErrEndpoint, e.GID)
	case e.MTU != 0 && wire.MTUFromEnum(e.MTU) == 0:
		return fmt.Errorf("%w: MTU enum %d (1 = 256 … 5 = 4096)", ErrEndpoint, e.MTU)
	case e.Len != 0 && e.Len-1 > ^uint64(0)-e.Addr:
		return fmt.Errorf("%w: region %#x + %d wraps around", ErrEndpoint, e.Addr, e.Len)
	case e.Len == 0 && (e.RKey != 0 || e.Addr != 0):
		return fmt.Errorf("%w: a region needs a length", ErrEndpoint)
	}
	return nil
}

// AppendText appends the Endpoint's text form, without a newline.
func (e Endpoint) AppendText(b []byte) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return b, err
	}
	b = append(b, endpointVersion...)
	b = append(b, " type="...)
	b = append(b, e.Type.String()...)
	b = fmt.Appendf(b, " qpn=%d psn=%d gid=%s", e.QPN, e.PSN, e.GID.Unmap())
	if e.MAC != (wire.MAC{}) {
		b = fmt.Appendf(b, " mac=%s", e.MAC)
	}
	if e.MTU != 0 {
		b = fmt.Appendf(b, " mtu=%d", wire.MTUFromEnum(e.MTU))
	}
	if e.SelectiveRepeat {
		b = append(b, " sr=1"...)
	}
	if e.Len != 0 {
		b = fmt.Appendf(b, " rkey=%#x addr=%#x len=%d", e.RKey, e.Addr, e.Len)
	}
	return b, nil
}

// MarshalText returns the Endpoint's text form, without a newline.
func (e Endpoint) MarshalText() ([]byte, error) { return e.AppendText(nil) }

// String returns the text form, or what is wrong with the Endpoint.
func (e Endpoint) String() string {
	b, err := e.MarshalText()
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// UnmarshalText parses the text form (ParseEndpoint).
func (e *Endpoint) UnmarshalText(b []byte) error {
	v, err := ParseEndpoint(string(b))
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// ParseEndpoint parses an Endpoint's text form; one trailing newline
// ("\n" or "\r\n") is allowed. Unknown, repeated or malformed fields,
// a missing required field and an Endpoint that does not Validate are
// errors (wrapping ErrEndpoint).
func ParseEndpoint(s string) (Endpoint, error) {
	var e Endpoint
	s = strings.TrimSuffix(s, "\n")
	s = strings.TrimSuffix(s, "\r")
	if len(s) >= MaxEndpointLen {
		return Endpoint{}, fmt.Errorf("%w: %d bytes, at most %d", ErrEndpoint, len(s), MaxEndpointLen-1)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return Endpoint{}, fmt.Errorf("%w: byte %#02x at offset %d", ErrEndpoint, c, i)
		}
	}
	fields := strings.Split(s, " ")
	if fields[0] != endpointVersion {
		return Endpoint{}, fmt.Errorf("%w: starts with %q, want %q", ErrEndpoint, fields[0], endpointVersion)
	}
	const (
		fType = 1 << iota
		fQPN
		fPSN
		fGID
		fMAC
		fMTU
		fSR
		fRKey
		fAddr
		fLen
	)
	names := map[string]int{"type": fType, "qpn": fQPN, "psn": fPSN, "gid": fGID, "mac": fMAC, "mtu": fMTU,
		"sr": fSR, "rkey": fRKey, "addr": fAddr, "len": fLen}
	seen := 0
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		bit := names[key]
		switch {
		case !ok || val == "":
			return Endpoint{}, fmt.Errorf("%w: field %q is not key=value", ErrEndpoint, f)
		case bit == 0:
			return Endpoint{}, fmt.Errorf("%w: unknown field %q", ErrEndpoint, key)
		case seen&bit != 0:
			return Endpoint{}, fmt.Errorf("%w: field %q given twice", ErrEndpoint, key)
		}
		seen |= bit
		var err error
		switch bit {
		case fType:
			switch val {
			case "RC":
				e.Type = QPTRC
			case "UC":
				e.Type = QPTUC
			default:
				err = errors.New("want RC or UC")
			}
		case fQPN:
			e.QPN, err = parseU32(val, 24)
		case fPSN:
			e.PSN, err = parseU32(val, 24)
		case fGID:
			e.GID, err = netip.ParseAddr(val)
			e.GID = e.GID.Unmap()
		case fMAC:
			var hw net.HardwareAddr
			if hw, err = net.ParseMAC(val); err == nil && len(hw) != 6 {
				err = errors.New("not a 6-byte Ethernet address")
			}
			if err == nil {
				e.MAC = wire.MAC(hw)
				if e.MAC == (wire.MAC{}) {
					err = errors.New("the zero address")
				}
			}
		case fMTU:
			var m uint32
			if m, err = parseU32(val, 16); err == nil {
				if e.MTU = wire.MTUEnum(int(m)); e.MTU == 0 {
					err = errors.New("want 256, 512, 1024, 2048 or 4096")
				}
			}
		case fSR:
			switch val {
			case "0":
			case "1":
				e.SelectiveRepeat = true
			default:
				err = errors.New("want 0 or 1")
			}
		case fRKey:
			e.RKey, err = parseU32(val, 32)
		case fAddr:
			e.Addr, err = parseUint(val, 64)
		case fLen:
			if e.Len, err = parseUint(val, 64); err == nil && e.Len == 0 {
				err = errors.New("an empty region is given by leaving it out")
			}
		}
		if err != nil {
			return Endpoint{}, fmt.Errorf("%w: %s=%q: %v", ErrEndpoint, key, val, err)
		}
	}
	for _, name := range []string{"type", "qpn", "psn", "gid"} {
		if seen&names[name] == 0 {
			return Endpoint{}, fmt.Errorf("%w: no %s field", ErrEndpoint, name)
		}
	}
	if region := seen & (fRKey | fAddr | fLen); region != 0 && region != fRKey|fAddr|fLen {
		return Endpoint{}, fmt.Errorf("%w: rkey, addr and len come together", ErrEndpoint)
	}
	if err := e.Validate(); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// parseUint parses a decimal or 0x-prefixed hex number of at most bits
// bits: no sign, no underscores, no other base.
func parseUint(s string, bits int) (uint64, error) {
	base := 10
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		s, base = h, 16
	}
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, errors.New("not a number")
	}
	v, err := strconv.ParseUint(s, base, bits)
	if err != nil {
		return 0, fmt.Errorf("not a number of at most %d bits", bits)
	}
	return v, nil
}

func parseU32(s string, bits int) (uint32, error) {
	v, err := parseUint(s, bits)
	return uint32(v), err
}

// WriteEndpoint writes e's text form and a newline to w.
func WriteEndpoint(w io.Writer, e Endpoint) error {
	b, err := e.AppendText(make([]byte, 0, 160))
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadEndpoint reads one line from r, at most MaxEndpointLen bytes up to
// its newline, and parses it. It reads byte by byte and never past the
// newline, so the connection can carry other messages afterwards.
func ReadEndpoint(r io.Reader) (Endpoint, error) {
	var line [MaxEndpointLen]byte
	for n := 0; n < len(line); n++ {
		if _, err := io.ReadFull(r, line[n:n+1]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Endpoint{}, fmt.Errorf("verbs: reading the peer's endpoint: %w", err)
		}
		if line[n] == '\n' {
			return ParseEndpoint(string(line[:n+1]))
		}
	}
	return Endpoint{}, fmt.Errorf("%w: no newline in %d bytes", ErrEndpoint, MaxEndpointLen)
}

// ExchangeEndpoints sends local to the peer at the other end of conn and
// returns the peer's Endpoint: both sides call it, each with its own, and
// each writes while it reads. When conn has deadlines (a net.Conn does),
// the end of ctx interrupts a blocked read or write, and the exchange
// returns ctx's error; conn's deadline is cleared when it returns. Without
// deadlines ctx is only checked first, and the write must not block (a
// line this short fits any socket buffer).
func ExchangeEndpoints(ctx context.Context, conn io.ReadWriter, local Endpoint) (Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return Endpoint{}, err
	}
	if err := local.Validate(); err != nil {
		return Endpoint{}, err
	}
	dc, ok := conn.(interface{ SetDeadline(time.Time) error })
	if !ok {
		if err := WriteEndpoint(conn, local); err != nil {
			return Endpoint{}, fmt.Errorf("verbs: sending the endpoint: %w", err)
		}
		return ReadEndpoint(conn)
	}
	past := time.Unix(1, 0)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		dc.SetDeadline(past)
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired
		}
		dc.SetDeadline(time.Time{})
	}()
	werr := make(chan error, 1)
	go func() { werr <- WriteEndpoint(conn, local) }()
	e, err := ReadEndpoint(conn)
	if err != nil {
		dc.SetDeadline(past) // unblock the write
	}
	if w := <-werr; w != nil && err == nil {
		e, err = Endpoint{}, fmt.Errorf("verbs: sending the endpoint: %w", w)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return Endpoint{}, cerr
		}
		return Endpoint{}, err
	}
	return e, nil
}
