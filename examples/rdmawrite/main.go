// Command rdmawrite is a tutorial: the whole path a program takes to move
// data with RDMA between two processes, each with its own softrnic NIC on
// a real network interface.
//
// The server exposes a buffer; the client writes into it with an RDMA
// WRITE, which the server's NIC places in memory without the server's
// program taking part, and then tells the server with a SEND carrying an
// immediate value. The server checks the bytes it finds against a SHA-256
// the client sent along, and both report what they verified.
//
// Each side goes through the same steps:
//
//  1. open the network interface (package netdev): its MAC, MTU and GIDs
//  2. open the AF_XDP port on it (package xsk), which takes RoCEv2 frames
//     (UDP port 4791) from the interface and leaves the rest to the kernel
//  3. open the softrnic device on the port (verbs.Open)
//  4. allocate a protection domain, register memory, create a completion
//     queue and an RC queue pair
//  5. connect to the peer over TCP and exchange Endpoints: QP numbers,
//     PSNs, GIDs, MACs, MTUs and the server's buffer (address and R_Key)
//  6. connect the queue pair to the peer's (QP.Connect: RESET, INIT, RTR,
//     RTS) and say "ready" over TCP
//  7. client: post the RDMA WRITE and the SEND with immediate, poll the CQ;
//     server: poll the CQ for the SEND, call Device.Fence, read the buffer
//
// Run it as root (AF_XDP needs CAP_NET_ADMIN, CAP_BPF and CAP_IPC_LOCK), on
// two hosts or in two network namespaces joined by a veth pair:
//
//	rdmawrite -dev veth0 -listen :18515              # server
//	rdmawrite -dev veth0 -connect 10.47.0.1:18515    # client
//
// README.md ("Using the verbs API") builds such a pair by hand; the test
// TestExampleRDMAWrite in package tests runs this program across one.
// With -io udp the NIC sends through a kernel UDP socket instead of
// AF_XDP, which needs no privileges (both sides must use the same).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/netdev"
	"github.com/softrnic/softrnic/datapath/udpport"
	"github.com/softrnic/softrnic/datapath/xsk"
	"github.com/softrnic/softrnic/host/verbs"
)

func main() {
	dev := flag.String("dev", "", "network interface the NIC runs on (required), e.g. veth0")
	listen := flag.String("listen", "", "server: TCP address to wait for the client on, e.g. :18515")
	connect := flag.String("connect", "", "client: the server's TCP address, e.g. 10.47.0.1:18515")
	size := flag.Int("size", 1<<20, "bytes to WRITE (the server's buffer is this large)")
	ioKind := flag.String("io", "xsk", "port: xsk (AF_XDP, root) or udp (a kernel UDP socket)")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	if *dev == "" || (*listen == "") == (*connect == "") || *size < 1 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: rdmawrite -dev IFACE (-listen [HOST]:PORT | -connect HOST:PORT) [-size N] [-io xsk|udp]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	role := "server"
	if *connect != "" {
		role = "client"
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)).With("role", role))

	// Every step below blocks at most until ctx ends: after -timeout, or
	// at Ctrl-C.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	if err := run(ctx, role, *dev, *listen, *connect, *ioKind, *size); err != nil {
		slog.Error(err.Error())
		os.Exit(1)
	}
}

// peerSide is what both roles set up: the NIC and its resources.
type peerSide struct {
	nd  *netdev.Device
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	// data is the buffer the WRITE moves: the client's source, the
	// server's destination. msg holds the SEND's payload (the SHA-256 of
	// the data): the client's source, the server's receive buffer.
	data, msg     []byte
	dataMR, msgMR *verbs.MR
}

const msgSize = sha256.Size

