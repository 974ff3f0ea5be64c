package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/internal/topo"
)

// runFramesDemo sends one RoCEv2 frame of every opcode, built by the
// encoder, across the veth pair and checks each (ICRC included) with the
// parser on the other side.
func runFramesDemo(mtu, payload *int, stdout io.Writer) error {
	fmt.Fprintln(stdout, "softrnic demo -frames: one RoCEv2 frame of every RC/UC/UD opcode (and a CNP) across a veth pair")
	t, err := topo.Build(topo.PairSpec(*mtu, 1))
	if err != nil {
		return err
	}
	defer t.Close()
	a, b := t.NS("a"), t.NS("b")
	fmt.Fprintf(stdout, "\nnamespaces %s and %s, veth0 MTU %d\n\n", a.FullName, b.FullName, *mtu)

	tx, err := packetSocket(a)
	if err != nil {
		return err
	}
	defer unix.Close(tx)
	rx, err := packetSocket(b)
	if err != nil {
		return err
	}
	defer unix.Close(rx)
	if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000}); err != nil {
		return err
	}

	spec := topo.PairSpec(*mtu, 1)
	var srcMAC, dstMAC wire.MAC
	copy(srcMAC[:], spec.Links[0].A.MAC)
	copy(dstMAC[:], spec.Links[0].B.MAC)
	srcIP, dstIP := spec.Links[0].A.Addrs[0].Addr(), spec.Links[0].B.Addrs[0].Addr()

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "opcode\tframe bytes\tPSN\tICRC\tarrived")
	sent, ok := 0, 0
	buf := make([]byte, 9216)
	rbuf := make([]byte, 9216)
	for i := range 256 {
		op := wire.Opcode(i)
		if !op.Valid() {
			continue
		}
		f := wire.FrameFields{
			Ethernet: wire.EthernetFields{Dst: dstMAC, Src: srcMAC},
			IP4:      wire.IPv4Fields{ID: uint16(i), Flags: wire.IPv4FlagDF, TTL: 64, Src: srcIP, Dst: dstIP},
			UDP:      wire.UDPFields{SrcPort: wire.SourcePort(0x11, 0x12), DstPort: wire.RoCEv2Port},
			BTH:      wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: wire.PSN(1000 + i)},
			RETH:     wire.RETHFields{VA: 0x10000, RKey: 0x100, DMALen: uint32(*payload)},
			AETH:     wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: uint32(i)},
			DETH:     wire.DETHFields{QKey: 0x11111111, SrcQP: 0x11},
		}
		if op.Info().Flags&wire.OpPayload != 0 {
			f.Payload = make([]byte, *payload)
			for j := range f.Payload {
				f.Payload[j] = byte(i + j)
			}
		}
		n, err := wire.Encode(buf, &f)
		if err != nil {
			return fmt.Errorf("%v: %w", op, err)
		}
		if _, err := unix.Write(tx, buf[:n]); err != nil {
			return fmt.Errorf("send %v: %w", op, err)
		}
		sent++
		result := "lost"
		var p wire.Packet
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); { // generous: a loaded host (go test ./... beside it) delays delivery
			m, err := unix.Read(rx, rbuf)
			if err != nil {
				continue
			}
			if perr := wire.Parse(rbuf[:m], &p); perr == nil && p.Opcode == op && p.BTH().PSN() == f.BTH.PSN {
				result = "intact, ICRC good"
				if string(p.Payload()) != string(f.Payload) {
					result = "payload differs"
				} else {
					ok++
				}
				break
			} else if perr != nil && !errors.Is(perr, wire.ErrNotIP) && !errors.Is(perr, wire.ErrNotUDP) && !errors.Is(perr, wire.ErrNotRoCE) {
				result = perr.Error()
				break
			}
		}
		icrc := "-" // nothing came back to read it from
		if result == "intact, ICRC good" || result == "payload differs" {
			icrc = fmt.Sprintf("%#08x", p.ICRC())
		}
		fmt.Fprintf(tw, "%v\t%d\t%d\t%s\t%s\n", op, n, f.BTH.PSN, icrc, result)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\n%d of %d frames crossed the veth pair intact\n", ok, sent)
	if ok != sent {
		return fmt.Errorf("%d frames lost or damaged", sent-ok)
	}
	return nil
}

// packetSocket opens a raw AF_PACKET socket on veth0 of a namespace.
func packetSocket(n *topo.Namespace) (int, error) {
	fd := -1
	err := n.Do(func() error {
		ifi, err := net.InterfaceByName("veth0")
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		s, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		if err := unix.Bind(s, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(s)
			return err
		}
		if err := unix.SetsockoptInt(s, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
			unix.Close(s)
			return err
		}
		fd = s
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("packet socket in %s: %w", n.FullName, err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
