package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/host/verbs"
)

// Env is what a run needs of the local NIC.
type Env struct {
	Dev     *verbs.Device
	GID     netip.Addr // the local GID's address (IPv4 for an IPv4-mapped GID)
	PortMTU int        // the port's active MTU, as an ibv_mtu enum
	// Resolve finds the MAC address of the peer (or its next hop).
	Resolve func(ctx context.Context, ip netip.Addr) (wire.MAC, error)
	// DevName is printed as perftest prints the device.
	DevName string
}

// runWait bounds a step that waits for the peer's test run.
const runWait = 10 * time.Minute

// Run runs one test over an established exchange connection, printing
// perftest's report to out (when out is not nil), and returns the results.
// On any error its QPs are moved to the error state and then reset, and
// its resources go with the device.
func Run(ctx context.Context, env Env, conn *Conn, cfg Config, out io.Writer) (res []Result, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if out == nil {
		out = io.Discard
	}
	s := &session{env: env, conn: conn, cfg: cfg, out: out}
	defer func() {
		if err != nil {
			s.teardown()
		}
	}()
	if err := s.preamble(); err != nil {
		return nil, err
	}
	if err := s.resources(); err != nil {
		return nil, err
	}
	return s.run(ctx)
}

// session is one run's state.
type session struct {
	env  Env
	conn *Conn
	cfg  Config
	out  io.Writer

	mtu            int
	scq, rcq       *verbs.CQ // send and receive completions
	qp             *verbs.QP
	mr             *verbs.MR
	buf            []byte
	half           int // offset of the receive half of buf
	local, peer    Keys
	ah             verbs.AH
	peerVersion    string
	wc             []verbs.WC
	results        []Result
	placed0        uint64 // WritesPlaced before the peer could write
	tposted, tdone []time.Time
}

// preamble exchanges versions, system data and the MTU.
func (s *session) preamble() error {
	v, err := s.conn.Versions()
	if err != nil {
		return err
	}
	s.peerVersion = v
	if _, _, err := s.conn.SysData(cycleBuffer, cacheLine); err != nil {
		return err
	}
	mtu := s.cfg.MTU
	if mtu == 0 {
		mtu = s.env.PortMTU
	}
	if s.mtu, err = s.conn.MTU(mtu); err != nil {
		return err
	}
	return nil
}

// resources creates the CQ, the QP and the buffer, and the local keys.
func (s *session) resources() error {
	d := s.env.Dev
	pd, err := d.AllocPD()
	if err != nil {
		return err
	}
	depth := max(s.cfg.TxDepth, s.cfg.RxDepth)
	if s.scq, err = d.CreateCQ(depth + 16); err != nil {
		return err
	}
	if s.rcq, err = d.CreateCQ(depth + 16); err != nil {
		return err
	}
	inline := 0
	if !s.cfg.Test.BW() && !s.cfg.Test.read() && !s.cfg.Test.atomic() {
		inline = 220
		if s.cfg.Test.send() {
			inline = 236
		}
	}
	if s.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: verbs.QPCap{MaxSendWR: s.cfg.TxDepth, MaxRecvWR: s.cfg.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: min(inline, maxInline)}}); err != nil {
		return err
	}
	s.half = s.cfg.bufSize()
	s.buf = make([]byte, 2*s.half)
	if s.mr, err = pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		return err
	}
	s.wc = make([]verbs.WC, 64)
	out := uint16(1)
	if s.cfg.Test.read() || s.cfg.Test.atomic() {
		out = uint16(s.cfg.OutReads)
	}
	s.local = Keys{OutReads: out, QPN: s.qp.Num, PSN: rand.Uint32() & 0xffffff, RKey: s.mr.RKey,
		VAddr: s.mr.Addr + uint64(s.half), GID: s.env.GID.As16()}
	return nil
}

// maxInline is what softrnic carries inline in a send WQE.
const maxInline = host.MaxInline

// keys runs one keys exchange and checks the peer's answer stays the same.
func (s *session) keys(step string, wait time.Duration) error {
	k, err := s.conn.Keys(step, s.local, wait)
	if err != nil {
		return err
	}
	if s.peer != (Keys{}) && k != s.peer {
		return fmt.Errorf("%w: %s: the peer's keys changed (%v, was %v)", ErrPeer, step, &k, &s.peer)
	}
	s.peer = k
	return nil
}

