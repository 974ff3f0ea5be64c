package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/porttest"
	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/verbs"
)

// runCM runs a test between two softrnic devices as perftest -R runs it:
// the exchange over a connection through the CM, and the test's QPs
// connected through it too. It returns both outputs and results, and the
// two sides' exchange connections' test QP connections after Close.
func runCM(t *testing.T, se, ce Env, cfg Config) (sout, cout string, sres, cres []Result, tests [2][]*cm.Conn) {
	t.Helper()
	agent := func(e Env) *cm.Agent {
		a, err := cm.NewAgent(e.Dev, e.GID, cm.Config{Resolve: e.Resolve, ResponseTimeout: 14})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	sa, ca := agent(se), agent(ce)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var so, co bytes.Buffer
	serr := make(chan error, 1)
	go func() {
		c, err := AcceptCM(ctx, sa, Port)
		if err != nil {
			serr <- err
			return
		}
		sres, err = Run(ctx, se, c, cfg, &so)
		tests[0] = c.cm().tests
		serr <- errors.Join(err, c.Close())
	}()
	c, err := DialCM(ctx, ca, netip.AddrPortFrom(se.GID, Port))
	if err != nil {
		t.Fatal(err)
	}
	cres, err = Run(ctx, ce, c, cfg, &co)
	tests[1] = c.cm().tests
	if err := errors.Join(err, c.Close()); err != nil {
		t.Fatalf("client: %v\n%s", err, co.String())
	}
	if err := <-serr; err != nil {
		t.Fatalf("server: %v\n%s", err, so.String())
	}
	return so.String(), co.String(), sres, cres, tests
}

// TestRunCM: perftest -R between two softrnic devices: every kind of
// test runs over QPs the CM connected (one connection per QP on each
// side), the exchange says rdma_cm, the figures are there, and closing
// disconnects every test connection on both sides.
func TestRunCM(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		loss float64
	}{
		{cfg: Config{Test: WriteBW, Iters: 200, Size: 4096}},
		{cfg: Config{Test: SendBW, Iters: 200, Size: 1024}},
		{cfg: Config{Test: ReadBW, Iters: 200, Size: 3000}},
		{cfg: Config{Test: WriteLat, Iters: 100}},
		{cfg: Config{Test: SendLat, Iters: 100}},
		{cfg: Config{Test: ReadLat, Iters: 100}},
		{cfg: Config{Test: AtomicBW, Iters: 100}},
		{cfg: Config{Test: WriteBW, Iters: 200, Size: 3000, QPs: 3}},
		{cfg: Config{Test: SendBW, Iters: 100, Size: 2048, Bidir: true}},
		// Loss: the CM's messages are sent again, the exchange's SENDs
		// and the test's packets retransmitted.
		{cfg: Config{Test: WriteBW, Iters: 100, Size: 4096}, loss: 0.02},
		{cfg: Config{Test: SendLat, Iters: 50}, loss: 0.02},
	} {
		cfg := tc.cfg
		cfg.RDMACM = true
		name := fmt.Sprintf("%v/q%d/b=%v/loss=%v", cfg.Test, max(1, cfg.QPs), cfg.Bidir, tc.loss)
		t.Run(name, func(t *testing.T) {
			se, ce := pairEnvLink(t, porttest.Config{Buffers: 8192, Loss: tc.loss, Seed: 7})
			sout, cout, sres, cres, tests := runCM(t, se, ce, cfg)
			for side, out := range map[string]string{"client": cout, "server": sout} {
				if !strings.Contains(out, "Data ex. method : rdma_cm") || !strings.Contains(out, "rdma_cm QPs\t : ON") {
					t.Errorf("%s output does not name rdma_cm:\n%s", side, out)
				}
				if n := strings.Count(out, "remote address: LID 0000 QPN"); n != max(1, cfg.QPs) {
					t.Errorf("%s output shows %d remote addresses:\n%s", side, n, out)
				}
			}
			if len(cres) != 1 || cres[0].Iters != cfg.Iters*max(1, cfg.QPs) {
				t.Fatalf("client results %+v\n%s", cres, cout)
			}
			if cfg.Test.BW() && cres[0].BWAvg <= 0 || !cfg.Test.BW() && cres[0].TTypical <= 0 {
				t.Errorf("figures %+v", cres[0])
			}
			if cfg.Bidir && (len(sres) != 1 || sres[0].BWAvg != cres[0].BWAvg) {
				t.Errorf("-b: the server printed %+v, the client %+v", sres, cres)
			}
			for i, side := range []string{"server", "client"} {
				if len(tests[i]) != max(1, cfg.QPs) {
					t.Fatalf("%s has %d test connections, want %d", side, len(tests[i]), max(1, cfg.QPs))
				}
				for _, c := range tests[i] {
					select {
					case <-c.Done():
					default:
						t.Errorf("%s: the connection of QP %d is still up after Close", side, c.QP.Num)
					}
				}
			}
			t.Logf("client:\n%s", cout)
		})
	}
}

