package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
)

// Kind is which of the four programs a run is.
type Kind int

const (
	RC  Kind = iota // ibv_rc_pingpong: one RC QP, SENDs both ways
	UC              // ibv_uc_pingpong: one UC QP
	UD              // ibv_ud_pingpong: one UD QP, Q_Key 0x11111111, a 40-byte GRH before each received message
	SRQ             // ibv_srq_pingpong: -q RC QPs receiving from one SRQ
)

var kindNames = [...]string{"rc", "uc", "ud", "srq"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Program is the rdma-core program the kind is a peer of.
func (k Kind) Program() string { return "ibv_" + k.String() + "_pingpong" }

// ParseKind reads "rc", "uc", "ud" or "srq".
func ParseKind(s string) (Kind, error) {
	for i, n := range kindNames {
		if n == s {
			return Kind(i), nil
		}
	}
	return 0, fmt.Errorf("pingpong: %q: want rc, uc, ud or srq", s)
}

// The programs' work request IDs; a send and a receive are each pending
// until completed, and the next send goes when neither is.
const (
	recvWRID = 1
	sendWRID = 2
)

// UDQKey is the Q_Key ibv_ud_pingpong gives its QP and its sends.
const UDQKey = 0x11111111

// grhLen is the room a UD receive buffer leaves for the GRH.
const grhLen = 40

// pageSize is the page the -c check marks (the C programs use the host's
// page size, 4096 on the machines they run on).
const pageSize = 4096

// Config is the programs' options.
type Config struct {
	Kind    Kind
	Size    int  // -s: bytes per message (0: 4096; UD 2048)
	MTU     int  // -m: path MTU in bytes (0: 1024); RC, UC and SRQ
	RxDepth int  // -r: receives posted at a time (0: 500)
	Iters   int  // -n: exchanges (0: 1000); for SRQ, sends over all QPs
	NumQP   int  // -q: SRQ's QPs (0: 16)
	Events  bool // -e: wait for completions instead of polling
	Check   bool // -c: the client marks each page of its buffer, the server checks its own (RC, UC, SRQ)
}

// Fits reports whether the test fits the device: a UD message must fit
// the port's active MTU (ibv_ud_pingpong's check). A server checks it
// before it waits for a client.
func (c Config) Fits(dev *verbs.Device) error {
	if c.Kind != UD {
		return nil
	}
	if mtu := wire.MTUFromEnum(dev.ActiveMTU()); c.Size > mtu {
		return fmt.Errorf("pingpong: requested size larger than port MTU (%d)", mtu)
	}
	return nil
}

// WithDefaults returns the configuration with the programs' defaults
// filled in, or an error for a value the programs refuse.
func (c Config) WithDefaults() (Config, error) {
	if c.Kind < RC || c.Kind > SRQ {
		return c, fmt.Errorf("pingpong: unknown kind %d", int(c.Kind))
	}
	if c.Size == 0 {
		c.Size = 4096
		if c.Kind == UD {
			c.Size = 2048
		}
	}
	if c.MTU == 0 {
		c.MTU = 1024
	}
	if c.RxDepth == 0 {
		c.RxDepth = 500
	}
	if c.Iters == 0 {
		c.Iters = 1000
	}
	if c.NumQP == 0 {
		c.NumQP = 16
	}
	switch {
	case c.Size < 1:
		return c, fmt.Errorf("pingpong: -s %d: a message is at least 1 byte", c.Size)
	case wire.MTUEnum(c.MTU) == 0:
		return c, fmt.Errorf("pingpong: -m %d: want 256, 512, 1024, 2048 or 4096", c.MTU)
	case c.RxDepth < 2:
		return c, fmt.Errorf("pingpong: -r %d: post at least 2 receives", c.RxDepth)
	case c.Iters < 1:
		return c, fmt.Errorf("pingpong: -n %d: at least one exchange", c.Iters)
	case c.Kind == SRQ && (c.NumQP < 1 || c.NumQP > srqMsgs):
		return c, fmt.Errorf("pingpong: -q %d: 1 to %d QPs", c.NumQP, srqMsgs)
	case c.Kind == SRQ && c.NumQP > c.RxDepth:
		return c, fmt.Errorf("pingpong: rx_depth %d is too small for %d QPs: at least one receive per QP", c.RxDepth, c.NumQP)
	case c.Kind == UD && c.Check:
		return c, errors.New("pingpong: -c: ibv_ud_pingpong has no buffer check")
	}
	return c, nil
}

// Env is the device a run uses and how it reaches the peer.
type Env struct {
	Dev *verbs.Device
	GID netip.Addr // this side's GID as an address (IPv4 for RoCEv2 over IPv4)
	// Resolve finds the Ethernet address of the peer (or its next hop).
	Resolve func(ctx context.Context, ip netip.Addr) (wire.MAC, error)
}

// Result is what a run measured.
type Result struct {
	Local, Remote []Dest
	Bytes         int64 // size x iters x 2, as the programs count
	Iters         int
	Elapsed       time.Duration
	Received      int // messages received, every one of the expected length
}

// MbitPerSec is the programs' bandwidth figure.
func (r Result) MbitPerSec() float64 {
	return float64(r.Bytes) * 8 / float64(r.Elapsed.Microseconds())
}

// UsecPerIter is the programs' latency figure.
func (r Result) UsecPerIter() float64 {
	return float64(r.Elapsed.Microseconds()) / float64(r.Iters)
}

// run is one side's state.
type run struct {
	cfg    Config
	env    Env
	pd     *verbs.PD
	cq     *verbs.CQ
	srq    *verbs.SRQ
	qps    []*verbs.QP
	buf    []byte
	mr     *verbs.MR
	ah     *verbs.AH
	remote []Dest
	// pending[i]: the WR IDs QP i waits for before its next send.
	pending []int
	routs   int
}

// Run is one side of a program's run over an established socket conn: the
// server (server true) reads the client's destinations, connects, writes
// its own and reads "done"; the client writes, reads, writes "done",
// connects and sends first. The lines the C programs print go to out
// (nil for none).
func Run(ctx context.Context, env Env, conn net.Conn, server bool, cfg Config, out io.Writer) (Result, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return Result{}, err
	}
	if out == nil {
		out = io.Discard
	}
	r := &run{cfg: cfg, env: env}
	if err := r.setup(); err != nil {
		return Result{}, err
	}
	defer r.teardown()
	res := Result{Iters: cfg.Iters, Bytes: int64(cfg.Size) * int64(cfg.Iters) * 2}
	for _, qp := range r.qps {
		d := Dest{QPN: qp.Num, PSN: rand.Uint32() & 0xffffff, GID: env.GID.As16()}
		res.Local = append(res.Local, d)
		fmt.Fprintf(out, "  local address:  %s\n", d)
	}
	if err := r.exchange(ctx, conn, server, res.Local); err != nil {
		return res, err
	}
	res.Remote = r.remote
	for _, d := range r.remote {
		fmt.Fprintf(out, "  remote address: %s\n", d)
	}
	if !server {
		if err := r.connect(ctx, res.Local, peerIP(conn)); err != nil {
			return res, err
		}
	}
	if cfg.Check && !server {
		for i := 0; i < len(r.buf); i += pageSize {
			r.buf[i] = 0
		}
	}
	start := time.Now()
	if res.Received, err = r.loop(ctx, !server); err != nil {
		return res, err
	}
	res.Elapsed = max(time.Since(start), time.Microsecond)
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", res.Bytes, res.Elapsed.Seconds(), res.MbitPerSec())
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", res.Iters, res.Elapsed.Seconds(), res.UsecPerIter())
	if cfg.Check && server {
		for i := 0; i < cfg.Size; i += pageSize {
			if r.buf[i] != 0 {
				return res, fmt.Errorf("pingpong: invalid data in page %d", i/pageSize)
			}
		}
	}
	if !server && cfg.Kind != UC && cfg.Kind != UD {
		// The client's last event is a receive, whose ACK the link may
		// lose, and the server waits for its last SEND to complete: the
		// client's QPs stay up a while (as a TCP socket's TIME_WAIT) to
		// answer its retransmission, instead of leaving it to fail.
		t := time.NewTimer(linger)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return res, nil
}

// linger is how long an RC client keeps its QPs up after its last
// receive: several of the server's ACK timeouts (2^14 x 4.096 us).
const linger = 300 * time.Millisecond

// peerIP is the socket's remote address: where a peer that sent the zero
// GID (a C program run without -g) is reached.
func peerIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

func (r *run) setup() error {
	c, dev := r.cfg, r.env.Dev
	var err error
	if r.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	nqp := 1
	if c.Kind == SRQ {
		nqp = c.NumQP
	}
	if r.cq, err = dev.CreateCQ(c.RxDepth + nqp); err != nil {
		return err
	}
	size := c.Size
	if err := c.Fits(dev); err != nil {
		return err
	}
	if c.Kind == UD {
		size += grhLen
	}
	r.buf = make([]byte, size)
	for i := range r.buf {
		r.buf[i] = 0x7b
	}
	if c.Kind == SRQ {
		clear(r.buf)
	}
	if r.mr, err = r.pd.RegMR(r.buf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	attr := verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: c.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}
	switch c.Kind {
	case UC:
		attr.Type = verbs.QPTUC
	case UD:
		attr.Type = verbs.QPTUD
	case SRQ:
		if r.srq, err = r.pd.CreateSRQ(c.RxDepth, 1); err != nil {
			return err
		}
		attr.SRQ, attr.Cap.MaxRecvWR, attr.Cap.MaxRecvSGE = r.srq, 0, 0
	}
	for range nqp {
		qp, err := r.pd.CreateQP(attr)
		if err != nil {
			return err
		}
		r.qps = append(r.qps, qp)
		var a verbs.QPAttr
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		a.State, a.Port = verbs.QPSInit, 1
		if c.Kind == UD {
			a.QKey, mask = UDQKey, mask|verbs.AttrQKey
		} else {
			mask |= verbs.AttrAccessFlags
		}
		if err := qp.Modify(&a, mask); err != nil {
			return err
		}
	}
	r.pending = make([]int, nqp)
	if n, err := r.postRecv(c.RxDepth); n < c.RxDepth {
		return fmt.Errorf("pingpong: couldn't post receive (%d): %v", n, err)
	}
	return nil
}

func (r *run) teardown() {
	for _, qp := range r.qps {
		qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	}
}

// exchange swaps destinations over the socket in the programs' order.
func (r *run) exchange(ctx context.Context, conn net.Conn, server bool, local []Dest) error {
	n := 1
	if r.cfg.Kind == SRQ {
		n = srqMsgs
	}
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var err error
	if server {
		if r.remote, err = readDests(conn, n, len(local)); err != nil {
			return err
		}
		if err := r.connect(ctx, local, peerIP(conn)); err != nil {
			return err
		}
		if err := writeDests(conn, local, n); err != nil {
			return fmt.Errorf("pingpong: couldn't send local address: %w", err)
		}
		// The client's "done": rdma-core's servers read it before they
		// close the socket.
		var m [MsgSize]byte
		if _, err := conn.Read(m[:]); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("pingpong: reading the client's done: %w", err)
		}
		return nil
	}
	if err := writeDests(conn, local, n); err != nil {
		return fmt.Errorf("pingpong: couldn't send local address: %w", err)
	}
	if r.remote, err = readDests(conn, n, len(local)); err != nil {
		return err
	}
	if _, err := conn.Write(doneMsg); err != nil {
		return fmt.Errorf("pingpong: writing done: %w", err)
	}
	return nil
}

