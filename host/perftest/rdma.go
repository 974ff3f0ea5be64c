package perftest

import (
	"context"
	"errors"
	"fmt"
	"github.com/softrnic/softrnic/datapath"
	"math/rand/v2"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
)

// rdma is the data path of a run on a softrnic device: the QPs (one
// unless -q), a send and a receive CQ they share, and one buffer laid out
// as perftest lays its own: a region per QP for the local side of its
// messages, then a region per QP that the peer reaches (its VAddr).
type rdma struct {
	env            Env
	cfg            *Config
	sr, srOn       bool // selective repeat asked for, and agreed with the peer
	viaCM          bool // the CM connects the QPs (-R)
	scq, rcq       *verbs.CQ
	qps            []*verbs.QP
	mr             *verbs.MR
	buf            []byte
	region         int // bytes a region
	local, peer    []Keys
	placed0        uint64 // WritesPlaced before the peer could write
	wc             []verbs.WC
	rwc            []verbs.WC // the receiving half of a bidirectional send run
	tposted, tdone []time.Time
	lat            *latTimer       // a latency run with -D
	ah             verbs.AH        // UD: the peer's address
	ahead          <-chan struct{} // closed once the peer's next exchange step began (session.watch)
	mismatch0      uint64          // the device's wrong-transport count when the QPs were made
}

// udQKey is the Q_Key perftest gives its UD QPs and their sends.
const udQKey = 0x11111111

// grhLen is the room a UD receive leaves before the message for the GRH.
const grhLen = 40

// ud reports whether the run's QPs are UD.
func (d *rdma) ud() bool { return d.cfg.Conn == verbs.QPTUD }

// sendOff and recvOff are the offsets in buf of QP i's regions.
func (d *rdma) sendOff(i int) int { return i * d.region }
func (d *rdma) recvOff(i int) int { return (len(d.qps) + i) * d.region }

// qpIndex maps a completion's QP number to the QP's index.
func (d *rdma) qpIndex(num uint32) int {
	for i, qp := range d.qps {
		if qp.Num == num {
			return i
		}
	}
	return -1
}

func (d *rdma) setup(cfg *Config) ([]Keys, error) {
	d.cfg = cfg
	dev := d.env.Dev
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	depth := cfg.QPs * max(cfg.TxDepth, cfg.RxDepth)
	if d.scq, err = dev.CreateCQ(depth + 16); err != nil {
		return nil, err
	}
	if d.rcq, err = dev.CreateCQ(depth + 16); err != nil {
		return nil, err
	}
	inline := cfg.Inline
	// Each QP's share of the NIC's replay buffer: the default allocation,
	// or, with more QPs than it holds at that, an equal part of what is
	// free (at least 16 entries), so that -q takes what the device has.
	replay := datapath.DefaultReplayAllocation
	if st := dev.NIC().Replay().Stats(); int64(cfg.QPs*replay) > st.Capacity-st.Reserved {
		replay = max(16, int(st.Capacity-st.Reserved)/cfg.QPs)
	}
	d.mismatch0 = dev.NIC().Counters().RcvdWrongTransport.Load()
	for range cfg.QPs {
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: cfg.Conn, SendCQ: d.scq, RecvCQ: d.rcq, ReplayEntries: replay,
			Cap: verbs.QPCap{MaxSendWR: cfg.TxDepth, MaxRecvWR: cfg.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: inline}})
		if err != nil {
			return nil, err
		}
		d.qps = append(d.qps, qp)
	}
	d.region = cfg.bufSize()
	if d.ud() {
		d.region += grhLen
	}
	d.buf = make([]byte, 2*cfg.QPs*d.region)
	if d.mr, err = pd.RegMR(d.buf, cfg.Test.access()); err != nil {
		return nil, err
	}
	d.wc, d.rwc = make([]verbs.WC, 64), make([]verbs.WC, 64)
	out := uint16(1)
	if cfg.Test.read() || cfg.Test.atomic() {
		out = uint16(cfg.OutReads)
	}
	srqn := uint32(0)
	if cfg.SR {
		srqn = SelectiveRepeatFlag
	}
	d.sr = cfg.SR
	for i, qp := range d.qps {
		d.local = append(d.local, Keys{OutReads: out, QPN: qp.Num, PSN: rand.Uint32() & 0xffffff, RKey: d.mr.RKey,
			VAddr: d.mr.Addr + uint64(d.recvOff(i)), GID: d.env.GID.As16(), SRQN: srqn})
	}
	return d.local, nil
}

