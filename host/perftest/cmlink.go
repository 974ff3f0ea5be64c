package perftest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/verbs"
)

// cmLink is the exchange over an RC connection that the CM set up, as
// perftest -R (and -z) runs it: on the same port number, in rdma_cm's TCP
// port space; each step's message is one SEND of exactly its bytes, and
// the keys are perftest's struct itself (ParseKeysBinary). With -R the
// test's QPs are connected through the CM too, on the same port, once the
// exchange's connection stands (connectQPs).
type cmLink struct {
	agent    *cm.Agent
	conn     *cm.Conn
	addr     netip.AddrPort // the server's (its port only, on the server)
	server   bool
	scq, rcq *verbs.CQ
	mr       *verbs.MR
	buf      []byte // cmRecvs receive slots, then the send slot
	wc       []verbs.WC

	listener *cm.Listener // the server's, for the test QPs
	tests    []*cm.Conn   // the test QPs' connections
}

const (
	cmSlot  = 64 // bytes a message: the largest, the keys, is KeysBinaryLen
	cmRecvs = 4  // receives kept posted (the steps are lock-step: one would do)

	cmConnectTries = 10 // perftest's client: connection attempts, 100 ms apart

	// cmConnectWait bounds connecting the test QPs (a REQ is sent again
	// each CM response timeout, about a second).
	cmConnectWait = 30 * time.Second
)

// newCMLink makes the exchange's resources on the agent's device.
func newCMLink(agent *cm.Agent, addr netip.AddrPort, server bool) (*cmLink, cm.QPConfig, error) {
	l := &cmLink{agent: agent, addr: addr, server: server, buf: make([]byte, (cmRecvs+1)*cmSlot), wc: make([]verbs.WC, 1)}
	dev := agent.Device()
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, cm.QPConfig{}, err
	}
	if l.scq, err = dev.CreateCQ(8); err != nil {
		return nil, cm.QPConfig{}, err
	}
	if l.rcq, err = dev.CreateCQ(2 * cmRecvs); err != nil {
		return nil, cm.QPConfig{}, err
	}
	if l.mr, err = pd.RegMR(l.buf, verbs.AccessLocalWrite); err != nil {
		return nil, cm.QPConfig{}, err
	}
	// One QP for every attempt (the agent resets it for each): a client
	// that retries until the server listens must not use up the device's
	// QPs. The server hands it to one connection only.
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: l.scq, RecvCQ: l.rcq,
		Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: cmRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, cm.QPConfig{}, err
	}
	var taken atomic.Bool
	qc := cm.QPConfig{RetryCount: 7, RNRRetryCount: 7,
		QP: func() (*verbs.QP, error) {
			if server && taken.Swap(true) {
				return nil, errors.New("perftest: the exchange has its connection")
			}
			return qp, nil
		},
		Prepare: func(qp *verbs.QP) error {
			// An earlier attempt's flushed receives, dropped as stale: out
			// of the CQ before the next attempt's can flush.
			for l.rcq.Poll(l.wc) > 0 {
			}
			for l.scq.Poll(l.wc) > 0 {
			}
			for i := range cmRecvs {
				if err := l.postRecv(qp, i); err != nil {
					return err
				}
			}
			return nil
		}}
	return l, qc, nil
}

