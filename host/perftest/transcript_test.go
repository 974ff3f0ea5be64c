package perftest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
)

// The transcripts in testdata are the TCP payloads of perftest 6.06 runs
// between two rdma_rxe hosts (../shared/testdata/rxe, extracted with
// tshark: one line per segment, C for the client's, S for the server's,
// in hex).
type tline struct {
	client bool
	b      []byte
}

func loadTranscript(t *testing.T, name string) []tline {
	t.Helper()
	f, err := os.Open("testdata/" + name + ".transcript")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []tline
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		side, h, ok := strings.Cut(sc.Text(), " ")
		b, err := hex.DecodeString(h)
		if !ok || err != nil || (side != "C" && side != "S") {
			t.Fatalf("%s: bad line %q", name, sc.Text())
		}
		lines = append(lines, tline{client: side == "C", b: b})
	}
	return lines
}

// replayPlane is a data path that moves nothing: it hands the exchange the
// keys and the result the recorded side had, so that what the exchange
// writes can be compared byte for byte with what perftest wrote.
type replayPlane struct {
	keys   Keys
	result Result
}

func (p *replayPlane) setup(*Config) ([]Keys, error)                    { return []Keys{p.keys}, nil }
func (p *replayPlane) connect(context.Context, []Keys, int, bool) error { return nil }
func (p *replayPlane) prepare(int) error                                { return nil }
func (p *replayPlane) teardown()                                        {}
func (p *replayPlane) cmQPs() []*verbs.QP                               { return nil }
func (p *replayPlane) peerAhead(<-chan struct{})                        {}
func (p *replayPlane) checkTransport() error                            { return nil }

func (p *replayPlane) measureBidir(ctx context.Context, size int) (Result, error) {
	r, _, err := p.measure(ctx, size, false)
	return r, err
}
func (p *replayPlane) measure(_ context.Context, size int, _ bool) (Result, bool, error) {
	r := p.result
	r.Bytes = size
	return r, true, nil
}

// replay plays the peer's side of a transcript on conn and checks every
// byte the side under test writes. skip names lines of the tested side
// not compared.
func replay(conn net.Conn, lines []tline, peerIsClient bool, skip func(i int) bool) error {
	for i, l := range lines {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if l.client == peerIsClient {
			if _, err := conn.Write(l.b); err != nil {
				if i == len(lines)-1 {
					return nil // a last "done" after the tested side has gone
				}
				return fmt.Errorf("line %d: write: %w", i+1, err)
			}
			continue
		}
		got := make([]byte, len(l.b))
		if _, err := io.ReadFull(conn, got); err != nil {
			return fmt.Errorf("line %d: read %d bytes: %w", i+1, len(l.b), err)
		}
		if !skip(i) && !bytes.Equal(got, l.b) {
			return fmt.Errorf("line %d: wrote %x (%q), perftest wrote %x (%q)", i+1, got, got, l.b, l.b)
		}
	}
	return nil
}

// TestTranscripts runs softrnic's side of the exchange, as client and as
// server, against the recorded other side of real perftest runs, and
// checks that it writes exactly what perftest wrote: versions, page and
// cache-line sizes, MTU, every keys message, the bandwidth report and
// "done", in the same order. The only bytes not compared are the server's
// five report fields, which perftest's server fills from uninitialised
// memory (softrnic sends zeros).
func TestTranscripts(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"write_bw_s2", Config{Test: WriteBW, Size: 2, Iters: 10}},
		{"read_bw_s2", Config{Test: ReadBW, Size: 2, Iters: 10}},
		{"send_bw_s2", Config{Test: SendBW, Size: 2, Iters: 10}},
		{"atomic_bw_cas", Config{Test: AtomicBW, Iters: 10, Atomic: CmpAndSwap}},
		{"atomic_bw_fadd", Config{Test: AtomicBW, Iters: 10, Atomic: FetchAndAdd}},
		{"write_lat", Config{Test: WriteLat, Iters: 10}},
		{"send_lat", Config{Test: SendLat, Iters: 10}},
		{"read_lat", Config{Test: ReadLat, Iters: 10}},
	} {
		lines := loadTranscript(t, tc.name)
		for _, role := range []string{"client", "server"} {
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				server := role == "server"
				p := &replayPlane{result: Result{Test: tc.cfg.Test.String(), Role: role, Iters: tc.cfg.Iters}}
				// The tested side's keys and, for a bandwidth client,
				// its report, as recorded.
				var reports []uint64
				for _, l := range lines {
					if l.client == server {
						continue
					}
					switch len(l.b) {
					case KeysLen:
						if p.keys == (Keys{}) {
							k, err := ParseKeys(l.b)
							if err != nil {
								t.Fatal(err)
							}
							p.keys = k
						}
					case 8:
						reports = append(reports, binary.BigEndian.Uint64(l.b))
					}
				}
				if len(reports) == 5 && !server {
					p.result.BWPeak, p.result.BWAvg, p.result.MsgRate = math.Float64frombits(reports[2]), math.Float64frombits(reports[3]), math.Float64frombits(reports[4])
				}
				a, b := tcpPair(t)
				peerErr := make(chan error, 1)
				go func() {
					peerErr <- replay(b, lines, server, func(i int) bool { return server && len(lines[i].b) == 8 })
				}()
				var out bytes.Buffer
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := run(ctx, p, 3, "rxe0", NewConn(a, server), tc.cfg, &out)
				a.Close()
				if perr := <-peerErr; perr != nil {
					t.Fatalf("the exchange differs from perftest's: %v\n%s", perr, out.String())
				}
				if err != nil {
					t.Fatalf("run: %v\n%s", err, out.String())
				}
			})
		}
	}
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestCloseWithoutDone: perftest after 6.2x closes after the last keys
// exchange without writing "done"; the run still ends well.
func TestCloseWithoutDone(t *testing.T) {
	lines := loadTranscript(t, "write_bw_s2")
	var kept []tline
	var keys Keys
	for _, l := range lines {
		if !l.client && string(l.b) == "done\x00" {
			continue
		}
		if l.client && len(l.b) == KeysLen && keys == (Keys{}) {
			keys, _ = ParseKeys(l.b)
		}
		kept = append(kept, l)
	}
	a, b := tcpPair(t)
	peerErr := make(chan error, 1)
	go func() {
		err := replay(b, kept, false, func(i int) bool { return len(kept[i].b) == 8 })
		b.Close()
		peerErr <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := &replayPlane{keys: keys, result: Result{Iters: 10}}
	if _, err := run(ctx, p, 3, "rxe0", NewConn(a, false), Config{Test: WriteBW, Size: 2, Iters: 10}, nil); err != nil {
		t.Fatalf("run: %v", err)
	}
	if err := <-peerErr; err != nil {
		t.Fatal(err)
	}
}
