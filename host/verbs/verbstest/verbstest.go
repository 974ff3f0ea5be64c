// Package verbstest helps tests build connected queue pairs on any port.
package verbstest

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/verbs"
)

// End is one side of a connected RC pair with one registered buffer.
type End struct {
	Dev    *verbs.Device
	PD     *verbs.PD
	CQ     *verbs.CQ
	QP     *verbs.QP
	Buf    []byte
	MR     *verbs.MR
	MAC    wire.MAC
	IP     netip.Addr
	Counts *datapath.Counters
}

// NewEnd opens a device on port with an RC QP, a CQ and a buffer of size
// bytes registered for local write, remote write and remote read.
func NewEnd(t testing.TB, port datapath.Port, mac wire.MAC, ip netip.Addr, size int) *End {
	return NewEndPCIe(t, port, mac, ip, size, hostmem.PCIe{})
}

// NewEndPCIe is NewEnd with a PCIe model between the NIC and host memory.
func NewEndPCIe(t testing.TB, port datapath.Port, mac wire.MAC, ip netip.Addr, size int, model hostmem.PCIe) *End {
	t.Helper()
	return newEnd(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{MAC: mac, IP: ip}, Port: port, PCIe: model}, size, 0)
}

// NewEndQueues is NewEnd on a port with several queues, one NIC engine
// each. It first creates skew QPs that are never used, so that this end's
// QP numbers differ from its peer's and a QP's frames arrive on a queue
// whose engine does not own it.
func NewEndQueues(t testing.TB, ports []datapath.Port, mac wire.MAC, ip netip.Addr, size, skew int) *End {
	t.Helper()
	return newEnd(t, verbs.DeviceConfig{NICConfig: datapath.NICConfig{Ports: ports, MAC: mac, IP: ip}}, size, skew)
}

// NewEndConfig is NewEnd on a device opened with cfg.
func NewEndConfig(t testing.TB, cfg verbs.DeviceConfig, size int) *End {
	t.Helper()
	return newEnd(t, cfg, size, 0)
}

func newEnd(t testing.TB, cfg verbs.DeviceConfig, size, skew int) *End {
	t.Helper()
	e := &End{MAC: cfg.MAC, IP: cfg.IP}
	var err error
	if e.Dev, err = verbs.Open(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Dev.Close() })
	e.PD, _ = e.Dev.AllocPD()
	if e.CQ, err = e.Dev.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	for range skew {
		if _, err := e.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if e.QP, err = e.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: e.CQ, RecvCQ: e.CQ,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 3}}); err != nil {
		t.Fatal(err)
	}
	e.Buf = make([]byte, size)
	if e.MR, err = e.PD.RegMR(e.Buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	e.Counts = e.Dev.NIC().Counters()
	return e
}

// Connect takes both QPs to RTS, each pointing at the other, with path
// MTU enum mtu and ACK timeout exponent timeout.
func Connect(t testing.TB, a, b *End, mtu int, timeout uint8) {
	t.Helper()
	if err := verbs.ConnectRC(a.QP, b.QP, verbs.AH{DestMAC: a.MAC, DestGID: a.IP}, verbs.AH{DestMAC: b.MAC, DestGID: b.IP}, mtu, timeout); err != nil {
		t.Fatal(err)
	}
}

// WaitWC waits up to 20 seconds for one completion.
func WaitWC(t testing.TB, cq *verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("no completion: %v", err)
		}
	}
}

// SGL is one SGE over size bytes of e's buffer at off, or none for size 0.
func SGL(e *End, off, size int) []verbs.SGE {
	if size == 0 {
		return nil
	}
	return []verbs.SGE{{Addr: e.MR.Addr + uint64(off), Length: uint32(size), LKey: e.MR.LKey}}
}

// Fill writes seeded random bytes.
func Fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 9))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}