func run(ctx context.Context, role, ifname, listen, connect, portKind string, size int) error {
	var s peerSide

	// Step 1: the network interface. netdev reads what the NIC needs to
	// know about it: its MAC, its MTU and its GID table (the addresses it
	// answers at: a link-local one from the MAC, then its IPv4 and IPv6
	// addresses). The NIC takes the first IPv4 address, as perftest does
	// on RoCEv2.
	nd, err := netdev.Open(ifname)
	if err != nil {
		return err
	}
	defer nd.Close()
	s.nd = nd
	ip, err := firstIPv4(nd)
	if err != nil {
		return err
	}

	// Step 2: the port, the NIC's access to the wire. xsk.Open attaches
	// an XDP program to the interface that steers RoCEv2 frames (UDP port
	// 4791) to an AF_XDP socket on each of its receive queues; every other
	// frame (ARP, TCP, ...) still goes to the kernel, so the TCP connection
	// below runs over the same interface. Each socket is a queue of the
	// NIC, with an engine of its own.
	var ports []datapath.Port
	switch portKind {
	case "xsk":
		x, err := xsk.Open(nd.Name, xsk.Config{Log: slog.Default()}, nil)
		if err != nil {
			return fmt.Errorf("AF_XDP port on %s (run as root, or try -io udp): %w", nd.Name, err)
		}
		defer x.Close()
		for _, sock := range x.Sockets() {
			ports = append(ports, sock)
		}
	case "udp":
		u, err := udpport.Open(udpport.Config{Local: ip, LocalMAC: nd.MAC})
		if err != nil {
			return err
		}
		defer u.Close()
		ports = append(ports, u)
	default:
		return fmt.Errorf("-io %q: want xsk or udp", portKind)
	}

	// Step 3: the device. It is the NIC with its driver: host memory,
	// context tables and the engines that send and receive frames. MTU is
	// the interface's MTU: the NIC's active path MTU follows from it (1500
	// gives 1024, 9000 gives 4096).
	if s.dev, err = verbs.Open(verbs.DeviceConfig{
		NICConfig: datapath.NICConfig{Ports: ports, MAC: nd.MAC, IP: ip},
		MTU:       nd.MTU,
	}); err != nil {
		return err
	}
	defer s.dev.Close()
	slog.Info("NIC open", "dev", nd.Name, "ip", ip, "mac", nd.MAC, "mtu", nd.MTU, "active_ib_mtu_enum", s.dev.ActiveMTU())

	// Step 4: a protection domain, registered memory, a completion queue
	// and a reliable-connected queue pair. A memory region is what the NIC
	// may touch: the local key (LKey) lets this side's work requests use
	// it, the remote key (RKey) lets the peer's. Only the server's data
	// buffer admits remote writes.
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	s.data, s.msg = make([]byte, size), make([]byte, msgSize)
	dataAccess := verbs.AccessLocalWrite
	if role == "server" {
		dataAccess |= verbs.AccessRemoteWrite
	}
	if s.dataMR, err = s.pd.RegMR(s.data, dataAccess); err != nil {
		return err
	}
	if s.msgMR, err = s.pd.RegMR(s.msg, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if s.cq, err = s.dev.CreateCQ(16); err != nil {
		return err
	}
	if s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}

	// Step 5: the out-of-band connection. RDMA needs each side to know
	// the other's QP number, first PSN and address before the first
	// packet; programs swap them over a socket (perftest does, rdma_cm
	// does it for you). Here: one TCP connection, on which each side
	// sends its verbs.Endpoint as a line of text. The server's Endpoint
	// carries its data region (address, length, R_Key); the client's
	// carries none, since nobody writes into the client.
	conn, err := dialOrAccept(ctx, listen, connect)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Close the connection when ctx ends, so no read below outlives it.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	var exposed *verbs.MR
	if role == "server" {
		exposed = s.dataMR
	}
	local := s.qp.Endpoint(verbs.RandomPSN(), exposed)
	peer, err := verbs.ExchangeEndpoints(ctx, conn, local)
	if err != nil {
		return err
	}
	slog.Info("local endpoint", "endpoint", local)
	slog.Info("peer endpoint", "endpoint", peer)

	// Step 6: connect the queue pair. Frames to the peer go to the MAC
	// of the next hop towards its GID: on one Ethernet segment the peer
	// itself (which the Endpoint's MAC says too), behind a router the
	// router. The kernel knows (ARP, neighbour discovery); Resolve asks it.
	hop, err := nd.Resolve(ctx, peer.GID)
	if err != nil {
		return err
	}
	opts := verbs.DefaultConnectOptions()
	opts.NextHop = hop.MAC
	if err := s.qp.Connect(local, peer, &opts); err != nil {
		return err
	}

	// Both sides are connected when each has said so: a request sent
	// before the peer's QP is ready to receive is dropped and only sent
	// again after the ACK timeout. The server posts its receive (where
	// the SEND will land) before it says ready, so that the SEND finds it.
	rd := bufio.NewReader(conn)
	if role == "server" {
		return serve(ctx, &s, conn, rd)
	}
	return write(ctx, &s, conn, rd, peer)
}

// write is the client's part: WRITE the data into the server's buffer,
// then SEND its SHA-256 with the length as immediate data.
func write(ctx context.Context, s *peerSide, conn net.Conn, rd *bufio.Reader, peer verbs.Endpoint) error {
	if uint64(len(s.data)) > peer.Len {
		return fmt.Errorf("the server's buffer holds %d bytes, -size asks for %d", peer.Len, len(s.data))
	}
	// Data to send: random bytes, and their digest as the message.
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(rand.Uint32())
	}
	rand.NewChaCha8(seed).Read(s.data)
	sum := sha256.Sum256(s.data)
	copy(s.msg, sum[:])

	if err := expectLine(rd, "ready"); err != nil {
		return err
	}

	// Step 7 (client): two work requests in one post. The WRITE names
	// the remote address and R_Key the server's Endpoint gave; the SEND
	// consumes a receive the server posted, and its immediate value (the
	// length) shows in the server's completion. On an RC QP the server
	// executes them in order: when it sees the SEND, the WRITE is in its
	// memory. Both are signaled: each yields a completion here once the
	// server's NIC has acknowledged it.
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: s.dataMR.Addr, Length: uint32(len(s.data)), LKey: s.dataMR.LKey}},
			RemoteAddr: peer.Addr, RKey: peer.RKey},
		{WRID: 2, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: s.msgMR.Addr, Length: msgSize, LKey: s.msgMR.LKey}},
			Imm: uint32(len(s.data))},
	}
	start := time.Now()
	if _, err := s.qp.PostSend(wrs); err != nil {
		return err
	}
	for range wrs {
		wc, err := waitWC(ctx, s.cq)
		if err != nil {
			return err
		}
		slog.Info("completion", "wr", wc.WRID, "status", wc.Status)
	}
	elapsed := time.Since(start)
	slog.Info("wrote the bytes to the server's memory and sent their SHA-256", "bytes", len(s.data),
		"addr", fmt.Sprintf("%#x", peer.Addr), "rkey", fmt.Sprintf("%#x", peer.RKey), "elapsed", elapsed.Round(time.Microsecond))

	// The server checks and answers over TCP; then this side hangs up,
	// which lets the server close its NIC: it has acknowledged everything.
	line, err := rd.ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for the server's verdict: %w", err)
	}
	verdict := strings.TrimSpace(line)
	want := "verified " + hex.EncodeToString(sum[:])
	if verdict != want {
		return fmt.Errorf("the server answered %q, want %q", verdict, want)
	}
	fmt.Fprintln(conn, "done")
	fmt.Printf("client: the server verified %d bytes, sha256 %x\n", len(s.data), sum)
	return nil
}

