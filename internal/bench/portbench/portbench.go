// Package portbench measures how fast frames cross a veth pair between two
// network namespaces through each way softrnic can reach the wire, side by
// side in one run:
//
//	xsk         the AF_XDP port (datapath/xsk), XDP program attached
//	udp port    the kernel-UDP port (datapath/udpport)
//	kernel UDP  plain UDP sockets with sendmmsg/recvmmsg batches, the baseline
//	kernel UDP GSO  sends of up to 64 datagrams each (UDP_SEGMENT, each
//	            segment one whole RoCEv2 packet), four to a sendmmsg call,
//	            into a socket with UDP_GRO read with recvmmsg: the kernel's
//	            per-call cost paid once for many packets
//	iperf3 TCP  a TCP stream, for scale (bytes only: TCP has no frames of ours)
//
// One side sends RoCEv2 RDMA WRITE ONLY frames of a given payload as fast as
// it can for a fixed time; the other side counts what it receives.
package portbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/xsk"
	"github.com/softrnic/softrnic/internal/topo"
)

// Methods, in the order results are printed.
const (
	XSK       = "xsk"
	UDPPort   = "udp port"
	KernelUDP = "kernel UDP"
	UDPGSO    = "kernel UDP GSO"
	IPerf3    = "iperf3 TCP"
)

// Config is one benchmark run.
type Config struct {
	Payloads []int         // IB payload sizes (default 64, 1024, 4096)
	Duration time.Duration // per measurement (default 2s)
	Warmup   time.Duration // before each measurement (default 200ms)
	Batch    int           // frames per batch (default 64)
	Methods  []string      // default all
	MTU      int           // veth MTU (default 9000)

	// Progress, if not nil, is called before each measurement: how many
	// are done, of how many, and the one starting.
	Progress func(done, total int, step string)
}

// Result is one measurement.
type Result struct {
	Method    string
	Payload   int
	Frames    uint64 // received during the measurement; 0 for iperf3
	Bytes     uint64 // payload bytes received
	Elapsed   time.Duration
	Err       error
	Allocs    float64 // heap allocations per frame on the sender and receiver loops
	FrameSize int     // bytes on the wire, Ethernet header to ICRC
}

// PPS is received frames per second.
func (r Result) PPS() float64 { return float64(r.Frames) / r.Elapsed.Seconds() }

// Gbps is received payload in Gbit/s.
func (r Result) Gbps() float64 { return float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e9 }

func (c *Config) defaults() {
	if len(c.Payloads) == 0 {
		c.Payloads = []int{64, 1024, 4096}
	}
	if c.Duration == 0 {
		c.Duration = 2 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = 200 * time.Millisecond
	}
	if c.Batch == 0 {
		c.Batch = 64
	}
	if len(c.Methods) == 0 {
		c.Methods = []string{XSK, UDPPort, KernelUDP, UDPGSO, IPerf3}
	}
	if c.MTU == 0 {
		c.MTU = 9000
	}
}

// Run builds the veth pair and runs every method at every payload size.
//
// After the per-size rows comes one "iperf3 TCP stream" row: TCP with
// iperf3's default 128 KiB writes, plain TCP at its best on the link.
func Run(cfg Config) ([]Result, error) {
	cfg.defaults()
	spec := topo.PairSpec(cfg.MTU, 1)
	t, err := topo.Build(spec)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	b := &bench{cfg: cfg, a: t.NS("a"), b: t.NS("b"), spec: spec}
	var results []Result
	total := len(cfg.Payloads) * len(cfg.Methods)
	if slices.Contains(cfg.Methods, IPerf3) {
		total++
	}
	for _, size := range cfg.Payloads {
		for _, m := range cfg.Methods {
			if cfg.Progress != nil {
				cfg.Progress(len(results), total, fmt.Sprintf("%s, %d-byte payloads", m, size))
			}
			r := Result{Method: m, Payload: size}
			switch m {
			case XSK:
				r = b.runPorts(r, b.openXSK)
			case UDPPort:
				r = b.runPorts(r, b.openUDP)
			case KernelUDP:
				r = b.runKernelUDP(r)
			case UDPGSO:
				r = b.runUDPGSO(r)
			case IPerf3:
				r = b.runIPerf3(r)
			default:
				r.Err = fmt.Errorf("unknown method %q", m)
			}
			results = append(results, r)
		}
	}
	if slices.Contains(cfg.Methods, IPerf3) {
		if cfg.Progress != nil {
			cfg.Progress(len(results), total, IPerf3+" stream")
		}
		results = append(results, b.runIPerf3(Result{Method: IPerf3 + " stream"}))
	}
	return results, nil
}

