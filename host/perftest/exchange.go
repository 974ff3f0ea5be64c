package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Port is perftest's default TCP port for the exchange.
const Port = 18515

// Version is the perftest version softrnic reports: below 6.28, so that
// newer perftest skips its binary parameter negotiation, and at least
// 5.70, the oldest perftest accepts.
const Version = "6.06"

// StepTimeout bounds each step of the exchange that does not wait for the
// peer's test run, once the peer's answer has begun.
const StepTimeout = 4 * time.Second

// SetupTimeout bounds the wait for an answer to begin over TCP: between
// two steps perftest may be setting up (it allocates and registers its
// buffers, which for 8 MiB messages in an emulated guest takes seconds),
// and perftest itself waits as long as it takes.
const SetupTimeout = time.Minute

// ErrPeer is wrapped by the errors of a step whose answer was not what
// perftest sends.
var ErrPeer = errors.New("perftest: the peer broke the exchange")

// ErrMismatch is wrapped by the error of a run whose peer runs other
// sizes than this side (its -s or -a differs), seen in what arrives.
var ErrMismatch = errors.New("perftest: the two sides run different sizes")

// ErrTransport is wrapped by the error of a run whose peer sends packets
// of another transport than this side's QPs run (its -c differs).
var ErrTransport = errors.New("perftest: the peer runs another connection type")

// Conn is one side of perftest's out-of-band exchange: lock-step; in
// every step the client writes first and then reads as many bytes, and
// the server reads, then writes. It runs over TCP (Dial, Accept), or, as
// perftest -R runs it, over an RC connection the CM sets up (DialCM,
// AcceptCM), one SEND a message. Every error names its step.
type Conn struct {
	l      link
	server bool
}

// cm is the exchange's rdma_cm link, nil over TCP.
func (c *Conn) cm() *cmLink {
	l, _ := c.l.(*cmLink)
	return l
}

// link carries the exchange's messages.
type link interface {
	// send writes b; recv reads exactly len(b) bytes, within wait.
	send(b []byte, wait time.Duration) error
	recv(b []byte, wait time.Duration) error
	// done ends the exchange as the link's perftest does.
	done() error
	// watch reports the peer going away while no step runs, and closes
	// ahead when the peer's next step begins (where the link can see it).
	watch() (closed <-chan error, ahead <-chan struct{}, stop func())
	close() error
}

// Dial connects to a perftest server, retrying until ctx ends (a server
// may not listen yet).
func Dial(ctx context.Context, addr string) (*Conn, error) {
	return DialFrom(ctx, addr, netip.Addr{})
}

// DialFrom is Dial from a local address (perftest's --source_ip); the
// zero address lets the kernel choose.
func DialFrom(ctx context.Context, addr string, local netip.Addr) (*Conn, error) {
	var d net.Dialer
	if local.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
	}
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return NewConn(c, false), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("perftest: connect to %s: %w", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Accept waits for a client on ln until ctx ends.
func Accept(ctx context.Context, ln net.Listener) (*Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("perftest: waiting for a client: %w", err)
	}
	return NewConn(c, true), nil
}

// NewConn wraps an established TCP connection; server tells the side.
func NewConn(c net.Conn, server bool) *Conn { return &Conn{l: &tcpLink{c}, server: server} }

// Close closes the connection (over rdma_cm: the test QPs' connections,
// then the exchange's own).
func (c *Conn) Close() error { return c.l.close() }

// Server reports whether this is the server's side.
func (c *Conn) Server() bool { return c.server }

// exchange runs one step: out goes to the peer, in is filled from it, in
// the order of the side, each within wait.
func (c *Conn) exchange(step string, out, in []byte, wait time.Duration) error {
	write := func() error { return c.l.send(out, wait) }
	read := func() error { return c.l.recv(in, wait) }
	first, second := write, read
	if c.server {
		first, second = read, write
	}
	if err := first(); err != nil {
		// A client's message the server took, answered and went away
		// after (its ACK lost, the server's QP gone before the resend:
		// a lossy path, the closing step): the answer is here, and it
		// says the server had this side's message.
		if !c.server && errors.Is(err, errGone) && second() == nil {
			return nil
		}
		return fmt.Errorf("perftest: %s: %w", step, err)
	}
	if err := second(); err != nil {
		return fmt.Errorf("perftest: %s: %w", step, err)
	}
	return nil
}

