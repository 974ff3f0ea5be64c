package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/verbs"
)

// Env is what a run needs of the local NIC.
type Env struct {
	Dev     *verbs.Device
	GID     netip.Addr // the local GID's address (IPv4 for an IPv4-mapped GID)
	PortMTU int        // the port's active MTU, as an ibv_mtu enum; 0 (or above the device's) takes Dev.ActiveMTU
	// Resolve finds the MAC address of the peer (or its next hop).
	Resolve func(ctx context.Context, ip netip.Addr) (wire.MAC, error)
	// DevName is printed as perftest prints the device.
	DevName string
}

// runSlack bounds a step that waits for the peer's test run, beyond the
// run's own duration (-D).
const runSlack = 10 * time.Minute

// runWait is how long a step that waits for the peer's test run may take:
// runSlack, and with -D the run's duration on top (a 10-minute -D run
// would otherwise end with its server gone).
func (s *session) runWait() time.Duration {
	if s.cfg.Infinite {
		return 1<<63 - 1 // until the client is stopped
	}
	return runSlack + s.cfg.Duration
}

// dataPath is what a run does on the NIC between the exchange's steps;
// the exchange itself (session) is the same whatever carries the data.
type dataPath interface {
	// setup creates the QPs and their buffer and returns the local keys,
	// one per QP.
	setup(cfg *Config) ([]Keys, error)
	// connect brings QP i to RTR (and RTS with rts) towards peer QP i.
	connect(ctx context.Context, peers []Keys, mtu int, rts bool) error
	// prepare posts the receives of a run of size-byte messages, before
	// the sync that starts it.
	prepare(size int) error
	// measure runs one size: the client's part, or the server's where it
	// does something. ok is false when the side measures nothing.
	measure(ctx context.Context, size int, server bool) (r Result, ok bool, err error)
	// measureBidir runs one size of a bidirectional bandwidth test on
	// either side: it sends (and for send-bw receives the peer's
	// messages) and returns its own sending's result.
	measureBidir(ctx context.Context, size int) (Result, error)
	// teardown moves the QP to the error state and resets it.
	teardown()
	// cmQPs hands the QPs to the connection manager (-R); connect then
	// only takes the peers' keys. A data path without QPs returns nil.
	cmQPs() []*verbs.QP
	// peerAhead hands over, before a measurement, a channel closed once
	// the peer's next exchange step has begun (nil: never): over UC and
	// UD, a receiver whose messages were lost stops waiting for them.
	peerAhead(ahead <-chan struct{})
	// checkTransport reports (ErrTransport) packets of another transport
	// than the run's arriving for the QPs.
	checkTransport() error
}

// Run runs one test over an established exchange connection, printing
// perftest's report to out (when out is not nil), and returns the results.
// On any error its QP is moved to the error state and then reset; its
// resources go with the device.
func Run(ctx context.Context, env Env, conn *Conn, cfg Config, out io.Writer) ([]Result, error) {
	if active := env.Dev.ActiveMTU(); env.PortMTU == 0 || env.PortMTU > active {
		env.PortMTU = active
	}
	return run(ctx, &rdma{env: env}, env.PortMTU, env.DevName, conn, cfg, out)
}

func run(ctx context.Context, dp dataPath, mtu int, devName string, conn *Conn, cfg Config, out io.Writer) (res []Result, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if out == nil {
		out = io.Discard
	}
	if cfg.RDMACM && conn.cm() == nil {
		return nil, errors.New("perftest: -R runs over an exchange connected through the CM (DialCM, AcceptCM)")
	}
	s := &session{dp: dp, conn: conn, cfg: cfg, out: out, devName: devName}
	s.cfg.emit = s.addResult
	defer func() {
		if err != nil {
			dp.teardown()
		}
	}()
	if err := s.preamble(mtu); err != nil {
		return nil, err
	}
	if err := s.cfg.fitUD(128 << s.mtu); err != nil {
		return nil, err
	}
	if s.local, err = dp.setup(&s.cfg); err != nil {
		return nil, err
	}
	s.peer = make([]Keys, len(s.local))
	if s.cfg.RDMACM {
		if err := s.connectCM(ctx); err != nil {
			return nil, err
		}
	}
	err = s.run(ctx)
	if terr := dp.checkTransport(); terr != nil {
		err = terr // what went wrong, whatever it looked like
	}
	return s.results, err
}