type bench struct {
	cfg  Config
	a, b *topo.Namespace
	spec topo.Spec
}

// frame returns the RoCEv2 frame a sends: headers as the kernel would send
// them (IPv4 ID 0, source port 4791), so neither port has to rewrite it.
func (b *bench) frame(payload int) []byte {
	l := b.spec.Links[0]
	f := wire.FrameFields{
		Ethernet: wire.EthernetFields{Src: wire.MAC(l.A.MAC), Dst: wire.MAC(l.B.MAC)},
		IP4:      wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: l.A.Addrs[0].Addr(), Dst: l.B.Addrs[0].Addr()},
		UDP:      wire.UDPFields{SrcPort: wire.RoCEv2Port, DstPort: wire.RoCEv2Port},
		BTH:      wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x11},
		RETH:     wire.RETHFields{VA: 0x10000, RKey: 0x100, DMALen: uint32(payload)},
		Payload:  bytes.Repeat([]byte{0x5a}, payload),
	}
	n, _ := f.FrameLen()
	buf := make([]byte, n)
	wire.Encode(buf, &f)
	return buf
}

type opener func(ns *topo.Namespace, end topo.End) (datapath.Port, func(), error)

func (b *bench) openXSK(ns *topo.Namespace, end topo.End) (datapath.Port, func(), error) {
	var d *xsk.Device
	err := ns.Do(func() (err error) { d, err = xsk.Open(end.Name, xsk.Config{}, nil); return })
	if err != nil {
		return nil, nil, err
	}
	return d.Sockets()[0], func() { d.Close() }, nil
}

func (b *bench) openUDP(ns *topo.Namespace, end topo.End) (datapath.Port, func(), error) {
	var p *udpport.Port
	err := ns.Do(func() (err error) {
		p, err = udpport.Open(udpport.Config{Local: end.Addrs[0].Addr(), LocalMAC: wire.MAC(end.MAC), Buffers: 4096})
		return
	})
	if err != nil {
		return nil, nil, err
	}
	return p, func() { p.Close() }, nil
}

// runPorts sends frames from a port in a to a port in b.
func (b *bench) runPorts(r Result, open opener) Result {
	l := b.spec.Links[0]
	tx, closeTx, err := open(b.a, l.A)
	if err != nil {
		r.Err = err
		return r
	}
	defer closeTx()
	rx, closeRx, err := open(b.b, l.B)
	if err != nil {
		r.Err = err
		return r
	}
	defer closeRx()
	frame := b.frame(r.Payload)
	r.FrameSize = len(frame)

	var frames, allocFrames atomic.Uint64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // receiver
		defer wg.Done()
		runtime.LockOSThread()
		bufs := make([]datapath.Frame, b.cfg.Batch)
		idle := 0
		for !stop.Load() {
			n, err := rx.Recv(bufs)
			if err != nil {
				return
			}
			if n == 0 {
				if idle++; idle > spinPolls {
					rx.Wait(10 * time.Millisecond)
				}
				continue
			}
			idle = 0
			rx.Release(bufs[:n])
			frames.Add(uint64(n))
		}
	}()
	go func() { // sender
		defer wg.Done()
		runtime.LockOSThread()
		bufs := make([]datapath.Frame, b.cfg.Batch)
		for !stop.Load() {
			n := tx.Alloc(bufs)
			for i := range n {
				bufs[i].Data = bufs[i].Data[:copy(bufs[i].Data, frame)]
			}
			m, _ := tx.Send(bufs[:n])
			tx.Free(bufs[m:n])
			allocFrames.Add(uint64(m))
			if m == 0 {
				tx.Flush()
				runtime.Gosched()
			}
		}
	}()
	r = measure(r, b.cfg, &frames, &allocFrames)
	stop.Store(true)
	wg.Wait()
	return r
}

// spinPolls is how many empty polls a receiver makes before it sleeps: every
// receiver busy-polls the same way, as a NIC's engine does under load.
const spinPolls = 200

