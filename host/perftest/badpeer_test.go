package perftest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
)

// TestBadPeers: a TCP peer that breaks the exchange gets a clear error,
// naming the step, within 5 seconds, and the QP is torn down (reset).
func TestBadPeers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server bool // the side under test
		cfg    Config
		peer   func(c *Conn) // the bad peer, on the other end
		want   string        // in the error
	}{
		{"wrong version", true, Config{Test: WriteBW, Iters: 10}, func(c *Conn) {
			c.raw().Write([]byte("5.10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
			time.Sleep(time.Second)
		}, "version exchange: version 5.10 is older than 5.70"},
		{"garbage version", false, Config{Test: WriteBW, Iters: 10}, func(c *Conn) {
			var b [16]byte
			c.raw().Read(b[:])
			c.raw().Write([]byte("GET / HTTP/1.1\r\n"))
			time.Sleep(time.Second)
		}, "version exchange"},
		{"truncated keys", true, Config{Test: WriteBW, Iters: 10}, func(c *Conn) {
			preamble(c)
			k := (&Keys{QPN: 5, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}}).Marshal()
			c.raw().Write(k[:50])
			time.Sleep(6 * time.Second) // and says no more
		}, "keys exchange: no answer within"},
		{"truncated keys, then close", false, Config{Test: SendLat, Iters: 10}, func(c *Conn) {
			preamble(c)
			var b [KeysLen]byte
			c.raw().Read(b[:])
			c.raw().Write(b[:30])
		}, "keys exchange: the peer closed the connection"},
		{"malformed keys", true, Config{Test: ReadLat, Iters: 10}, func(c *Conn) {
			preamble(c)
			b := []byte(sampleKeys)
			b[20] = 'z'
			c.raw().Write(b)
			time.Sleep(time.Second)
		}, "keys exchange: malformed keys message: PSN"},
		{"closes mid-run (server waiting)", true, Config{Test: WriteBW, Iters: 10}, func(c *Conn) {
			preamble(c)
			setup(c, 3)
		}, "keys exchange after the run: the peer closed the connection"},
		{"closes mid-run (client waiting for a write)", false, Config{Test: WriteLat, Iters: 10}, func(c *Conn) {
			preamble(c)
			setup(c, 4)
		}, "the peer closed the connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := pairEnv(t)
			a, b := tcpPair(t)
			go func() {
				tc.peer(NewConn(b, !tc.server))
				b.Close()
			}()
			dp := &rdma{env: env}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err := run(ctx, dp, 3, "softrnic0", NewConn(a, tc.server), tc.cfg, nil)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if took > 5*time.Second {
				t.Errorf("the error took %v", took)
			}
			for _, qp := range dp.qps {
				if qp.State() != verbs.QPSReset {
					t.Errorf("QP %d left in %v, want RESET", qp.Num, qp.State())
				}
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}

// preamble plays a well-behaved peer's versions, sizes and MTU.
func preamble(c *Conn) {
	c.Versions()
	c.SysData(4096, 64)
	c.MTU(3)
}

// setup plays n well-behaved keys exchanges with keys of a peer that
// exists nowhere, then returns (and the caller closes the connection).
func setup(c *Conn, n int) {
	k := Keys{QPN: 0x77, PSN: 1, RKey: 0x100, VAddr: 0x1000, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 47, 15: 2}}
	for range n {
		if _, err := c.Keys("keys exchange", k, StepTimeout); err != nil {
			return
		}
	}
}

// raw is the TCP connection under an exchange, for a peer that misbehaves.
func (c *Conn) raw() net.Conn { return c.l.(*tcpLink).c }

// TestSlowPeerSetup: a peer whose answer begins late (perftest
// registering its buffers between two steps, slowly in an emulated
// guest) is waited for; one that stops in the middle of an answer is an
// error within the step's time.
func TestSlowPeerSetup(t *testing.T) {
	a, b := tcpPair(t)
	l := &tcpLink{c: a}
	const wait = 50 * time.Millisecond
	go func() {
		time.Sleep(4 * wait) // begins late
		b.Write([]byte("0123456789"))
		b.Write([]byte("ab")) // then stops in the middle of the next
	}()
	buf := make([]byte, 10)
	if err := l.recv(buf, wait); err != nil || string(buf) != "0123456789" {
		t.Fatalf("an answer that began late: %q, %v", buf, err)
	}
	start := time.Now()
	err := l.recv(buf, wait)
	if err == nil || !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Fatalf("an answer cut short: %v, want no answer within 50ms", err)
	}
	if took := time.Since(start); took > 20*wait {
		t.Errorf("the error took %v", took)
	}
}
