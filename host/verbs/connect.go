package verbs

import (
	"fmt"

	"github.com/softrnic/softrnic/datapath/wire"
)

// ConnectOptions tune QP.Connect. Start from DefaultConnectOptions: every
// field is used as given, except the two whose zero value means "work it
// out".
type ConnectOptions struct {
	// PathMTU is the path MTU as an ibv_mtu enum (1 = 256 … 5 = 4096);
	// 0 takes the smallest of this port's active MTU and the two
	// Endpoints' MTUs.
	PathMTU int
	// NextHop is the Ethernet address this QP's frames go to; zero takes
	// the remote Endpoint's MAC, which is right when the peer is on the
	// same Ethernet segment. Behind a router, it is the router's (the
	// neighbour netdev.Device.Resolve finds for the peer's GID).
	NextHop wire.MAC
	// Access is what the peer may do to this side's registered memory
	// through the QP (each region allows it too, RegMR's access flags).
	// A UC QP grants at most AccessRemoteWrite.
	Access Access
	// RC only: the local ACK timeout exponent (4.096 us x 2^Timeout; 0
	// waits forever), the retries after a timeout (at most 7) and after
	// an RNR NAK (7: without end), the RNR timer code the peer is told to
	// wait when this side has no receive posted, and the READs and
	// atomics in flight at once from this QP (MaxRdAtomic) and from the
	// peer (MaxDestRdAtomic).
	Timeout, RetryCnt, RNRRetry  uint8
	MinRNRTimer                  uint8
	MaxRdAtomic, MaxDestRdAtomic uint8
	// PeerRNRRetry is the peer QP's RNR retry count where this side
	// knows it (QPAttr.PeerRNRRetry; a connection manager's count); 0:
	// not known.
	PeerRNRRetry uint8
	// IdleProbe sets QPAttr.IdleProbe on an RC QP (a connection manager's
	// QPs, whose first messages cross the network alone).
	IdleProbe bool
	// TrafficClass is the QP's frames' traffic class (AH.TrafficClass):
	// rdma_cm's TOS.
	TrafficClass uint8
}

// DefaultConnectOptions returns the options Connect uses when given none:
// the path MTU worked out from both sides, the peer's own MAC as next
// hop, remote write, read and atomic access, an ACK timeout of 2^14 x
// 4.096 us (about 67 ms), 7 retries, RNR retries without end, an RNR
// timer of 0.64 ms (code 12) and 16 READs or atomics in flight each way
// (ConnectRC's settings).
func DefaultConnectOptions() ConnectOptions {
	return ConnectOptions{
		Access:  AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic,
		Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12,
		MaxRdAtomic: 16, MaxDestRdAtomic: 16,
	}
}

// Connect points the QP at a peer's QP and makes it ready to send: it
// takes an RC or UC QP from RESET through INIT and RTR to RTS, as an
// application does with ibv_modify_qp after exchanging Endpoints with its
// peer (ExchangeEndpoints). local is the Endpoint this side sent
// (QP.Endpoint: its QPN must be this QP's, its PSN is the first this QP
// sends), remote the one the peer sent (the PSN this QP expects first,
// where it is, its MTU). Both sides call Connect, each with the two
// Endpoints the other way round; nil opts means DefaultConnectOptions.
// Selective repeat is enabled when both Endpoints ask for it.
//
// Connect returns once this QP is in RTS; the peer's may not be yet, and
// what this QP sends before it is, the peer drops and this QP sends again
// after its ACK timeout. Programs therefore usually say "ready" to each
// other over their out-of-band connection after Connect (and after
// posting their first receives) before the first work request.
func (qp *QP) Connect(local, remote Endpoint, opts *ConnectOptions) error {
	if qp.Type != QPTRC && qp.Type != QPTUC {
		return fmt.Errorf("%w: Connect connects RC and UC QPs, not %v (ReadyUD readies a UD QP)", ErrInvalid, qp.Type)
	}
	if local.QPN != qp.Num {
		return fmt.Errorf("%w: the local endpoint is QP %d's, not QP %d's", ErrInvalid, local.QPN, qp.Num)
	}
	for _, e := range []struct {
		side string
		ep   Endpoint
	}{{"local", local}, {"remote", remote}} {
		if e.ep.Type != qp.Type {
			return fmt.Errorf("%w: the %s endpoint is an %v QP's, QP %d is %v", ErrInvalid, e.side, e.ep.Type, qp.Num, qp.Type)
		}
		if err := e.ep.Validate(); err != nil {
			return fmt.Errorf("%w: %s endpoint: %w", ErrInvalid, e.side, err)
		}
	}
	o := DefaultConnectOptions()
	if opts != nil {
		o = *opts
	}
	mtu := o.PathMTU
	if mtu == 0 {
		mtu = qp.pd.dev.ActiveMTU()
		for _, m := range []int{local.MTU, remote.MTU} {
			if m != 0 && m < mtu {
				mtu = m
			}
		}
	}
	mac := o.NextHop
	if mac == (wire.MAC{}) {
		mac = remote.MAC
	}
	if mac == (wire.MAC{}) {
		return fmt.Errorf("%w: no MAC to send to: the remote endpoint gives none and ConnectOptions.NextHop is not set", ErrInvalid)
	}
	if s := qp.State(); s != QPSReset && s != QPSInit {
		return fmt.Errorf("%w: QP %d is %v: Connect takes a QP in RESET (or INIT)", ErrInvalidTransition, qp.Num, s)
	}
	sr := qp.Type == QPTRC && local.SelectiveRepeat && remote.SelectiveRepeat
	return qp.bringUp(remote.QPN, local.PSN, remote.PSN, AH{DestMAC: mac, DestGID: remote.GID, TrafficClass: o.TrafficClass}, mtu, sr, &o)
}