func (d *rdma) cmQPs() []*verbs.QP {
	d.viaCM = true
	return d.qps
}

func (d *rdma) connect(ctx context.Context, peers []Keys, mtu int, rts bool) error {
	d.peer = peers
	if d.viaCM { // in RTS already
		d.placed0 = d.env.Dev.WritesPlaced()
		return nil
	}
	ip := peers[0].Addr()
	if !ip.IsValid() || ip.IsUnspecified() {
		return fmt.Errorf("%w: keys exchange: GID %s is no address", ErrPeer, ip)
	}
	rctx, cancel := context.WithTimeout(ctx, StepTimeout)
	defer cancel()
	mac, err := d.env.Resolve(rctx, ip)
	if err != nil {
		return fmt.Errorf("perftest: resolving the peer %s: %w", ip, err)
	}
	d.ah = verbs.AH{DestMAC: mac, DestGID: ip}
	for i, qp := range d.qps {
		var err error
		switch d.cfg.Conn {
		case verbs.QPTUD:
			err = verbs.ReadyUD(qp, udQKey)
		case verbs.QPTUC:
			err = d.connectUC(qp, d.local[i], peers[i], mtu)
		default:
			err = d.connectQP(qp, d.local[i], peers[i], d.ah, mtu, rts)
		}
		if err != nil {
			return err
		}
	}
	// The peer writes only after the exchange that follows.
	d.placed0 = d.env.Dev.WritesPlaced()
	return nil
}

func (d *rdma) connectQP(qp *verbs.QP, local, peer Keys, ah verbs.AH, mtu int, rts bool) error {
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1,
		AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return fmt.Errorf("perftest: QP to INIT: %w", err)
	}
	rtr := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	if d.sr && peer.SRQN&SelectiveRepeatFlag != 0 { // both ends asked for it
		rtr |= verbs.AttrSelectiveRepeat
		d.srOn = true
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: ah, PathMTU: mtu,
		DestQPN: peer.QPN, RQPSN: peer.PSN, MaxDestRdAtomic: uint8(local.OutReads), MinRNRTimer: 12, SelectiveRepeat: true}, rtr); err != nil {
		return fmt.Errorf("perftest: QP to RTR: %w", err)
	}
	if !rts {
		return nil
	}
	rd := uint8(max(1, min(int(peer.OutReads), maxOutReads)))
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: local.PSN, Timeout: d.cfg.Timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: rd},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("perftest: QP to RTS: %w", err)
	}
	return nil
}

// connectUC brings a UC QP to RTS towards the peer's QP, as QP.Connect
// connects one: the peer may write into its region (a UC QP takes no
// READs or atomics), and there is no ACK timeout or retry to set.
func (d *rdma) connectUC(qp *verbs.QP, local, peer Keys, mtu int) error {
	l := verbs.Endpoint{Type: verbs.QPTUC, QPN: qp.Num, PSN: local.PSN, GID: d.env.GID}
	r := verbs.Endpoint{Type: verbs.QPTUC, QPN: peer.QPN, PSN: peer.PSN, GID: d.ah.DestGID, MAC: d.ah.DestMAC}
	if err := qp.Connect(l, r, &verbs.ConnectOptions{PathMTU: mtu, Access: verbs.AccessRemoteWrite}); err != nil {
		return fmt.Errorf("perftest: UC QP: %w", err)
	}
	return nil
}

// address fills in where a send on QP i goes: a UD send names the peer's
// address, QP and Q_Key in each work request.
func (d *rdma) address(w *verbs.SendWR, i int) {
	if d.ud() {
		w.AH, w.RemoteQPN, w.RemoteQKey = &d.ah, d.peer[i].QPN, udQKey
	}
}

// checkTransport reports whether packets of another transport than the
// run's have reached the device since its QPs were made: the peer runs
// another -c (its exchange does not say).
func (d *rdma) checkTransport() error {
	c := d.env.Dev.NIC().Counters()
	if c.RcvdWrongTransport.Load() == d.mismatch0 {
		return nil
	}
	got := c.LastWrongTransport()
	return fmt.Errorf("%w: %v packets arrive for this side's %v QPs: run both sides with the same -c (this side: -c %v)", ErrTransport, got, d.cfg.Conn, d.cfg.Conn)
}