// step is one Modify of a QP's way to RTS.
type step struct {
	a    verbs.QPAttr
	mask verbs.AttrMask
}

// connect takes every QP to RTR and RTS towards the peer's QP of the same
// index, as the programs' pp_connect_ctx does (UD: RTR and RTS, and an
// address handle for the peer).
func (r *run) connect(ctx context.Context, local []Dest, fallback netip.Addr) error {
	for i, d := range r.remote {
		if d.QPN == 0 {
			return fmt.Errorf("pingpong: the peer sent no QP number for QP %d (does it run with the same -q?)", i)
		}
	}
	// The programs address the peer by its GID; one run without -g sends
	// the zero GID (which RoCE cannot route), and this side then uses the
	// socket's peer address.
	ip := r.remote[0].Addr()
	if !ip.IsValid() {
		ip = fallback
	}
	mac, err := r.env.Resolve(ctx, ip)
	if err != nil {
		return fmt.Errorf("pingpong: resolving %v: %w", ip, err)
	}
	ah := verbs.AH{DestMAC: mac, DestGID: ip}
	mtu := min(wire.MTUEnum(r.cfg.MTU), r.env.Dev.ActiveMTU())
	for i, qp := range r.qps {
		var steps []step
		switch r.cfg.Kind {
		case UD:
			r.ah = &ah
			steps = []step{
				{verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState},
				{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: local[i].PSN}, verbs.AttrState | verbs.AttrSQPSN},
			}
		case UC:
			steps = []step{
				{verbs.QPAttr{State: verbs.QPSRTR, AH: ah, PathMTU: mtu, DestQPN: r.remote[i].QPN, RQPSN: r.remote[i].PSN},
					verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN},
				{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: local[i].PSN}, verbs.AttrState | verbs.AttrSQPSN},
			}
		default:
			steps = []step{
				{verbs.QPAttr{State: verbs.QPSRTR, AH: ah, PathMTU: mtu, DestQPN: r.remote[i].QPN, RQPSN: r.remote[i].PSN,
					MaxDestRdAtomic: 1, MinRNRTimer: 12},
					verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
						verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
				{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: local[i].PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
					verbs.AttrState | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrSQPSN |
						verbs.AttrMaxQPRdAtomic},
			}
		}
		for _, s := range steps {
			if err := qp.Modify(&s.a, s.mask); err != nil {
				return fmt.Errorf("pingpong: failed to modify QP %d to %v: %w", i, s.a.State, err)
			}
		}
	}
	return nil
}