// DialCM connects to a perftest server's exchange through the CM (its
// address and perftest's port, -p), retrying while the server rejects it
// (it may not listen yet), until ctx ends.
func DialCM(ctx context.Context, agent *cm.Agent, addr netip.AddrPort) (*Conn, error) {
	l, qc, err := newCMLink(agent, addr, false)
	if err != nil {
		return nil, err
	}
	for {
		if l.conn, err = agent.Dial(ctx, addr.String(), qc); err == nil {
			return &Conn{l: l}, nil
		}
		if !errors.Is(err, cm.ErrRejected) {
			return nil, fmt.Errorf("perftest: connect to %v through the CM: %w", addr, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("perftest: connect to %v through the CM: %w", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// AcceptCM waits for a client's exchange connection through the CM on
// port until ctx ends; then the port takes no more until the test's QPs
// connect.
func AcceptCM(ctx context.Context, agent *cm.Agent, port uint16) (*Conn, error) {
	l, qc, err := newCMLink(agent, netip.AddrPortFrom(netip.Addr{}, port), true)
	if err != nil {
		return nil, err
	}
	ln, err := agent.Listen(fmt.Sprintf(":%d", port), qc)
	if err != nil {
		return nil, fmt.Errorf("perftest: %w", err)
	}
	defer ln.Close()
	if l.conn, err = ln.Accept(ctx); err != nil {
		return nil, fmt.Errorf("perftest: waiting for a client: %w", err)
	}
	return &Conn{l: l, server: true}, nil
}

func (l *cmLink) slotAddr(i int) uint64 { return l.mr.Addr + uint64(i*cmSlot) }

func (l *cmLink) postRecv(qp *verbs.QP, i int) error {
	_, err := qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{{Addr: l.slotAddr(i), Length: cmSlot, LKey: l.mr.LKey}}}})
	return err
}

// errGone is the exchange's connection ending under a step.
var errGone = errors.New("the peer disconnected")

// linkStep is the least a step over rdma_cm waits for its message: on a
// lossy path the peer's SEND (or the ACK of this side's) comes again
// only after its QP's local ACK timeout, which rdma_cm sets to about two
// seconds (0x13), up to seven times; a step bounded by StepTimeout alone
// failed at the second loss. A peer that goes away ends the step at once
// (its QP errors, or the CM disconnects), whatever the wait.
const linkStep = 30 * time.Second

// wait returns the next completion of the exchange's QP on cq within
// wait (linkStep at least).
func (l *cmLink) wait(cq *verbs.CQ, wait time.Duration) (verbs.WC, error) {
	wait = max(wait, linkStep)
	deadline := time.Now().Add(wait)
	for {
		if cq.Poll(l.wc) == 1 {
			return l.wc[0], nil
		}
		if !time.Now().Before(deadline) {
			return verbs.WC{}, fmt.Errorf("no answer within %v", wait)
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(50*time.Millisecond, time.Until(deadline)))
		cq.Wait(ctx)
		cancel()
		select {
		case <-l.conn.Done():
			if cq.Poll(l.wc) == 1 {
				return l.wc[0], nil
			}
			return verbs.WC{}, errGone
		default:
		}
	}
}

func status(what string, w verbs.WC) error {
	if w.Status == verbs.WCWRFlushErr {
		return errGone
	}
	return fmt.Errorf("%s failed: %v", what, w.Status)
}

func (l *cmLink) send(b []byte, wait time.Duration) error {
	if len(b) > cmSlot {
		return fmt.Errorf("a %d-byte message, more than %d", len(b), cmSlot)
	}
	copy(l.buf[cmRecvs*cmSlot:], b)
	if _, err := l.conn.QP.PostSend([]verbs.SendWR{{WRID: cmRecvs, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: l.slotAddr(cmRecvs), Length: uint32(len(b)), LKey: l.mr.LKey}}}}); err != nil {
		return err
	}
	w, err := l.wait(l.scq, wait)
	if err != nil {
		return err
	}
	if w.Status != verbs.WCSuccess {
		return status("send", w)
	}
	return nil
}

func (l *cmLink) recv(b []byte, wait time.Duration) error {
	w, err := l.wait(l.rcq, wait)
	if err != nil {
		return err
	}
	if w.Status != verbs.WCSuccess {
		return status("receive", w)
	}
	i := int(w.WRID)
	if i >= cmRecvs || w.Opcode != verbs.WCRecv {
		return fmt.Errorf("%w: a completion of %v (work request %d)", ErrPeer, w.Opcode, w.WRID)
	}
	if int(w.ByteLen) != len(b) {
		l.postRecv(l.conn.QP, i)
		return fmt.Errorf("%w: a %d-byte message, want %d", ErrPeer, w.ByteLen, len(b))
	}
	copy(b, l.buf[i*cmSlot:])
	return l.postRecv(l.conn.QP, i)
}