func (d *rdma) peerAhead(ch <-chan struct{}) { d.ahead = ch }

func (d *rdma) teardown() {
	for _, qp := range d.qps {
		qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
		qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)
	}
}

// prepare posts RxDepth receives on every QP (send tests).
func (d *rdma) prepare(size int) error {
	for i := range d.qps {
		for k := range d.cfg.RxDepth {
			off := cycleOffset(k, size)
			if d.cfg.Test == SendLat {
				off = 0
			}
			if err := d.postRecv(i, uint64(k), size, off); err != nil {
				return err
			}
		}
	}
	return nil
}

// measureBidir is one size of perftest's -b: this side sends as a
// client does and, in send-bw, takes the peer's messages at the same
// time. The result is this side's sending.
func (d *rdma) measureBidir(ctx context.Context, size int) (Result, error) {
	if !d.cfg.Test.send() {
		return d.bwClient(ctx, size)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rerr := make(chan error, 1)
	go func() {
		_, err := d.receive(ctx, size, d.rwc)
		if err != nil {
			cancel()
		}
		rerr <- err
	}()
	r, err := d.bwClient(ctx, size)
	if err != nil {
		cancel()
	}
	if rerr := <-rerr; err == nil {
		err = rerr
	}
	return r, err
}

func (d *rdma) measure(ctx context.Context, size int, server bool) (Result, bool, error) {
	t := d.cfg.Test
	switch {
	case t == SendBW && server:
		r, err := d.sendBWServer(ctx, size)
		return r, err == nil, err
	case t.BW():
		r, err := d.bwClient(ctx, size)
		return r, err == nil, err
	case t == WriteLat:
		err := d.writeLat(ctx, size, server)
		d.env.Dev.NIC().SendHeld() // the peer's last completion: before this side's connection may close
		return d.latResult(size, 2, server), err == nil, err
	case t == SendLat:
		err := d.sendLat(ctx, size, server)
		d.env.Dev.NIC().SendHeld()
		return d.latResult(size, 2, server), err == nil, err
	default:
		err := d.readLat(ctx, size)
		return d.latResult(size, 1, server), err == nil, err
	}
}

// postRecv posts on QP i a receive of size bytes at offset off of its
// receive region.
func (d *rdma) postRecv(i int, id uint64, size, off int) error {
	if d.ud() {
		size += grhLen // the GRH comes first
	}
	_, err := d.qps[i].PostRecv([]verbs.RecvWR{{WRID: id, SGL: []verbs.SGE{{Addr: d.mr.Addr + uint64(d.recvOff(i)+off), Length: uint32(size), LKey: d.mr.LKey}}}})
	return err
}

// poll takes completions of cq into d.wc, waiting until at least one
// comes or ctx ends. An error completion ends the run.
func (d *rdma) poll(ctx context.Context, cq *verbs.CQ) ([]verbs.WC, error) {
	return pollInto(ctx, cq, d.wc)
}

// pollInto is poll into wc.
func pollInto(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) ([]verbs.WC, error) {
	for {
		if k := cq.Poll(wc); k > 0 {
			for _, c := range wc[:k] {
				if c.Status != verbs.WCSuccess {
					return nil, fmt.Errorf("perftest: completion with error: %w (WR %d, opcode %v)", c.Status, c.WRID, c.Opcode)
				}
			}
			return wc[:k], nil
		}
		if err := cq.Wait(ctx); err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("perftest: the run stopped: %w", err)
			}
			return nil, err
		}
	}
}

func (d *rdma) ensureTimes(n int) {
	if cap(d.tposted) < n {
		d.tposted, d.tdone = make([]time.Time, n), make([]time.Time, n)
	}
}

// access is what the test's region lets the peer do, as perftest
// registers it: WRITE tests take remote writes, READ tests remote reads,
// atomic tests remote atomics, SEND tests nothing remote. A peer that
// runs another test than this side (a read-bw client against a write-bw
// server) gets a remote access error instead of figures under the wrong
// header.
func (t Test) access() verbs.Access {
	a := verbs.AccessLocalWrite
	switch t.verb() {
	case WriteBW:
		a |= verbs.AccessRemoteWrite
	case ReadBW:
		a |= verbs.AccessRemoteRead
	case AtomicBW:
		a |= verbs.AccessRemoteAtomic
	}
	return a
}