// postRecv posts up to n receives of the whole buffer (to the SRQ for
// SRQ) and returns how many it posted.
func (r *run) postRecv(n int) (int, error) {
	wr := [1]verbs.RecvWR{{WRID: recvWRID, SGL: []verbs.SGE{{Addr: r.mr.Addr, Length: uint32(len(r.buf)), LKey: r.mr.LKey}}}}
	for i := range n {
		var err error
		if r.srq != nil {
			_, err = r.srq.PostRecv(wr[:])
		} else {
			_, err = r.qps[0].PostRecv(wr[:])
		}
		if err != nil {
			return i, err
		}
	}
	return n, nil
}

// postSend sends one message on QP i: the buffer (after the GRH's room
// for UD).
func (r *run) postSend(i int) error {
	sge := verbs.SGE{Addr: r.mr.Addr, Length: uint32(r.cfg.Size), LKey: r.mr.LKey}
	wr := verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sge}}
	if r.cfg.Kind == UD {
		wr.SGL[0].Addr += grhLen
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ah, r.remote[0].QPN, UDQKey
	}
	_, err := r.qps[i].PostSend([]verbs.SendWR{wr})
	return err
}

// loop is the programs' main loop: each QP sends its next message once
// its last send and a receive completed, until iters messages went each
// way. The client (first) sends first.
func (r *run) loop(ctx context.Context, first bool) (int, error) {
	c := r.cfg
	for i := range r.pending {
		r.pending[i] = recvWRID
		if first {
			if err := r.postSend(i); err != nil {
				return 0, fmt.Errorf("pingpong: couldn't post send: %w", err)
			}
			r.pending[i] |= sendWRID
		}
	}
	r.routs = c.RxDepth
	reserve := 1 // receives left before reposting: RC/UC/UD one, SRQ one per QP
	if c.Kind == SRQ {
		reserve = c.NumQP
	}
	wantLen := uint32(c.Size)
	if c.Kind == UD {
		wantLen += grhLen
	}
	wc := make([]verbs.WC, c.RxDepth+len(r.qps))
	rcnt, scnt := 0, 0
	appDriven := r.env.Dev.NIC().AppDriven()
	for spins := 0; rcnt < c.Iters || scnt < c.Iters; spins++ {
		var n int
		if c.Events {
			if err := r.cq.Wait(ctx); err != nil {
				return rcnt, err
			}
			n = r.cq.Poll(wc)
		} else if n = r.cq.Poll(wc); n == 0 {
			if spins&0xfff == 0 && ctx.Err() != nil {
				return rcnt, ctx.Err()
			}
			// A NIC whose engines run in goroutines of their own
			// (not datapath.PollApp) needs the CPU this loop holds; one
			// the poll drives yields seldom (datapath.YieldPolls).
			if !appDriven || spins%datapath.YieldPolls == 0 {
				runtime.Gosched()
			}
			continue
		}
		for _, w := range wc[:n] {
			if w.Status != verbs.WCSuccess {
				return rcnt, fmt.Errorf("pingpong: failed status %v (%d) for wr_id %d", w.Status, int(w.Status), w.WRID)
			}
			qi := r.qpIndex(w.QPNum)
			if qi < 0 {
				return rcnt, fmt.Errorf("pingpong: couldn't find QPN %06x", w.QPNum)
			}
			switch w.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				if w.ByteLen != wantLen {
					return rcnt, fmt.Errorf("pingpong: received %d bytes, expected %d (does the peer run with the same -s?)", w.ByteLen, wantLen)
				}
				if r.routs--; r.routs <= reserve {
					n, err := r.postRecv(c.RxDepth - r.routs)
					if r.routs += n; r.routs < c.RxDepth {
						return rcnt, fmt.Errorf("pingpong: couldn't post receive (%d): %v", r.routs, err)
					}
				}
				rcnt++
			default:
				return rcnt, fmt.Errorf("pingpong: completion for unknown wr_id %d", w.WRID)
			}
			r.pending[qi] &^= int(w.WRID)
			if scnt < c.Iters && r.pending[qi] == 0 {
				if err := r.postSend(qi); err != nil {
					return rcnt, fmt.Errorf("pingpong: couldn't post send: %w", err)
				}
				r.pending[qi] = recvWRID | sendWRID
			}
		}
	}
	return rcnt, nil
}

func (r *run) qpIndex(qpn uint32) int {
	for i, qp := range r.qps {
		if qp.Num == qpn {
			return i
		}
	}
	return -1
}