// Done ends the exchange: over TCP each side writes "done" and a NUL,
// then reads the peer's (a peer that closes without it, as perftest
// after 6.2x does, is fine too); over rdma_cm there is nothing more.
func (c *Conn) Done() error { return c.l.done() }

// Watch reports, on the returned channel, the peer going away while no
// step is running (during a test run); call stop, which waits for it,
// before the next step.
func (c *Conn) Watch() (closed <-chan error, ahead <-chan struct{}, stop func()) { return c.l.watch() }

// tcpLink is the exchange over TCP: no framing, bytes as the steps have
// them.
type tcpLink struct{ c net.Conn }

func (l *tcpLink) close() error { return l.c.Close() }

func (l *tcpLink) send(b []byte, wait time.Duration) error {
	if err := l.c.SetDeadline(time.Now().Add(wait)); err != nil {
		return err
	}
	_, err := l.c.Write(b)
	return err
}

// recv reads b whole: its first byte within SetupTimeout (or wait, if
// longer), the rest within wait.
func (l *tcpLink) recv(b []byte, wait time.Duration) error {
	if len(b) == 0 {
		return nil
	}
	first := max(wait, SetupTimeout)
	if err := l.c.SetDeadline(time.Now().Add(first)); err != nil {
		return err
	}
	_, err := io.ReadFull(l.c, b[:1])
	if err == nil {
		if err = l.c.SetDeadline(time.Now().Add(wait)); err != nil {
			return err
		}
		_, err = io.ReadFull(l.c, b[1:])
	} else {
		wait = first
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("the peer closed the connection (%w)", err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("no answer within %v", wait)
	}
	return err
}

// Versions exchanges versions (16 bytes, NUL-padded) and returns the
// peer's. A peer whose version is not a perftest version, or is older than
// 5.70, is refused.
func (c *Conn) Versions() (string, error) {
	var out, in [16]byte
	copy(out[:], Version)
	if err := c.exchange("version exchange", out[:], in[:], StepTimeout); err != nil {
		return "", err
	}
	v := string(bytes.TrimRight(in[:], "\x00"))
	major, minor, ok := strings.Cut(v, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil || ma < 0 || mi < 0 {
		return v, fmt.Errorf("%w: version exchange: %q is not a perftest version", ErrPeer, v)
	}
	if ma < 5 || ma == 5 && mi < 70 {
		return v, fmt.Errorf("%w: version exchange: version %s is older than 5.70", ErrPeer, v)
	}
	return v, nil
}

// SysData exchanges page and cache-line sizes (4 bytes big-endian each);
// each side keeps the larger.
func (c *Conn) SysData(page, cacheLine uint32) (uint32, uint32, error) {
	var out, in [4]byte
	var got [2]uint32
	for i, v := range []uint32{page, cacheLine} {
		binary.BigEndian.PutUint32(out[:], v)
		step := [2]string{"page size exchange", "cache line size exchange"}[i]
		if err := c.exchange(step, out[:], in[:], StepTimeout); err != nil {
			return 0, 0, err
		}
		got[i] = max(v, binary.BigEndian.Uint32(in[:]))
	}
	return got[0], got[1], nil
}

// MTU exchanges the path MTU as the ASCII digit of its ibv_mtu enum and a
// NUL; both sides keep the smaller.
func (c *Conn) MTU(mtu int) (int, error) {
	if mtu < 1 || mtu > 5 {
		return 0, fmt.Errorf("perftest: MTU enum %d out of range", mtu)
	}
	out := []byte{byte('0' + mtu), 0}
	var in [2]byte
	if err := c.exchange("MTU exchange", out, in[:], StepTimeout); err != nil {
		return 0, err
	}
	peer := int(in[0] - '0')
	if in[1] != 0 || peer < 1 || peer > 5 {
		return 0, fmt.Errorf("%w: MTU exchange: %q is not an MTU", ErrPeer, in[:])
	}
	return min(mtu, peer), nil
}

// Keys exchanges keys messages in the named step, waiting up to wait for
// the peer (a sync after a run waits for the peer's run to end).
func (c *Conn) Keys(step string, k Keys, wait time.Duration) (Keys, error) {
	out, in, parse := k.Marshal(), [KeysLen]byte{}, ParseKeys
	o, i := out[:], in[:]
	if c.cm() != nil { // perftest's struct itself, as -R sends it
		bout, bin := k.MarshalBinary(0), [KeysBinaryLen]byte{}
		o, i, parse = bout[:], bin[:], ParseKeysBinary
	}
	if err := c.exchange(step, o, i, wait); err != nil {
		return Keys{}, err
	}
	r, err := parse(i)
	if err != nil {
		return r, fmt.Errorf("%w: %s: %w", ErrPeer, step, err)
	}
	return r, nil
}

// Report is a bandwidth test's result as the client sends it to the
// server: message size, iterations, peak and average bandwidth (MB/s, or
// Gbit/s with --report_gbits) and message rate (Mpps).
type Report struct {
	Size, Iters           uint64
	PeakBW, AvgBW, MsgMpp float64
}

// Reports exchanges bandwidth reports, 8 bytes big-endian a field, and
// returns the peer's.
func (c *Conn) Reports(r Report) (Report, error) {
	out := [5]uint64{r.Size, r.Iters, math.Float64bits(r.PeakBW), math.Float64bits(r.AvgBW), math.Float64bits(r.MsgMpp)}
	var in [5]uint64
	var ob, ib [8]byte
	for i := range out {
		binary.BigEndian.PutUint64(ob[:], out[i])
		if err := c.exchange("bandwidth report exchange", ob[:], ib[:], StepTimeout); err != nil {
			return Report{}, err
		}
		in[i] = binary.BigEndian.Uint64(ib[:])
	}
	return Report{Size: in[0], Iters: in[1], PeakBW: math.Float64frombits(in[2]), AvgBW: math.Float64frombits(in[3]), MsgMpp: math.Float64frombits(in[4])}, nil
}

func (l *tcpLink) done() error {
	if err := l.c.SetDeadline(time.Now().Add(StepTimeout)); err != nil {
		return fmt.Errorf("perftest: closing: %w", err)
	}
	gone := func(err error) bool {
		return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	}
	if _, err := l.c.Write([]byte("done\x00")); err != nil {
		if gone(err) {
			return nil
		}
		return fmt.Errorf("perftest: closing: %w", err)
	}
	var in [5]byte
	n, err := io.ReadFull(l.c, in[:])
	switch {
	case n == 0 && gone(err):
		return nil
	case err != nil:
		return fmt.Errorf("perftest: closing: the peer did not say done: %w", err)
	case string(in[:]) != "done\x00":
		return fmt.Errorf("%w: closing: %q instead of done", ErrPeer, in[:])
	}
	return nil
}

// watch looks at the connection without consuming: data is the peer's
// next step, the run over for it.
func (l *tcpLink) watch() (closed <-chan error, ahead <-chan struct{}, stop func()) {
	ch := make(chan error, 1)
	next := make(chan struct{})
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		for {
			select {
			case <-quit:
				return
			default:
			}
			l.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := peek(l.c, b[:])
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				continue
			case err != nil:
				ch <- fmt.Errorf("perftest: during the run: the peer closed the connection (%w)", err)
				return
			case n > 0:
				close(next) // the peer's next step has begun: the run is over for it
				return
			}
		}
	}()
	return ch, next, func() {
		close(quit)
		<-done
	}
}
