package perftest

import (
	"fmt"
	"strings"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
)

// Test is one of perftest's tests.
type Test int

// The tests, as `softrnic perf` names them.
const (
	SendBW Test = iota
	WriteBW
	ReadBW
	AtomicBW
	SendLat
	WriteLat
	ReadLat
	AtomicLat
)

var testNames = [...]string{"send-bw", "write-bw", "read-bw", "atomic-bw", "send-lat", "write-lat", "read-lat", "atomic-lat"}

// perftest's own titles.
var testTitles = [...]string{"Send BW Test", "RDMA_Write BW Test", "RDMA_Read BW Test", "Atomic %s BW Test",
	"Send Latency Test", "RDMA_Write Latency Test", "RDMA_Read Latency Test", "Atomic %s Latency Test"}

func (t Test) String() string { return testNames[t] }

// ParseTest maps a name (send-bw … atomic-lat) to its test.
func ParseTest(name string) (Test, error) {
	for i, n := range testNames {
		if n == name {
			return Test(i), nil
		}
	}
	return 0, fmt.Errorf("perftest: unknown test %q (want one of %v)", name, testNames)
}

// BW reports whether t is a bandwidth test.
func (t Test) BW() bool { return t <= AtomicBW }

func (t Test) verb() Test {
	if t.BW() {
		return t
	}
	return t - SendLat
}

func (t Test) atomic() bool { return t.verb() == AtomicBW }
func (t Test) read() bool   { return t.verb() == ReadBW }
func (t Test) send() bool   { return t.verb() == SendBW }

// Atomic operations for -A.
const (
	CmpAndSwap  = "CMP_AND_SWAP"
	FetchAndAdd = "FETCH_AND_ADD"
)

// Config is a run's parameters, named and defaulted as perftest's flags.
// A zero field takes perftest's default. For Size that means 0 cannot ask
// for zero-byte messages: it is the default size, and a negative size is
// refused. A command line that takes -s must itself refuse an explicit
// -s 0 (softrnic perf does) rather than pass it on as the default.
type Config struct {
	Test     Test
	Size     int           // -s: bytes per message, 1..MaxSize; 0 is the default (bw 65536, lat 2; atomics 8)
	Iters    int           // -n: iterations (write-bw 5000, others 1000; at least 5)
	All      bool          // -a: every size from 2 to 8 MiB
	Duration time.Duration // -D: run for this long instead of -n iterations, measuring between a warm-up and a cool-down of a quarter each (whole seconds)
	MTU      int           // -m: ibv_mtu enum (1..5); 0 takes the port's
	TxDepth  int           // -t: outstanding sends (bw 128, lat 1)
	RxDepth  int           // -r: posted receives (send tests: 512)
	CQMod    int           // -Q: completions signalled every CQMod sends (bw 100; 1 above 8 KiB)
	OutReads int           // -o: READs/atomics outstanding (the device's maximum)
	Atomic   string        // -A: CMP_AND_SWAP or FETCH_AND_ADD
	Gbits    bool          // --report_gbits
	QPs      int           // -q: QPs (bandwidth tests), each its own message stream
	Bidir    bool          // -b: both sides send (send-bw, write-bw, read-bw); each prints the sum of both
	// SR (--sr, softrnic's own) asks for selective repeat; it is used
	// only when the peer asks too (a softrnic perf --sr peer: the keys
	// exchange carries it in the SRQN field, which RC ignores).
	SR bool
	// Samples keeps every iteration's latency in the Result (latency
	// tests; softrnic perf --latency-log).
	Samples bool
	// RDMACM (-R) connects the test's QPs through the CM, as perftest -R
	// does; the run's Conn must then be one from DialCM or AcceptCM.
	RDMACM bool
	// Conn (-c) is the QPs' transport: RC (0 is RC too), UC for the send
	// and write tests, UD for the send tests, as perftest allows. Both
	// sides must run the same: perftest's exchange does not carry it, so
	// a side sees the peer's other transport only in what arrives (a
	// run stops with ErrTransport).
	Conn verbs.QPType
	// Inline (-I) is the most bytes a send carries inline (0: perftest's
	// default, 236 for the latency tests' sends and writes, none for the
	// bandwidth tests; at most verbs.MaxInlineData).
	Inline int
	// PostList (-l) posts the bandwidth tests' work requests in lists of
	// this many (0: as many as the send queue has room for).
	PostList int
	// Timeout (-u) is the RC QPs' local ACK timeout exponent (0: 14).
	Timeout uint8
	// TOS (-T, with -R) is the test QPs' traffic class, set as rdma_cm's
	// TOS on the client's connections (the server's QPs take the REQ's):
	// the IP header's DSCP is its upper six bits.
	TOS uint8
	// Events (-e) waits for completions by sleeping on the CQ instead of
	// busy-polling it.
	Events bool

	// Unsorted (-U) and Histogram (-H) print a latency test's samples
	// before its row: in the order taken, and sorted without the two
	// largest, as perftest's "#, usec" lists.
	Unsorted, Histogram bool
	// NoPeak (-N) leaves the bandwidth peak out (0.00).
	NoPeak bool
	// Infinite (--run_infinitely) runs a bandwidth test until it is
	// stopped, printing a row for every Duration (default 5 s).
	Infinite bool
	// CPUUtil (--cpu_util) adds the machine's CPU use over the sample to
	// a timed (-D) bandwidth row, as perftest reads it from /proc/stat.
	CPUUtil bool
	// WarmUp (--perform_warm_up) sends a send queue's worth on every QP
	// before each measured WRITE, READ or atomic bandwidth run.
	WarmUp bool

	maxSize     int          // the largest size -a runs (UD: the path MTU); 0 is MaxSize
	sizeDefault bool         // Size was left to its default
	emit        func(Result) // prints a row as it comes (--run_infinitely)
}