// done: perftest's exchange over rdma_cm ends with the closing keys
// exchange; the disconnects follow (close).
func (l *cmLink) done() error { return nil }

func (l *cmLink) watch() (<-chan error, <-chan struct{}, func()) {
	ch := make(chan error, 1)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-l.conn.Done():
			ch <- fmt.Errorf("perftest: during the run: %w", errGone)
		case <-quit:
		}
	}()
	return ch, nil, func() {
		close(quit)
		<-done
	}
}

// close disconnects as perftest does: the server disconnects the test
// QPs' connections, and the client waits for it (for a step's time at
// most, then disconnects them itself); then the exchange's connection.
func (l *cmLink) close() error {
	if l.listener != nil {
		l.listener.Close()
	}
	if !l.server {
		t := time.NewTimer(StepTimeout)
	wait:
		for _, c := range l.tests {
			select {
			case <-c.Done():
			case <-t.C:
				break wait
			}
		}
		t.Stop()
	}
	var errs []error
	for _, c := range l.tests {
		errs = append(errs, c.Close())
	}
	if l.conn != nil {
		errs = append(errs, l.conn.Close())
	}
	return errors.Join(errs...)
}

// testQPConfig is what the test QPs' connections offer: perftest's
// retry counts and, for READ and atomic tests, its outstanding reads both
// ways, on the QPs qp supplies.
func testQPConfig(reads uint8, qp func() (*verbs.QP, error)) cm.QPConfig {
	return cm.QPConfig{RetryCount: 7, RNRRetryCount: 7, ResponderResources: reads, InitiatorDepth: reads, QP: qp}
}

// listen (the server's) takes the test QPs' connection requests on the
// exchange's port: from before the sync that lets the client send them.
func (l *cmLink) listen(qps []*verbs.QP, reads uint8) error {
	// Each connection takes the next of qps.
	var mu sync.Mutex
	next := 0
	ln, err := l.agent.Listen(fmt.Sprintf(":%d", l.addr.Port()), testQPConfig(reads, func() (*verbs.QP, error) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(qps) {
			return nil, fmt.Errorf("perftest: all %d QPs are connected", len(qps))
		}
		next++
		return qps[next-1], nil
	}))
	if err != nil {
		return fmt.Errorf("perftest: %w", err)
	}
	l.listener = ln
	return nil
}

// connectQPs connects every test QP through the CM: the client dials one
// connection a QP (a rejected attempt is made again, 100 ms later, up to
// perftest's ten times: the server may not listen yet); the server
// accepts as many.
func (l *cmLink) connectQPs(ctx context.Context, qps []*verbs.QP, reads, tos uint8) error {
	ctx, cancel := context.WithTimeout(ctx, cmConnectWait)
	defer cancel()
	if l.server {
		for range qps {
			c, err := l.listener.Accept(ctx)
			if err != nil {
				return fmt.Errorf("perftest: connecting the test QPs through the CM: %w", err)
			}
			l.tests = append(l.tests, c)
		}
		l.listener.Close()
		l.listener = nil
		return nil
	}
	for _, qp := range qps {
		qc := testQPConfig(reads, func() (*verbs.QP, error) { return qp, nil }) // each attempt on it
		// The server's QP takes the REQ's traffic class.
		qc.TrafficClass = tos
		for try := 1; ; try++ {
			c, err := l.agent.Dial(ctx, l.addr.String(), qc)
			if err == nil {
				l.tests = append(l.tests, c)
				break
			}
			if !errors.Is(err, cm.ErrRejected) || try == cmConnectTries {
				return fmt.Errorf("perftest: connecting QP %d through the CM: %w", qp.Num, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("perftest: connecting QP %d through the CM: %w", qp.Num, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
