package perftest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
)

// runWriteLat runs write_lat: each side writes a message into the
// other's buffer, its last byte counting the iterations, and waits until
// the peer's message has counted as far in its own buffer. The server
// writes first. No closing exchange follows, as in perftest.
func (s *session) runWriteLat(ctx context.Context, server bool) error {
	return s.watch(ctx, func(ctx context.Context) error {
		for _, size := range s.cfg.sizes() {
			n := s.cfg.Iters
			s.ensureTimes(n)
			post, poll := size-1, s.half+size-1
			seen := s.placed0
			scnt, rcnt := 0, 0
			for scnt < n || rcnt < n {
				if rcnt < n && !(scnt < 1 && server) {
					rcnt++
					var err error
					if seen, err = s.waitByte(ctx, poll, byte(rcnt), seen); err != nil {
						return fmt.Errorf("perftest: waiting for the peer's write %d of %d: %w", rcnt, n, err)
					}
				}
				if scnt < n {
					s.tposted[scnt] = time.Now()
					scnt++
					s.buf[post] = byte(scnt)
					wr := verbs.SendWR{WRID: uint64(scnt), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
						SGL:        []verbs.SGE{{Addr: s.mr.Addr, Length: uint32(size), LKey: s.mr.LKey}},
						RemoteAddr: s.peer.VAddr, RKey: s.peer.RKey}
					if size <= maxInline {
						wr.Flags |= verbs.SendInline
					}
					if _, err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
						return fmt.Errorf("perftest: post write: %w", err)
					}
					if _, err := s.poll(ctx, s.scq); err != nil {
						return err
					}
				}
			}
			s.latResult(size, n, 2)
		}
		s.printFooter()
		return nil
	})
}

// waitByte waits until the peer's WRITE has set buf[off] to want. It
// reads the buffer only after the device's count of placed WRITEs has
// moved past seen, and returns the count it read.
// It spins a little (the answer is usually there within microseconds),
// then sleeps until the device places a WRITE: on a machine with few
// cores a spinning poller would take the CPU the NIC's engine needs.
func (s *session) waitByte(ctx context.Context, off int, want byte, seen uint64) (uint64, error) {
	for spin := 0; ; spin++ {
		if cur := s.env.Dev.WritesPlaced(); cur != seen {
			seen = cur
			if s.buf[off] == want {
				return seen, nil
			}
		}
		if spin < 64 {
			runtime.Gosched()
			continue
		}
		cur, err := s.env.Dev.WaitWritesPlaced(ctx, seen)
		if err != nil {
			return seen, err
		}
		if cur != seen {
			seen = cur
			if s.buf[off] == want {
				return seen, nil
			}
		}
	}
}

// runSendLat runs send_lat: both sides post receives and sync; the client
// sends first; each answers every message it receives with one of its own.
func (s *session) runSendLat(ctx context.Context, server bool) error {
	for _, size := range s.cfg.sizes() {
		n := s.cfg.Iters
		s.ensureTimes(n)
		for k := range s.cfg.RxDepth {
			if err := s.postRecv(uint64(k), size, 0); err != nil {
				return err
			}
		}
		if err := s.keys("keys exchange before the run", StepTimeout); err != nil {
			return err
		}
		err := s.watch(ctx, func(ctx context.Context) error {
			scnt, rcnt := 0, 0
			for scnt < n || rcnt < n {
				if rcnt < n && !(scnt < 1 && !server) {
					wcs, err := s.poll(ctx, s.rcq)
					if err != nil {
						return err
					}
					for range wcs {
						rcnt++
						if rcnt+s.cfg.RxDepth <= n {
							if err := s.postRecv(uint64(rcnt), size, 0); err != nil {
								return err
							}
						}
					}
				}
				if scnt < n {
					s.tposted[scnt] = time.Now()
					scnt++
					wr := verbs.SendWR{WRID: uint64(scnt), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
						SGL: []verbs.SGE{{Addr: s.mr.Addr, Length: uint32(size), LKey: s.mr.LKey}}}
					if size <= maxInline {
						wr.Flags |= verbs.SendInline
					}
					if _, err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
						return fmt.Errorf("perftest: post send: %w", err)
					}
					if _, err := s.poll(ctx, s.scq); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		s.latResult(size, n, 2)
	}
	s.printFooter()
	return s.close(StepTimeout)
}

// runReadLat runs read_lat and atomic_lat: the client issues one READ or
// atomic at a time to the server's buffer and waits for it; the server's
// NIC answers while the server waits in the closing exchange.
func (s *session) runReadLat(ctx context.Context, server bool) error {
	if server {
		return s.close(runWait) // waits for the client's run, or fails at once if it goes away
	}
	op := verbs.WRRDMARead
	switch {
	case s.cfg.Test.atomic() && s.cfg.Atomic == CmpAndSwap:
		op = verbs.WRAtomicCmpAndSwp
	case s.cfg.Test.atomic():
		op = verbs.WRAtomicFetchAdd
	}
	err := s.watch(ctx, func(ctx context.Context) error {
		for _, size := range s.cfg.sizes() {
			n := s.cfg.Iters
			s.ensureTimes(n)
			for k := range n {
				wr := verbs.SendWR{WRID: uint64(k), Opcode: op, Flags: verbs.SendSignaled,
					SGL:        []verbs.SGE{{Addr: s.mr.Addr, Length: uint32(size), LKey: s.mr.LKey}},
					RemoteAddr: s.peer.VAddr, RKey: s.peer.RKey}
				if op == verbs.WRAtomicFetchAdd {
					wr.CompareAdd = 1
				}
				s.tposted[k] = time.Now()
				if _, err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
					return fmt.Errorf("perftest: post: %w", err)
				}
				if _, err := s.poll(ctx, s.scq); err != nil {
					return err
				}
			}
			s.latResult(size, n, 1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.printFooter()
	return s.close(StepTimeout)
}

func (s *session) ensureTimes(n int) {
	if cap(s.tposted) < n {
		s.tposted, s.tdone = make([]time.Time, n), make([]time.Time, n)
	}
}

// latTail is how many of the largest samples perftest leaves out.
const latTail = 2

// latResult computes perftest's latency figures from the times each
// iteration was posted: the samples are the gaps between consecutive
// posts, halved for ping-pong tests (a half round trip); the largest two
// are left out; percentiles come from an HDR histogram of the rest.
func (s *session) latResult(size, n, div int) {
	samples := make([]time.Duration, 0, n-1)
	for i := range n - 1 {
		samples = append(samples, s.tposted[i+1].Sub(s.tposted[i])/time.Duration(div))
	}
	slices.Sort(samples)
	if len(samples) > latTail {
		samples = samples[:len(samples)-latTail]
	}
	h := NewHistogram()
	var sum float64
	for _, d := range samples {
		h.Record(uint64(max(d, 0)))
		sum += float64(d)
	}
	us := func(ns float64) float64 { return ns / 1e3 }
	m := len(samples)
	median := float64(samples[m/2])
	if m%2 == 0 {
		median = (float64(samples[m/2-1]) + float64(samples[m/2])) / 2
	}
	r := Result{Test: s.cfg.Test.String(), Role: "client", Bytes: size, Iters: n,
		TMin: us(float64(samples[0])), TMax: us(float64(samples[m-1])), TTypical: us(median),
		TAvg: us(sum / float64(m)), TStdev: us(h.StdDev()),
		P99: us(float64(h.Percentile(99))), P999: us(float64(h.Percentile(99.9)))}
	if s.conn.Server() {
		r.Role = "server"
	}
	s.results = append(s.results, r)
	s.printLat(&r)
}