// TestRunCMMisuse: -R needs an exchange through the CM, and does not go
// with --sr.
func TestRunCMMisuse(t *testing.T) {
	if err := (Config{Test: WriteBW, RDMACM: true, SR: true}).Check(); err == nil {
		t.Error("-R with --sr accepted")
	}
	se, _ := pairEnv(t)
	c := NewConn(nil, false)
	if _, err := Run(context.Background(), se, c, Config{Test: WriteBW, RDMACM: true}, nil); err == nil || !strings.Contains(err.Error(), "through the CM") {
		t.Errorf("-R over TCP: %v", err)
	}
}

// TestDialCMBeforeListen: a client that dials before the server listens
// is rejected and tries again, on one QP, until the server takes it;
// then a test runs over the connection.
func TestDialCMBeforeListen(t *testing.T) {
	se, ce := pairEnv(t)
	sa, err := cm.NewAgent(se.Dev, se.GID, cm.Config{Resolve: se.Resolve, ResponseTimeout: 14})
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	ca, err := cm.NewAgent(ce.Dev, ce.GID, cm.Config{Resolve: ce.Resolve, ResponseTimeout: 14})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A QP made just before: the exchange's is the next.
	pd, _ := ce.Dev.AllocPD()
	cq, _ := ce.Dev.CreateCQ(4)
	probe, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	dialed := make(chan *Conn, 1)
	go func() {
		c, err := DialCM(ctx, ca, netip.AddrPortFrom(se.GID, Port))
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	time.Sleep(700 * time.Millisecond)
	if n := ca.Counters.Reject.Load(); n < 3 {
		t.Errorf("%d attempts rejected in 700 ms, want one each 100 ms", n)
	}
	serr := make(chan error, 1)
	cfg := Config{Test: SendLat, Iters: 20, RDMACM: true}
	go func() {
		s, err := AcceptCM(ctx, sa, Port)
		if err == nil {
			_, err = Run(ctx, se, s, cfg, nil)
			err = errors.Join(err, s.Close())
		}
		serr <- err
	}()
	c := <-dialed
	if c == nil {
		t.FailNow()
	}
	first := c.cm().conn.QP.Num
	res, err := Run(ctx, ce, c, cfg, nil)
	if err := errors.Join(err, c.Close()); err != nil {
		t.Fatal(err)
	}
	if err := <-serr; err != nil {
		t.Fatal("server:", err)
	}
	if len(res) != 1 || res[0].Iters != 20 {
		t.Errorf("results %+v", res)
	}
	if first != probe.Num+1 {
		t.Errorf("after %d rejected attempts the exchange runs on QP %d, the device's QP after %d: the attempts used up QPs",
			ca.Counters.Reject.Load(), first, probe.Num)
	}
}

// goneLink is a link whose send fails as the peer goes away, with the
// peer's answer already received: what a client sees at the closing step
// when the server took its message but the ACK was lost.
type goneLink struct {
	answer []byte
	sends  int
}

func (l *goneLink) send([]byte, time.Duration) error { l.sends++; return errGone }
func (l *goneLink) recv(b []byte, _ time.Duration) error {
	if l.answer == nil {
		return errGone
	}
	copy(b, l.answer)
	return nil
}
func (l *goneLink) done() error                                    { return nil }
func (l *goneLink) watch() (<-chan error, <-chan struct{}, func()) { return nil, nil, func() {} }
func (l *goneLink) close() error                                   { return nil }

// TestExchangePeerGoneAfterAnswer: a client whose message's ACK never
// came (the server answered and disconnected) takes the server's answer
// and goes on; with no answer there, the step fails saying the peer went
// away; a server is not helped (its first step is the read).
func TestExchangePeerGoneAfterAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server bool
		answer []byte
		ok     bool
	}{
		{"client, answer here", false, []byte("ok"), true},
		{"client, no answer", false, nil, false},
		{"server", true, []byte("ok"), false},
	} {
		l := &goneLink{answer: tc.answer}
		c := &Conn{l: l, server: tc.server}
		in := make([]byte, 2)
		err := c.exchange("closing keys exchange", []byte("hi"), in, time.Second)
		if tc.ok && (err != nil || string(in) != "ok") || !tc.ok && !errors.Is(err, errGone) {
			t.Errorf("%s: %v (read %q)", tc.name, err, in)
		}
	}
}