// measure waits out the warmup, then counts received frames and the heap
// allocations of both loops over the measurement.
func measure(r Result, cfg Config, frames, sent *atomic.Uint64) Result {
	time.Sleep(cfg.Warmup)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f0, s0, t0 := frames.Load(), sent.Load(), time.Now()
	time.Sleep(cfg.Duration)
	f1, s1, t1 := frames.Load(), sent.Load(), time.Now()
	runtime.ReadMemStats(&m1)
	r.Frames = f1 - f0
	r.Bytes = r.Frames * uint64(r.Payload)
	r.Elapsed = t1.Sub(t0)
	if n := (f1 - f0) + (s1 - s0); n > 0 {
		r.Allocs = float64(m1.Mallocs-m0.Mallocs) / float64(n)
	}
	return r
}

// runKernelUDP sends the same RoCEv2 datagrams through plain UDP sockets,
// batched with sendmmsg and recvmmsg.
func (b *bench) runKernelUDP(r Result) Result {
	frame := b.frame(r.Payload)
	r.FrameSize = len(frame)
	datagram := frame[wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen:]
	rc, tc, dst, err := b.udpPair(false, 4<<20)
	if err != nil {
		r.Err = err
		return r
	}
	defer rc.Close()
	defer tc.Close()

	var frames, sent atomic.Uint64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		readBatches(rc, b.cfg.Batch, 9216, &stop, func(ms []ipv4.Message) { frames.Add(uint64(len(ms))) })
	}()
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		pc := ipv4.NewPacketConn(tc)
		to := net.UDPAddrFromAddrPort(dst)
		msgs := make([]ipv4.Message, b.cfg.Batch)
		for i := range msgs {
			msgs[i] = ipv4.Message{Buffers: [][]byte{datagram}, Addr: to}
		}
		for !stop.Load() {
			n, err := pc.WriteBatch(msgs, 0)
			if err != nil {
				runtime.Gosched()
			}
			sent.Add(uint64(n))
		}
	}()
	r = measure(r, b.cfg, &frames, &sent)
	stop.Store(true)
	wg.Wait()
	return r
}

// readBatches reads rc with recvmmsg, batch datagrams of up to size
// bytes a call, until stop: spinning without blocking, then, after
// spinPolls empty reads in a row, blocking with a deadline. got is given
// each batch read.
func readBatches(rc *net.UDPConn, batch, size int, stop *atomic.Bool, got func([]ipv4.Message)) {
	pc := ipv4.NewPacketConn(rc)
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, size)}
	}
	idle := 0
	for !stop.Load() {
		flags := unix.MSG_DONTWAIT
		if idle > spinPolls {
			flags = 0
			rc.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		}
		n, err := pc.ReadBatch(msgs, flags)
		if err != nil || n == 0 {
			idle++
			continue
		}
		idle = 0
		got(msgs[:n])
	}
}

// gsoSegments bounds the datagrams of one UDP_SEGMENT send: the kernel
// takes at most 64 (UDP_MAX_SEGMENTS is 128 on newer kernels), within
// one UDP datagram's 65,507 bytes. gsoBatch is how many such sends go
// in one sendmmsg call, and how many coalesced datagrams one recvmmsg
// takes: batched as the udp port batches (up to 64 frames a call).
const (
	gsoSegments = 64
	gsoBatch    = 4
)

// runUDPGSO sends the same RoCEv2 datagrams as runKernelUDP (from a
// connected socket), laid back to back, as many as fit one UDP datagram,
// with UDP generic segmentation offload: the kernel cuts the buffer into
// one datagram per segment (each a whole RoCEv2 packet: BTH, payload,
// ICRC). gsoBatch such sends go in one sendmmsg call. The receiving
// socket takes them coalesced (UDP_GRO), gsoBatch at a time with
// recvmmsg, spinning as the kernel UDP receiver does; frames are counted
// by the segment size.
func (b *bench) runUDPGSO(r Result) Result {
	frame := b.frame(r.Payload)
	r.FrameSize = len(frame)
	datagram := frame[wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen:]
	seg := len(datagram)
	k := min(gsoSegments, 65507/seg)
	buf := bytes.Repeat(datagram, k)
	rc, tc, _, err := b.udpPair(true, 16<<20)
	if err != nil {
		r.Err = err
		return r
	}
	defer rc.Close()
	defer tc.Close()
	if err := setSockopt(tc, unix.IPPROTO_UDP, unix.UDP_SEGMENT, seg); err != nil {
		r.Err = fmt.Errorf("UDP_SEGMENT: %w", err)
		return r
	}
	if err := setSockopt(rc, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
		r.Err = fmt.Errorf("UDP_GRO: %w", err)
		return r
	}
	var frames, sent atomic.Uint64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		readBatches(rc, gsoBatch, 65536, &stop, func(ms []ipv4.Message) {
			for _, m := range ms {
				frames.Add(uint64(m.N / seg)) // coalesced: equal segments
			}
		})
	}()
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		pc := ipv4.NewPacketConn(tc)
		msgs := make([]ipv4.Message, gsoBatch)
		for i := range msgs {
			msgs[i].Buffers = [][]byte{buf}
		}
		for !stop.Load() {
			n, err := pc.WriteBatch(msgs, 0)
			if err != nil {
				runtime.Gosched()
			}
			sent.Add(uint64(n * k))
		}
	}()
	r = measure(r, b.cfg, &frames, &sent)
	stop.Store(true)
	wg.Wait()
	return r
}