// session is the exchange's side of a run: perftest's sequence of steps
// for the test and the side, and the report.
type session struct {
	dp          dataPath
	conn        *Conn
	cfg         Config
	out         io.Writer
	devName     string
	mtu         int
	local, peer []Keys // per QP
	peerVersion string
	results     []Result
}

// preamble exchanges versions, system data and the MTU.
func (s *session) preamble(portMTU int) error {
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
		mtu = portMTU
	}
	if mtu > portMTU {
		// As perftest does: a requested MTU above the port's active MTU
		// runs at the active MTU, and says so.
		fmt.Fprintf(s.out, " Requested MTU %d is higher than the port's active MTU %d: running at %d\n",
			128<<mtu, 128<<portMTU, 128<<portMTU)
		mtu = portMTU
	}
	s.mtu, err = s.conn.MTU(mtu)
	return err
}

// connectCM connects the test's QPs through the CM (perftest -R): the
// server listens, both sync, the client connects every QP and the server
// accepts them, and both sync again. perftest's syncs carry its keys
// still zero.
func (s *session) connectCM(ctx context.Context) error {
	qps := s.dp.cmQPs()
	if len(qps) == 0 {
		return errors.New("perftest: -R: the data path has no QPs to connect")
	}
	reads := uint8(0)
	if s.cfg.Test.read() || s.cfg.Test.atomic() {
		reads = uint8(s.cfg.OutReads)
	}
	if s.conn.server {
		if err := s.conn.cm().listen(qps, reads); err != nil {
			return err
		}
	}
	if _, err := s.conn.Keys("sync before connecting through the CM", Keys{}, StepTimeout); err != nil {
		return err
	}
	if err := s.conn.cm().connectQPs(ctx, qps, reads, s.cfg.TOS); err != nil {
		return err
	}
	_, err := s.conn.Keys("sync after connecting through the CM", Keys{}, StepTimeout)
	return err
}

// keys runs one keys exchange, of QP 0's keys; the peer's keys must stay
// the same.
func (s *session) keys(step string, wait time.Duration) error { return s.keysOf(0, step, wait) }

// keysOf exchanges QP i's keys.
func (s *session) keysOf(i int, step string, wait time.Duration) error {
	k, err := s.conn.Keys(step, s.local[i], wait)
	if err != nil {
		return err
	}
	if s.peer[i] != (Keys{}) && k != s.peer[i] {
		return fmt.Errorf("%w: %s: the peer's keys changed (%v, was %v)", ErrPeer, step, &k, &s.peer[i])
	}
	s.peer[i] = k
	return nil
}

// keysEach exchanges every QP's keys in turn.
func (s *session) keysEach(step string) error {
	for i := range s.local {
		if err := s.keysOf(i, step, StepTimeout); err != nil {
			return err
		}
	}
	return nil
}

// run follows perftest's sequence for the test and the side.
func (s *session) run(ctx context.Context) error {
	t, server := s.cfg.Test, s.conn.Server()
	// Setup: a keys exchange per QP, the connection, another per QP and
	// one after RTR (the latency tests but send_lat begin with one more).
	if !t.BW() && t != SendLat {
		if err := s.keys("keys exchange", StepTimeout); err != nil {
			return err
		}
	}
	if err := s.keysEach("keys exchange"); err != nil {
		return err
	}
	s.printHeader()
	// A bandwidth server of WRITE, READ or atomics only answers: its QPs
	// stay in RTR, as perftest's do.
	passive := server && t.BW() && !t.send() && !s.cfg.Bidir
	if err := s.dp.connect(ctx, s.peer, s.mtu, !passive); err != nil {
		return err
	}
	// The setup's garbage is collected before the last exchanges, which
	// start both sides' runs together: a collection during the loop takes
	// a core from the spinning threads for its mark phase (the first
	// iterations of a latency run took 100-230 us each while one ran).
	runtime.GC()
	// Then a round per QP and one of QP 0's; the send tests have them
	// the other way round (the same on the wire with one QP).
	if t.send() {
		if err := s.keys("keys exchange after connecting", StepTimeout); err != nil {
			return err
		}
		if err := s.keysEach("keys exchange after RTR"); err != nil {
			return err
		}
	} else {
		if err := s.keysEach("keys exchange after connecting"); err != nil {
			return err
		}
		if err := s.keys("keys exchange after RTR", StepTimeout); err != nil {
			return err
		}
	}
	switch {
	case s.cfg.Bidir:
		return s.bidirBW(ctx, server)
	case t.BW() && !t.send():
		return s.oneSidedBW(ctx, server)
	case t.send():
		return s.sendTest(ctx, server)
	case t == WriteLat:
		// A ping-pong of WRITEs, with no closing exchange (as perftest).
		return s.measureSizes(ctx, server)
	default:
		return s.readLat(ctx, server)
	}
}