// serve is the server's part: wait for the client's SEND, then check the
// data the client's WRITE left in the buffer.
func serve(ctx context.Context, s *peerSide, conn net.Conn, rd *bufio.Reader) error {
	// A receive work request: where the next SEND from the peer lands.
	if _, err := s.qp.PostRecv([]verbs.RecvWR{{WRID: 100,
		SGL: []verbs.SGE{{Addr: s.msgMR.Addr, Length: msgSize, LKey: s.msgMR.LKey}}}}); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(conn, "ready"); err != nil {
		return err
	}

	// Step 7 (server): the WRITE makes no completion here; the SEND that
	// follows it does, with the immediate value. Then Device.Fence: the
	// NIC wrote the buffer on its own goroutines, and Fence is the point
	// after which this program sees everything it wrote (Go's memory
	// model, and its race detector, know nothing of the network's order).
	wc, err := waitWC(ctx, s.cq)
	if err != nil {
		return err
	}
	if wc.Opcode != verbs.WCRecv || wc.Flags&verbs.WCWithImm == 0 || wc.ByteLen != msgSize {
		return fmt.Errorf("unexpected completion %+v", wc)
	}
	n := int(wc.Imm)
	if n > len(s.data) {
		return fmt.Errorf("the client says it wrote %d bytes into a buffer of %d", n, len(s.data))
	}
	s.dev.Fence()
	sum := sha256.Sum256(s.data[:n])
	if !bytes.Equal(sum[:], s.msg) {
		fmt.Fprintln(conn, "mismatch")
		return fmt.Errorf("the %d bytes written have sha256 %x, the client sent %x", n, sum, s.msg)
	}
	fmt.Printf("server: verified %d bytes written by the client, sha256 %x\n", n, sum)
	if _, err := fmt.Fprintf(conn, "verified %x\n", sum); err != nil {
		return err
	}
	// Keep the NIC up until the client has its completions (it hangs up
	// after them): they need this NIC's acknowledgements.
	return expectLine(rd, "done")
}

// waitWC returns the next completion of cq, waiting for it until ctx
// ends; a completion in error is an error.
func waitWC(ctx context.Context, cq *verbs.CQ) (verbs.WC, error) {
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return verbs.WC{}, fmt.Errorf("waiting for a completion: %w", err)
		}
	}
	if wc[0].Status != verbs.WCSuccess {
		return wc[0], fmt.Errorf("work request %d failed: %v", wc[0].WRID, wc[0].Status)
	}
	return wc[0], nil
}

// dialOrAccept makes the TCP connection: the server listens and takes one
// client, the client dials, again and again until the server listens.
func dialOrAccept(ctx context.Context, listen, connect string) (net.Conn, error) {
	if listen != "" {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", listen)
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		defer context.AfterFunc(ctx, func() { ln.Close() })()
		slog.Info("waiting for the client", "addr", ln.Addr())
		c, err := ln.Accept()
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for the client: %w", ctx.Err())
		}
		return c, err
	}
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", connect)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connecting to %s: %w", connect, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// expectLine reads one line and checks it.
func expectLine(rd *bufio.Reader, want string) error {
	line, err := rd.ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for %q from the peer: %w", want, err)
	}
	if got := strings.TrimSpace(line); got != want {
		return fmt.Errorf("the peer said %q, want %q", got, want)
	}
	return nil
}

// firstIPv4 returns the interface's first IPv4 address (its first
// IPv4-mapped GID).
func firstIPv4(nd *netdev.Device) (netip.Addr, error) {
	for _, g := range nd.GIDs {
		if g.IsIPv4() {
			return g.Addr(), nil
		}
	}
	return netip.Addr{}, errors.New(nd.Name + " has no IPv4 address: give it one (ip addr add 10.47.0.1/24 dev " + nd.Name + ")")
}
