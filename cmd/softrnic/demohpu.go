package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/host/verbs"
	"github.com/softrnic/softrnic/hpu/apps"
	"github.com/softrnic/softrnic/internal/topo"
)

// hpuSenders is how many QPs send vectors to the aggregation.
const hpuSenders = 4

// runHPUDemo shows sPIN handlers between two NICs over a veth pair: an
// aggregation of int32 and float32 vectors from several senders summed on
// b's NIC, and a key-value cache whose GETs b's NIC answers itself, with
// misses and SETs going to b's host. Every result is checked.
func runHPUDemo(kind string, mtu int, obs *observeFlags, stdout io.Writer) error {
	spec := topo.PairSpec(mtu, 1)
	tp, err := topo.Build(spec)
	if err != nil {
		return err
	}
	defer tp.Close()
	l := spec.Links[0]
	fmt.Fprintf(stdout, "softrnic demo -hpu: two NICs in namespaces %s and %s, %s port, veth MTU %d\n\n",
		tp.NS("a").FullName, tp.NS("b").FullName, kind, mtu)
	const elements = 8192
	a, err := newDemoEnd(tp.NS("a"), l.A, kind, "-port udp", hpuSenders*elements*4+(1<<20))
	if err != nil {
		return err
	}
	defer a.close()
	b, err := newDemoEnd(tp.NS("b"), l.B, kind, "-port udp", hpuSenders*elements*4+(1<<20))
	if err != nil {
		return err
	}
	defer b.close()
	stopMetrics, err := obs.serve(a, b)
	if err != nil {
		return err
	}
	defer stopMetrics()

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "application\twork\tresult\tbytes b's NIC wrote to b's memory\tpayload bytes without handlers\ttime\t")
	for _, float := range []bool{false, true} {
		if err := demoAggregate(a, b, elements, float, tw); err != nil {
			return err
		}
	}
	if err := demoKV(a, b, tw); err != nil {
		return err
	}
	tw.Flush()
	c := b.dev.NIC().Counters()
	fmt.Fprintf(stdout, "\nb's NIC: hpu_packets %d, hpu_commands %d (replies sent by handlers), hpu_refused %d, hpu_faults %d\n",
		c.HPUPackets.Load(), c.HPUCommands.Load(), c.HPURefused.Load(), c.HPUFaults.Load())
	fmt.Fprintln(stdout, "\nall handler results verified")
	return nil
}