// measure runs one size while watching the connection, and prints and
// keeps its result.
func (s *session) measure(ctx context.Context, size int, server bool) error {
	var r Result
	var ok bool
	err := s.watch(ctx, func(ctx context.Context) error {
		var err error
		r, ok, err = s.dp.measure(ctx, size, server)
		return err
	})
	if err != nil {
		return err
	}
	if ok {
		s.addResult(r)
	}
	return nil
}

func (s *session) addResult(r Result) {
	s.results = append(s.results, r)
	if s.cfg.Test.BW() {
		s.printBW(&r)
	} else {
		s.printLat(&r)
	}
	if r.Lost > 0 {
		fmt.Fprintf(s.out, " Note: %d of the %d messages did not arrive (%v sends each once; the figures are of those that did)\n", r.Lost, r.Iters, s.cfg.Conn)
	}
}

// oneSidedBW: write_bw, read_bw, atomic_bw. The client runs every size,
// then syncs and sends its report; the server waits for that sync (the
// step itself fails at once if the client goes away), takes the report
// and prints it.
func (s *session) oneSidedBW(ctx context.Context, server bool) error {
	if server {
		if err := s.keys("keys exchange after the run", s.runWait()); err != nil {
			return err
		}
		rep, err := s.conn.Reports(Report{})
		if err != nil {
			return err
		}
		if err := s.dp.checkTransport(); err != nil {
			return err // the client's figures are of packets this side dropped
		}
		if sizes := s.cfg.sizes(); rep.Size != uint64(sizes[len(sizes)-1]) {
			return fmt.Errorf("%w: the client's last messages were %d bytes, this side's are %s: run both sides with the same -s and -a",
				ErrMismatch, rep.Size, s.cfg.sizesText())
		}
		if r, from := s.cfg.inOwnUnits(rep); from != "" {
			fmt.Fprintf(s.out, " Note: the client reports in %s (its --report_gbits differs from this side's): shown here in %s\n", from, s.cfg.units())
			rep = r
		}
		s.addResult(Result{Test: s.cfg.Test.String(), Role: "server", Bytes: int(rep.Size), Iters: int(rep.Iters),
			BWPeak: rep.PeakBW, BWAvg: rep.AvgBW, MsgRate: rep.MsgMpp, Units: s.cfg.units()})
		s.printFooter()
		return s.close(StepTimeout)
	}
	if err := s.measureSizes(ctx, false); err != nil {
		return err
	}
	if err := s.keys("keys exchange after the run", StepTimeout); err != nil {
		return err
	}
	last := s.results[len(s.results)-1]
	if _, err := s.conn.Reports(Report{Size: uint64(last.Bytes), Iters: uint64(last.Iters), PeakBW: last.BWPeak, AvgBW: last.BWAvg, MsgMpp: last.MsgRate}); err != nil {
		return err
	}
	return s.close(StepTimeout)
}

// bidirBW is perftest's -b (duplex) for write_bw, read_bw and send_bw:
// both sides send. Per size: send-bw's receives go up first; a sync; both
// run; with -a, write and read sync once more; each side then swaps its
// report with the peer's and prints their sum, the figure perftest
// prints on both sides. The exchange closes as the other tests' does.
func (s *session) bidirBW(ctx context.Context, server bool) error {
	send := s.cfg.Test.send()
	role := "client"
	if server {
		role = "server"
	}
	for _, size := range s.cfg.sizes() {
		if send {
			if err := s.dp.prepare(size); err != nil {
				return err
			}
		}
		if err := s.keys("keys exchange before the run", StepTimeout); err != nil {
			return err
		}
		var own Result
		err := s.watch(ctx, func(ctx context.Context) error {
			var err error
			own, err = s.dp.measureBidir(ctx, size)
			return err
		})
		if err != nil {
			return err
		}
		if s.cfg.All && !send {
			if err := s.keys("keys exchange after the run", StepTimeout); err != nil {
				return err
			}
		}
		peer, err := s.conn.Reports(Report{Size: uint64(own.Bytes), Iters: uint64(own.Iters), PeakBW: own.BWPeak, AvgBW: own.BWAvg, MsgMpp: own.MsgRate})
		if err != nil {
			return err
		}
		both := own
		both.Role = role
		both.BWPeak += peer.PeakBW
		both.BWAvg += peer.AvgBW
		both.MsgRate += peer.MsgMpp
		s.addResult(both)
		if s.cfg.All && send {
			if err := s.keys("keys exchange after the size", StepTimeout); err != nil {
				return err
			}
		}
	}
	s.printFooter()
	return s.close(StepTimeout)
}