// SelectiveRepeatFlag is the SRQN bit of a keys message by which a
// softrnic peer asks for selective repeat; perftest leaves the field 0 on
// RC QPs and ignores the peer's.
const SelectiveRepeatFlag = 1 << 31

// MaxSize is the largest message perftest sends (with -a, the last size).
const MaxSize = 8 << 20

// maxQPs bounds -q: what a device can be opened with (the device itself
// refuses QPs beyond its MaxQPs).
const maxQPs = 16384

// maxOutReads is what softrnic's responder keeps answers for, per QP.
const maxOutReads = 16

// Check reports whether the configuration can run, as Run would.
func (c Config) Check() error { return c.setDefaults() }

// WithDefaults returns the configuration as Run runs it, every zero field
// replaced by perftest's default (Size 0 by 65536 for the bandwidth tests,
// 2 for the latency tests, 8 for the atomics), or Check's error.
func (c Config) WithDefaults() (Config, error) {
	err := c.setDefaults()
	return c, err
}

func (c *Config) setDefaults() error {
	t := c.Test
	c.sizeDefault = c.sizeDefault || c.Size == 0
	switch {
	case t.atomic():
		if c.Size != 0 && c.Size != 8 {
			return fmt.Errorf("perftest: atomic tests move 8 bytes, not -s %d", c.Size)
		}
		c.Size = 8
	case c.Size == 0 && t.BW():
		c.Size = 65536
	case c.Size == 0:
		c.Size = 2
	}
	if c.Size < 1 || c.Size > MaxSize {
		return fmt.Errorf("perftest: size %d out of range 1..%d", c.Size, MaxSize)
	}
	if c.All && t.atomic() {
		return fmt.Errorf("perftest: -a does not apply to atomic tests")
	}
	if c.All && c.Duration > 0 {
		return fmt.Errorf("perftest: -a and -D do not go together")
	}
	if c.Iters == 0 {
		c.Iters = 1000
		if t == WriteBW {
			c.Iters = 5000
		}
	}
	if c.Iters < 5 {
		return fmt.Errorf("perftest: at least 5 iterations, not %d", c.Iters)
	}
	if c.Infinite {
		switch {
		case !t.BW():
			return fmt.Errorf("perftest: --run_infinitely is for the bandwidth tests")
		case c.All || c.Bidir || c.Events:
			return fmt.Errorf("perftest: --run_infinitely runs one size one way, without -a, -b or -e")
		case c.Duration == 0:
			c.Duration = 5 * time.Second // the period of its rows
		}
		c.NoPeak = true
	}
	if c.Duration > 0 && c.Duration < time.Second {
		return fmt.Errorf("perftest: -D is at least a second")
	}
	if (c.Unsorted || c.Histogram) && t.BW() {
		return fmt.Errorf("perftest: -U and -H are for the latency tests")
	}
	if c.Unsorted || c.Histogram {
		c.Samples = true
	}
	if c.Bidir && (!c.Test.BW() || c.Test.atomic()) {
		return fmt.Errorf("perftest: -b is for send-bw, write-bw and read-bw")
	}
	if c.Bidir && c.Duration > 0 {
		return fmt.Errorf("perftest: -b and -D do not go together here")
	}
	if c.QPs == 0 {
		c.QPs = 1
	}
	if c.QPs < 1 || c.QPs > maxQPs {
		return fmt.Errorf("perftest: -q %d: from 1 to %d QPs", c.QPs, maxQPs)
	}
	if c.QPs > 1 && !c.Test.BW() {
		return fmt.Errorf("perftest: -q %d: latency tests run one QP", c.QPs)
	}
	if c.TxDepth == 0 {
		c.TxDepth = 1
		if t.BW() {
			c.TxDepth = 128
		}
	}
	if c.RxDepth == 0 {
		c.RxDepth = 1
		if t.send() {
			c.RxDepth = 512
		}
	}
	if c.Duration == 0 { // no deeper than the run is long
		c.TxDepth, c.RxDepth = min(c.TxDepth, c.Iters), min(c.RxDepth, c.Iters)
	}
	if err := c.checkPostList(); err != nil {
		return err
	}
	if c.CQMod == 0 {
		c.CQMod = 100
		if c.Size > 8192 || !t.BW() {
			c.CQMod = 1
		}
	}
	c.CQMod = max(1, min(c.CQMod, c.TxDepth))
	if c.OutReads <= 0 || c.OutReads > maxOutReads {
		c.OutReads = maxOutReads
	}
	if c.Atomic == "" {
		c.Atomic = FetchAndAdd
	}
	if c.Atomic != CmpAndSwap && c.Atomic != FetchAndAdd {
		return fmt.Errorf("perftest: -A %q: want %s or %s", c.Atomic, CmpAndSwap, FetchAndAdd)
	}
	if c.RDMACM && c.SR {
		return fmt.Errorf("perftest: --sr is agreed in the keys exchange, which does not connect the QPs under -R")
	}
	if c.MTU < 0 || c.MTU > 5 {
		return fmt.Errorf("perftest: MTU enum %d out of range 1..5", c.MTU)
	}
	if err := c.checkConn(); err != nil {
		return err
	}
	if c.Inline < 0 || c.Inline > verbs.MaxInlineData {
		return fmt.Errorf("perftest: -I %d: inline data is 0..%d bytes", c.Inline, verbs.MaxInlineData)
	}
	if c.Inline > 0 && (t.read() || t.atomic()) {
		return fmt.Errorf("perftest: -I: inline data is for sends and writes, not %s", t)
	}
	if c.Inline == 0 && !t.BW() {
		switch {
		case t == WriteLat:
			c.Inline = defaultInlineWriteLat
		case t.send() && c.Conn == verbs.QPTUD:
			c.Inline = defaultInlineUDSendLat
		case t.send():
			c.Inline = defaultInlineSendLat
		}
	}
	if c.Events && t.verb() == WriteBW {
		return fmt.Errorf("perftest: -e: a WRITE test's server sees no completions to wait for (perftest refuses it too)")
	}
	if c.Events && c.Duration > 0 {
		return fmt.Errorf("perftest: -e and -D do not go together (as in perftest)")
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.TOS != 0 && !c.RDMACM {
		return fmt.Errorf("perftest: -T: a type of service is rdma_cm's, for -R (as in perftest)")
	}
	if c.Timeout > 31 {
		return fmt.Errorf("perftest: -u %d: a QP timeout exponent is 0..31", c.Timeout)
	}
	return nil
}

// perftest's defaults for -I (latency tests; the bandwidth tests send
// nothing inline unless asked) and -u.
const (
	defaultInlineWriteLat  = 220
	defaultInlineSendLat   = 236
	defaultInlineUDSendLat = 188
	defaultTimeout         = 14
)

// checkPostList checks -l as perftest does: bandwidth tests only, whole
// lists of iterations, a list the send queue holds; the completions are
// signalled once a list unless -Q says otherwise, and then a list holds
// whole moderation periods. It runs before CQMod takes its default.
func (c *Config) checkPostList() error {
	if c.PostList == 0 {
		return nil
	}
	switch {
	case c.PostList < 0 || c.PostList > c.TxDepth:
		return fmt.Errorf("perftest: -l %d: a post list is 1..%d (the send queue depth, -t)", c.PostList, c.TxDepth)
	case !c.Test.BW():
		return fmt.Errorf("perftest: -l is for the bandwidth tests")
	case c.Duration == 0 && c.Iters%c.PostList != 0:
		return fmt.Errorf("perftest: -l %d: the iterations (-n %d) must be a multiple of the post list", c.PostList, c.Iters)
	case c.CQMod == 0:
		c.CQMod = c.PostList
	case c.PostList%c.CQMod != 0:
		return fmt.Errorf("perftest: -l %d: the post list must be a multiple of -Q %d", c.PostList, c.CQMod)
	}
	return nil
}

// checkConn checks -c against the test, as perftest does: RC runs every
// test, UC the send and write tests, UD the send tests.
func (c *Config) checkConn() error {
	if c.Conn == 0 {
		c.Conn = verbs.QPTRC
	}
	switch c.Conn {
	case verbs.QPTRC:
		return nil
	case verbs.QPTUC:
		if !c.Test.send() && c.Test.verb() != WriteBW {
			return fmt.Errorf("perftest: -c UC runs the send and write tests, not %s (RC only)", c.Test)
		}
	case verbs.QPTUD:
		if !c.Test.send() {
			return fmt.Errorf("perftest: -c UD runs the send tests, not %s", c.Test)
		}
	default:
		return fmt.Errorf("perftest: -c %v: softrnic runs RC, UC and UD", c.Conn)
	}
	switch {
	case c.RDMACM:
		return fmt.Errorf("perftest: -c %v with -R: the connection manager connects RC QPs here; leave -R out", c.Conn)
	case c.SR:
		return fmt.Errorf("perftest: --sr is for RC: a %v QP recovers no losses", c.Conn)
	}
	return nil
}

// ParseConn maps perftest's -c names (RC, UC, UD, any case) to a
// transport.
func ParseConn(name string) (verbs.QPType, error) {
	for _, t := range []verbs.QPType{verbs.QPTRC, verbs.QPTUC, verbs.QPTUD} {
		if strings.EqualFold(name, t.String()) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("perftest: -c %q: want RC, UC or UD (softrnic runs no XRC, DC or SRD)", name)
}

// reliable reports whether the run's transport acknowledges every message.
func (c *Config) reliable() bool { return c.Conn == 0 || c.Conn == verbs.QPTRC }

// fitUD fits a UD run to the path MTU of mtu bytes: a datagram is one
// packet, so a larger -s is refused, the default size is cut to the MTU,
// and -a stops at the MTU.
func (c *Config) fitUD(mtu int) error {
	if c.Conn != verbs.QPTUD {
		return nil
	}
	if c.sizeDefault {
		c.Size = min(c.Size, mtu) // as perftest: the default size is cut to the MTU
	}
	if !c.All && c.Size > mtu {
		return fmt.Errorf("perftest: -c UD: a message is at most the path MTU, %d bytes, not -s %d", mtu, c.Size)
	}
	c.maxSize = mtu
	return nil
}

// sizes are the message sizes of the run.
func (c *Config) sizes() []int {
	if !c.All {
		return []int{c.Size}
	}
	top := MaxSize
	if c.maxSize > 0 {
		top = c.maxSize
	}
	var s []int
	for b := 2; b <= top; b *= 2 {
		s = append(s, b)
	}
	return s
}

// sizesText names the run's sizes as a message says them: "-s 4096",
// or "-a (2 to 8388608)".
func (c *Config) sizesText() string {
	if !c.All {
		return fmt.Sprintf("%d (-s %d)", c.Size, c.Size)
	}
	s := c.sizes()
	return fmt.Sprintf("%d to %d (-a)", s[0], s[len(s)-1])
}

// checkLen reports a received message of another length than the run's
// size: the peer runs another -s or -a. A UD message comes after its
// GRH.
func (c *Config) checkLen(got uint32, size int) error {
	if c.Conn == verbs.QPTUD {
		got -= min(got, grhLen)
	}
	if int(got) == size {
		return nil
	}
	return fmt.Errorf("%w: a %d-byte message arrived where this side runs %s: run both sides with the same -s and -a", ErrMismatch, got, c.sizesTextAt(size))
}

// sizesTextAt is sizesText, naming the size under way with -a.
func (c *Config) sizesTextAt(size int) string {
	if !c.All {
		return c.sizesText()
	}
	return fmt.Sprintf("%d now, of %s", size, c.sizesText())
}

// bufSize is the size of each half of the buffer (send and receive),
// perftest's BUFF_SIZE: at least a page, the cycle through which small
// messages move.
func (c *Config) bufSize() int {
	m := c.Size
	if c.All {
		m = MaxSize
	}
	return max(m, cycleBuffer)
}

const (
	cycleBuffer = 4096 // page size, the window small messages cycle through
	cacheLine   = 64
)