// connectPair connects one more RC QP of a to one more of b.
func connectPair(a, b *demoEnd) (*verbs.QP, *verbs.QP, error) {
	attr := verbs.QPInitAttr{Type: verbs.QPTRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qa, err := a.pd.CreateQP(attr)
	if err != nil {
		return nil, nil, err
	}
	attr.SendCQ, attr.RecvCQ = b.cq, b.cq
	qb, err := b.pd.CreateQP(attr)
	if err != nil {
		return nil, nil, err
	}
	return qa, qb, verbs.ConnectRC(qa, qb, a.ah, b.ah, 3, 14)
}

// demoAggregate: hpuSenders QPs of a WRITE a vector each to b; b's
// handlers sum them into one vector, which lands in b's memory once.
func demoAggregate(a, b *demoEnd, elements int, float bool, tw io.Writer) error {
	var qas, qbs [hpuSenders]*verbs.QP
	for i := range hpuSenders {
		var err error
		if qas[i], qbs[i], err = connectPair(a, b); err != nil {
			return err
		}
	}
	size := elements * 4
	result := b.buf[:size]
	clear(result)
	region, err := b.pd.RegMR(make([]byte, size), verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	notified := make(chan struct{}, hpuSenders)
	agg, err := apps.NewAggregate(qbs[0].Handlers(verbs.Match{}), region.Region(), elements, hpuSenders, float, func() { notified <- struct{}{} })
	if err != nil {
		return err
	}
	for _, q := range qbs[1:] {
		if err := q.ShareHandlers(agg.In, verbs.Match{}); err != nil {
			return err
		}
	}
	// The vectors, and the sum the host expects.
	r := rand.New(rand.NewPCG(7, uint64(elements)))
	wantI := make([]int64, elements)
	wantF := make([]float64, elements)
	for s := range hpuSenders {
		v := a.buf[s*size : (s+1)*size]
		for i := range elements {
			if float {
				f := float32(r.IntN(2000)-1000) / 8 // exact in float32: the sum is the same in any order
				binary.LittleEndian.PutUint32(v[4*i:], math.Float32bits(f))
				wantF[i] += float64(f)
			} else {
				x := int32(r.Uint32())
				binary.LittleEndian.PutUint32(v[4*i:], uint32(x))
				wantI[i] += int64(x)
			}
		}
	}
	dma0 := b.dev.DMA().WriteBytes.Load()
	start := time.Now()
	for s, q := range qas {
		wr := verbs.SendWR{WRID: uint64(s), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: a.mr.Addr + uint64(s*size), Length: uint32(size), LKey: a.mr.LKey}},
			RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}
		if _, err := q.PostSend([]verbs.SendWR{wr}); err != nil {
			return err
		}
	}
	if err := wait(a.cq, hpuSenders); err != nil {
		return err
	}
	select {
	case <-notified:
	case <-time.After(10 * time.Second):
		return errors.New("aggregation: the host was never notified")
	}
	elapsed := time.Since(start)
	if len(notified) != 0 {
		return errors.New("aggregation: the host was notified more than once")
	}
	b.dev.Fence()
	into := b.dev.DMA().WriteBytes.Load() - dma0
	got := region.Buf
	for i := range elements {
		x := binary.LittleEndian.Uint32(got[4*i:])
		if float && float64(math.Float32frombits(x)) != float64(float32(wantF[i])) ||
			!float && int32(x) != int32(wantI[i]) {
			return fmt.Errorf("aggregation: element %d is %#x, want %v / %v", i, x, wantI[i], wantF[i])
		}
	}
	if !bytes.Equal(result, make([]byte, size)) {
		return errors.New("aggregation: a vector landed in b's buffer although the handlers consumed it")
	}
	for _, q := range qbs {
		q.DetachHandlers()
	}
	kind := "int32"
	if float {
		kind = "float32"
	}
	fmt.Fprintf(tw, "aggregation %s\t%d senders x %d elements\tsum verified, host notified once\t%d\t%d\t%v\t\n",
		kind, hpuSenders, elements, into, hpuSenders*size, elapsed.Round(time.Microsecond))
	return nil
}