// bringUp takes the QP through INIT and RTR to RTS towards the peer's QP
// peerQPN: this QP sends from sqPSN and expects rqPSN first.
func (qp *QP) bringUp(peerQPN, sqPSN, rqPSN uint32, ah AH, pathMTU int, sr bool, o *ConnectOptions) error {
	steps := []struct {
		attr QPAttr
		mask AttrMask
	}{
		{QPAttr{State: QPSInit, Port: 1, AccessFlags: o.Access},
			AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{QPAttr{State: QPSRTR, AH: ah, PathMTU: pathMTU, DestQPN: peerQPN, RQPSN: rqPSN,
			MaxDestRdAtomic: o.MaxDestRdAtomic, MinRNRTimer: o.MinRNRTimer, SelectiveRepeat: sr},
			AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
		{QPAttr{State: QPSRTS, SQPSN: sqPSN, Timeout: o.Timeout, RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry, MaxRdAtomic: o.MaxRdAtomic},
			AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
	}
	if sr {
		steps[1].mask |= AttrSelectiveRepeat
	}
	if o.PeerRNRRetry != 0 && qp.Type == QPTRC {
		steps[2].attr.PeerRNRRetry = o.PeerRNRRetry
		steps[2].mask |= AttrPeerRNRRetry
	}
	if o.IdleProbe && qp.Type == QPTRC {
		steps[2].attr.IdleProbe = true
		steps[2].mask |= AttrIdleProbe
	}
	if qp.Type == QPTUC {
		steps[0].attr.AccessFlags &= AccessRemoteWrite
		steps[1].mask &^= AttrMaxDestRdAtomic | AttrMinRNRTimer
		steps[2].mask = AttrState | AttrSQPSN
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("QP %d to %v: %w", qp.Num, s.attr.State, err)
		}
	}
	return nil
}

// ConnectRC takes two RC queue pairs (which may live on different devices)
// from RESET through INIT and RTR to RTS, each pointed at the other: what
// two programs do with QP.Connect after exchanging Endpoints, done here in
// one process. aAH is how b reaches a, bAH how a reaches b. Remote write,
// read and atomic access are enabled; pathMTU is the ibv_mtu enum and
// timeout the ACK timeout exponent.
func ConnectRC(a, b *QP, aAH, bAH AH, pathMTU int, timeout uint8) error {
	return connect(a, b, aAH, bAH, pathMTU, timeout, false)
}

// ConnectRCSelective is ConnectRC with selective repeat enabled on both
// QPs (QPAttr.SelectiveRepeat): losses are repaired by resending what is
// missing, not the window.
func ConnectRCSelective(a, b *QP, aAH, bAH AH, pathMTU int, timeout uint8) error {
	return connect(a, b, aAH, bAH, pathMTU, timeout, true)
}

// ConnectUC does for two UC queue pairs what ConnectRC does for RC ones;
// UC takes no ACK timeout, retry counts or READ/atomic resources.
func ConnectUC(a, b *QP, aAH, bAH AH, pathMTU int) error {
	return connect(a, b, aAH, bAH, pathMTU, 0, false)
}

func connect(a, b *QP, aAH, bAH AH, pathMTU int, timeout uint8, sr bool) error {
	o := DefaultConnectOptions()
	o.Timeout = timeout
	if err := a.bringUp(b.Num, 1000+a.Num, 1000+b.Num, bAH, pathMTU, sr, &o); err != nil {
		return err
	}
	return b.bringUp(a.Num, 1000+b.Num, 1000+a.Num, aAH, pathMTU, sr, &o)
}

// ReadyUD takes a UD queue pair from RESET to RTS with the given Q_Key.
func ReadyUD(qp *QP, qkey uint32) error {
	steps := []struct {
		attr QPAttr
		mask AttrMask
	}{
		{QPAttr{State: QPSInit, Port: 1, QKey: qkey}, AttrState | AttrPKeyIndex | AttrPort | AttrQKey},
		{QPAttr{State: QPSRTR}, AttrState},
		{QPAttr{State: QPSRTS, SQPSN: 1}, AttrState | AttrSQPSN},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			return err
		}
	}
	return nil
}