// udpPair opens the receiving socket at B's RoCEv2 port and the sending
// one at A (connected to the receiver with connect), each with socket
// buffers of bufs bytes.
func (b *bench) udpPair(connect bool, bufs int) (rc, tc *net.UDPConn, dst netip.AddrPort, err error) {
	l := b.spec.Links[0]
	dst = netip.AddrPortFrom(l.B.Addrs[0].Addr(), wire.RoCEv2Port)
	if err := b.b.Do(func() (err error) { rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(dst)); return }); err != nil {
		return nil, nil, dst, err
	}
	src := net.UDPAddrFromAddrPort(netip.AddrPortFrom(l.A.Addrs[0].Addr(), 0))
	if err := b.a.Do(func() (err error) {
		if connect {
			tc, err = net.DialUDP("udp4", src, net.UDPAddrFromAddrPort(dst))
		} else {
			tc, err = net.ListenUDP("udp4", src)
		}
		return
	}); err != nil {
		rc.Close()
		return nil, nil, dst, err
	}
	rc.SetReadBuffer(bufs)
	tc.SetWriteBuffer(bufs)
	return rc, tc, dst, nil
}

// setSockopt sets an integer socket option on c.
func setSockopt(c *net.UDPConn, level, opt, v int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }); err != nil {
		return err
	}
	return serr
}

// iperf3Report is the part of iperf3's JSON report the benchmark reads.
type iperf3Report struct {
	Error string `json:"error"`
	End   struct {
		SumReceived struct {
			Bytes   float64 `json:"bytes"`
			Seconds float64 `json:"seconds"`
		} `json:"sum_received"`
	} `json:"end"`
}

// runIPerf3 runs a TCP stream with writes of the payload size, or of
// iperf3's default size for payload 0.
func (b *bench) runIPerf3(r Result) Result {
	if _, err := exec.LookPath("iperf3"); err != nil {
		r.Err = errors.New("iperf3 not installed")
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Duration+20*time.Second)
	defer cancel()
	srv := b.b.Command(ctx, "iperf3", "-s", "-1", "-B", b.spec.Links[0].B.Addrs[0].Addr().String())
	if err := srv.Start(); err != nil {
		r.Err = err
		return r
	}
	defer srv.Wait()
	defer srv.Process.Kill() // a server that no client reached would wait for ever
	// iperf3 takes whole seconds.
	secs := strconv.Itoa(max(1, int(b.cfg.Duration.Round(time.Second)/time.Second)))
	args := []string{"-c", b.spec.Links[0].B.Addrs[0].Addr().String(), "-t", secs, "-J"}
	if r.Payload > 0 {
		args = append(args, "-l", strconv.Itoa(r.Payload))
	}
	var rep iperf3Report
	for try := 0; ; try++ {
		out, err := b.a.Command(ctx, "iperf3", args...).Output()
		rep = iperf3Report{}
		if jerr := json.Unmarshal(out, &rep); jerr != nil && rep.Error == "" {
			rep.Error = fmt.Sprintf("%v; output: %v", err, jerr)
		}
		if rep.Error == "" && rep.End.SumReceived.Bytes > 0 {
			break
		}
		if try == 50 || !strings.Contains(rep.Error, "unable to connect") {
			r.Err = fmt.Errorf("iperf3: %s", rep.Error)
			return r
		}
		time.Sleep(50 * time.Millisecond) // the server is not listening yet
	}
	r.Bytes = uint64(rep.End.SumReceived.Bytes)
	r.Elapsed = time.Duration(rep.End.SumReceived.Seconds * float64(time.Second))
	return r
}
