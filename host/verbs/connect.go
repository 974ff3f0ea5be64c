package verbs

// ConnectRC takes two RC queue pairs (which may live on different devices)
// from RESET through INIT and RTR to RTS, each pointed at the other: what
// an application does after exchanging QP numbers, PSNs and addresses out
// of band. aAH is how b reaches a, bAH how a reaches b. Remote write, read
// and atomic access are enabled; pathMTU is the ibv_mtu enum and timeout
// the ACK timeout exponent.
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
	for _, side := range []struct {
		me, peer *QP
		peerAH   AH
	}{{a, b, bAH}, {b, a, aAH}} {
		steps := []struct {
			attr QPAttr
			mask AttrMask
		}{
			{QPAttr{State: QPSInit, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic},
				AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
			{QPAttr{State: QPSRTR, AH: side.peerAH, PathMTU: pathMTU, DestQPN: side.peer.Num, RQPSN: 1000 + side.peer.Num,
				MaxDestRdAtomic: 16, MinRNRTimer: 12},
				AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
			{QPAttr{State: QPSRTS, SQPSN: 1000 + side.me.Num, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
				AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
		}
		if sr {
			steps[1].attr.SelectiveRepeat = true
			steps[1].mask |= AttrSelectiveRepeat
		}
		if side.me.Type == QPTUC {
			steps[0].attr.AccessFlags = AccessRemoteWrite
			steps[1].mask &^= AttrMaxDestRdAtomic | AttrMinRNRTimer
			steps[2].mask = AttrState | AttrSQPSN
		}
		for _, s := range steps {
			if err := side.me.Modify(&s.attr, s.mask); err != nil {
				return err
			}
		}
	}
	return nil
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