// demoKV: a key-value cache on b's NIC. b's host SETs half the keys into
// it; a asks for every key: hits are answered by b's handlers, misses go
// to b's host, which answers them and caches the keys; a second pass hits
// every key on the NIC; a SET from a goes through b's host.
func demoKV(a, b *demoEnd, tw io.Writer) error {
	qa, qb, err := connectPair(a, b)
	if err != nil {
		return err
	}
	const keys, valueSize = 256, 64
	cfg := apps.KVConfig{Buckets: 1024, ValueSize: valueSize, MissSlots: 256}
	slot := apps.KVHeader + valueSize
	ring, err := b.pd.RegMR(make([]byte, cfg.MissSlots*slot), verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	misses := make(chan int, cfg.MissSlots)
	kv, err := apps.NewKV(qb.Handlers(verbs.Match{Ops: verbs.MatchSend}), ring.Region(), cfg, func(i int) { misses <- i })
	if err != nil {
		return err
	}
	defer qb.DetachHandlers()
	value := func(key uint64) []byte {
		v := make([]byte, valueSize)
		for i := range v {
			v[i] = byte(key*31 + uint64(i))
		}
		return v
	}
	for k := uint64(1); k <= keys; k += 2 { // the odd keys are cached from the start
		if err := kv.Set(k, value(k)); err != nil {
			return err
		}
	}
	// b's host: answers what the handlers pass it, from its own store.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hostDone := make(chan error, 1)
	replies, err := b.pd.RegMR(make([]byte, cfg.MissSlots*slot), verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	var answered int
	go func() {
		hostDone <- func() error {
			n := 0
			for {
				var i int
				select {
				case i = <-misses:
				case <-ctx.Done():
					return nil
				}
				req := ring.Buf[i*slot : (i+1)*slot]
				op, id, key := req[0], binary.LittleEndian.Uint32(req[4:]), binary.LittleEndian.Uint64(req[8:])
				status := uint8(apps.KVHit)
				v := value(key)
				if op == apps.KVSet {
					status, v = apps.KVStored, req[apps.KVHeader:]
				}
				if err := kv.Set(key, v); err != nil {
					return err
				}
				out := replies.Buf[(n%cfg.MissSlots)*slot : (n%cfg.MissSlots+1)*slot]
				kv.Reply(out, status, id, key, v)
				wr := verbs.SendWR{WRID: uint64(n), Opcode: verbs.WRSend,
					SGL: []verbs.SGE{{Addr: replies.Addr + uint64((n%cfg.MissSlots)*slot), Length: uint32(slot), LKey: replies.LKey}}}
				if n%16 == 15 {
					wr.Flags = verbs.SendSignaled
				}
				if _, err := qb.PostSend([]verbs.SendWR{wr}); err != nil {
					return err
				}
				var wc [16]verbs.WC
				for _, c := range wc[:b.cq.Poll(wc[:])] { // the replies' completions free the send queue
					if c.Status != verbs.WCSuccess {
						return fmt.Errorf("key-value: b's reply %d: %v", c.WRID, c.Status)
					}
				}
				n++
				answered = n
			}
		}()
	}()
	// a: GET every key, twice over; then one SET and a GET of it.
	dma0 := b.dev.DMA().WriteBytes.Load()
	start := time.Now()
	var hits [2]int
	for pass := range 2 {
		for k := uint64(1); k <= keys; k++ {
			got, status, err := kvCall(a, qa, apps.KVGet, uint32(k), k, nil, slot)
			if err != nil {
				return err
			}
			if status != apps.KVHit || !bytes.Equal(got, value(k)) {
				return fmt.Errorf("key-value: GET %d: status %d, value %x", k, status, got)
			}
		}
		hits[pass] = int(kv.Stats.Hits.Load())
	}
	newValue := bytes.Repeat([]byte{0xab}, valueSize)
	if _, status, err := kvCall(a, qa, apps.KVSet, 9999, 7, newValue, slot); err != nil || status != apps.KVStored {
		return fmt.Errorf("key-value: SET: status %d, %v", status, err)
	}
	if got, status, err := kvCall(a, qa, apps.KVGet, 10000, 7, nil, slot); err != nil || status != apps.KVHit || !bytes.Equal(got, newValue) {
		return fmt.Errorf("key-value: GET after SET: status %d, %x, %v", status, got, err)
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-hostDone; err != nil {
		return err
	}
	b.dev.Fence()
	into := b.dev.DMA().WriteBytes.Load() - dma0
	if hits[0] != keys/2 || hits[1] != hits[0]+keys {
		return fmt.Errorf("key-value: the NIC answered %d GETs of the first pass (want %d) and %d of the second (want %d)", hits[0], keys/2, hits[1]-hits[0], keys)
	}
	gets := 2*keys + 1
	fmt.Fprintf(tw, "key-value cache\t%d GETs, 1 SET\t%d served by b's NIC, %d by b's host, values verified\t%d\t%d\t%v\t\n",
		gets, kv.Stats.Hits.Load(), answered, into, gets*apps.KVHeader+slot, elapsed.Round(time.Microsecond))
	return nil
}

// kvCall sends one request from a on qa and waits for its reply.
func kvCall(a *demoEnd, qa *verbs.QP, op uint8, id uint32, key uint64, value []byte, slot int) ([]byte, uint8, error) {
	req := a.buf[:slot]
	clear(req)
	req[0] = op
	binary.LittleEndian.PutUint32(req[4:], id)
	binary.LittleEndian.PutUint64(req[8:], key)
	n := apps.KVHeader
	if op == apps.KVSet {
		n += copy(req[apps.KVHeader:], value)
	}
	reply := a.buf[4096 : 4096+slot]
	if _, err := qa.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{{Addr: a.mr.Addr + 4096, Length: uint32(slot), LKey: a.mr.LKey}}}}); err != nil {
		return nil, 0, err
	}
	if _, err := qa.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr, Length: uint32(n), LKey: a.mr.LKey}}}}); err != nil {
		return nil, 0, err
	}
	if err := wait(a.cq, 2); err != nil { // the send and the reply
		return nil, 0, err
	}
	if binary.LittleEndian.Uint32(reply[4:]) != id || binary.LittleEndian.Uint64(reply[8:]) != key {
		return nil, 0, fmt.Errorf("key-value: a reply for request %d key %d, want %d key %d",
			binary.LittleEndian.Uint32(reply[4:]), binary.LittleEndian.Uint64(reply[8:]), id, key)
	}
	return append([]byte(nil), reply[apps.KVHeader:]...), reply[0], nil
}