// connect brings the QP to RTR, and to RTS unless it only answers.
func (s *session) connect(ctx context.Context, rts bool) error {
	ip := s.peer.Addr()
	if !ip.IsValid() || ip.IsUnspecified() {
		return fmt.Errorf("%w: keys exchange: GID %s is no address", ErrPeer, ip)
	}
	rctx, cancel := context.WithTimeout(ctx, StepTimeout)
	defer cancel()
	mac, err := s.env.Resolve(rctx, ip)
	if err != nil {
		return fmt.Errorf("perftest: resolving the peer %s: %w", ip, err)
	}
	s.ah = verbs.AH{DestMAC: mac, DestGID: ip}
	qp := s.qp
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1,
		AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return fmt.Errorf("perftest: QP to INIT: %w", err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: s.ah, PathMTU: s.mtu, DestQPN: s.peer.QPN, RQPSN: s.peer.PSN,
		MaxDestRdAtomic: uint8(s.local.OutReads), MinRNRTimer: 12},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
		return fmt.Errorf("perftest: QP to RTR: %w", err)
	}
	if !rts {
		return nil
	}
	rd := uint8(max(1, min(int(s.peer.OutReads), maxOutReads)))
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: s.local.PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: rd},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("perftest: QP to RTS: %w", err)
	}
	return nil
}

// teardown moves the QP to the error state, flushing its work, and then
// resets it.
func (s *session) teardown() {
	if s.qp == nil {
		return
	}
	s.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	s.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)
}

// run follows perftest's sequence for the test and the side.
func (s *session) run(ctx context.Context) ([]Result, error) {
	t, server := s.cfg.Test, s.conn.Server()
	// Setup: a keys exchange per QP, the connection, another per QP and
	// one after RTR (the latency tests but send_lat begin with one more).
	if !t.BW() && t != SendLat {
		if err := s.keys("keys exchange", StepTimeout); err != nil {
			return nil, err
		}
	}
	if err := s.keys("keys exchange", StepTimeout); err != nil {
		return nil, err
	}
	s.printHeader()
	// A bandwidth server of WRITE, READ or atomics only answers: its QP
	// stays in RTR, as perftest's does.
	passive := server && t.BW() && !t.send()
	if err := s.connect(ctx, !passive); err != nil {
		return nil, err
	}
	if err := s.keys("keys exchange after connecting", StepTimeout); err != nil {
		return nil, err
	}
	s.placed0 = s.env.Dev.WritesPlaced() // before the peer may write
	if err := s.keys("keys exchange after RTR", StepTimeout); err != nil {
		return nil, err
	}
	var err error
	switch {
	case t.BW() && !t.send():
		err = s.runOneSidedBW(ctx, server)
	case t == SendBW:
		err = s.runSendBW(ctx, server)
	case t == WriteLat:
		err = s.runWriteLat(ctx, server)
	case t == SendLat:
		err = s.runSendLat(ctx, server)
	default: // READ and atomic latency: only the client works
		err = s.runReadLat(ctx, server)
	}
	if err != nil {
		return s.results, err
	}
	return s.results, nil
}

// close ends the exchange: a last keys exchange (waiting for the peer's
// run when wait is long), then "done".
func (s *session) close(wait time.Duration) error {
	if err := s.keys("closing keys exchange", wait); err != nil {
		return err
	}
	return s.conn.Done()
}

// watch runs fn while watching the connection: if the peer closes it,
// the QP is moved to the error state (flushing what fn waits for) and the
// error says so.
func (s *session) watch(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	closed, stop := s.conn.Watch()
	var peerErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case peerErr = <-closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := fn(ctx)
	cancel()
	<-done
	stop()
	if peerErr != nil {
		return peerErr
	}
	return err
}

// poll takes completions of cq into s.wc, waiting until at least one
// comes or ctx ends. An error completion ends the run.
func (s *session) poll(ctx context.Context, cq *verbs.CQ) ([]verbs.WC, error) {
	for {
		if k := cq.Poll(s.wc); k > 0 {
			for _, c := range s.wc[:k] {
				if c.Status != verbs.WCSuccess {
					return nil, fmt.Errorf("perftest: completion with error: %v (WR %d, opcode %v)", c.Status, c.WRID, c.Opcode)
				}
			}
			return s.wc[:k], nil
		}
		if err := cq.Wait(ctx); err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("perftest: the run stopped: %w", err)
			}
			return nil, err
		}
	}
}