// measureSizes runs every size and closes the table.
func (s *session) measureSizes(ctx context.Context, server bool) error {
	for _, size := range s.cfg.sizes() {
		if err := s.measure(ctx, size, server); err != nil {
			return s.accessHint(err, size)
		}
	}
	s.printFooter()
	return nil
}

// accessHint adds the likely causes to a remote access error of a WRITE,
// READ or atomic test: the peer runs another test (its region does not
// take this one's operation, Test.access), or its region, sized by its
// own -s (or -a), is smaller than this side's messages. perftest's
// exchange carries neither, so the peer's cannot be named.
func (s *session) accessHint(err error, size int) error {
	if errors.Is(err, verbs.WCRetryExcErr) {
		return fmt.Errorf("%w: the peer acknowledged nothing: does it run with the same -c (this side: -c %v)?", err, s.cfg.Conn)
	}
	if s.cfg.Test.send() || !errors.Is(err, verbs.WCRemAccessErr) {
		return err
	}
	return fmt.Errorf("%w: the peer's region refused a %d-byte %s: are both sides run with the same test, -s and -a?", err, size, s.cfg.Test)
}

// sendTest: send_bw and send_lat. Per size the receivers post their
// receives (send_bw's server; both sides of send_lat's ping-pong), both
// sync, and the run follows; each side prints its own report.
func (s *session) sendTest(ctx context.Context, server bool) error {
	for _, size := range s.cfg.sizes() {
		if server || s.cfg.Test == SendLat {
			if err := s.dp.prepare(size); err != nil {
				return err
			}
		}
		if err := s.keys("keys exchange before the run", StepTimeout); err != nil {
			return err
		}
		if err := s.measure(ctx, size, server); err != nil {
			return err
		}
	}
	s.printFooter()
	return s.close(StepTimeout)
}

// readLat: read_lat and atomic_lat. Only the client works; the server
// waits in the closing exchange (failing at once if the client goes
// away).
func (s *session) readLat(ctx context.Context, server bool) error {
	if server {
		return s.close(s.runWait())
	}
	if err := s.measureSizes(ctx, false); err != nil {
		return err
	}
	return s.close(StepTimeout)
}

// close ends the exchange: a last keys exchange (waiting for the peer's
// run when wait is long), then "done".
func (s *session) close(wait time.Duration) error {
	if err := s.keys("closing keys exchange", wait); err != nil {
		if errors.Is(err, errGone) {
			// The peer left within the closing step, the run over: as
			// perftest's peer does once its side of the exchange is
			// done, before this side's last message was acknowledged
			// (its ACK lost on a lossy path). The results stand.
			return nil
		}
		return err
	}
	return s.conn.Done()
}

// watch runs fn while watching the connection and what arrives: if the
// peer closes the connection, or packets of another transport arrive for
// the QPs, fn's context is cancelled (so a wait for completions ends) and
// the error says so.
func (s *session) watch(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	closed, ahead, stop := s.conn.Watch()
	s.dp.peerAhead(ahead)
	var why error
	gone := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(transportCheck)
		defer tick.Stop()
		for {
			select {
			case why = <-closed:
				gone = true
				cancel()
				return
			case <-tick.C:
				if why = s.dp.checkTransport(); why != nil {
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	err := fn(ctx)
	cancel()
	<-done
	stop()
	s.dp.peerAhead(nil)
	if why != nil && !(gone && err == nil) {
		// A peer that closed once the run had done all it waits for
		// (write_lat has no closing exchange: the side that sees its
		// last completion first leaves) did not cut the run short.
		return why
	}
	return err
}

// transportCheck is how often a run looks for packets of another
// transport than its own.
const transportCheck = 100 * time.Millisecond