// TestCloseWhenPeerLeft: a peer that leaves within the closing step (its
// run over, this side's last message not yet acknowledged) ends the run
// well, on either side; a peer gone for another reason is still an error.
func TestCloseWhenPeerLeft(t *testing.T) {
	for _, server := range []bool{false, true} {
		s := &session{conn: &Conn{l: &goneLink{}, server: server}, local: []Keys{{}}, peer: []Keys{{}}}
		if err := s.close(time.Second); err != nil {
			t.Errorf("server %v: %v", server, err)
		}
	}
	s := &session{conn: &Conn{l: &goneLink{}}, local: []Keys{{}}, peer: []Keys{{}}}
	if err := s.keys("keys exchange", time.Second); !errors.Is(err, errGone) {
		t.Errorf("a peer gone at a setup step: %v", err)
	}
}

// watchDP is a data path for session.watch alone.
type watchDP struct{ dataPath }

func (watchDP) peerAhead(<-chan struct{}) {}
func (watchDP) checkTransport() error     { return nil }

// closingLink reports the peer closing the connection when told to.
type closingLink struct {
	goneLink
	closed chan error
}

func (l *closingLink) watch() (<-chan error, <-chan struct{}, func()) {
	return l.closed, nil, func() {}
}

// TestWatchPeerClosedAfterTheRun: write_lat has no closing exchange, so a
// peer that saw its last completion first closes the connection while
// this side is still waking to see the last WRITE. A run that still
// completes stands; one that the close cut short fails, saying so.
func TestWatchPeerClosedAfterTheRun(t *testing.T) {
	gone := errors.New("perftest: during the run: the peer closed the connection (EOF)")
	for _, tc := range []struct {
		name     string
		complete bool // the run finds what it waited for after the close
	}{
		{"the run completes", true},
		{"the run is cut short", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &closingLink{closed: make(chan error, 1)}
			s := &session{conn: &Conn{l: l}, dp: watchDP{}}
			err := s.watch(context.Background(), func(ctx context.Context) error {
				l.closed <- gone
				<-ctx.Done() // the watch cancels the run's waits
				if tc.complete {
					return nil // a last look found the peer's last WRITE
				}
				return ctx.Err()
			})
			switch {
			case tc.complete && err != nil:
				t.Errorf("a run that completed failed: %v", err)
			case !tc.complete && !errors.Is(err, gone):
				t.Errorf("a run cut short: %v, want the peer's close", err)
			}
		})
	}
}
