package datapath

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
	"github.com/softrnic/softrnic/reliability"
)

// readPace's rules, event by event: retries double the spacing from the
// floor (or take the rate a retry shows), READs answered with no retry
// since shorten it by an eighth down to none, and the spacing holds the
// next response for that long after each one sent.
func TestReadPace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// burst sends n responses at at, from PSN 0, and returns the time.
	burst := func(p *readPace, at time.Time, n int) time.Time {
		for i := range n {
			p.sent(at, wire.PSN(i), false)
		}
		return at
	}
	type step struct {
		do      string // "retry" (an overrun after too few responses for a rate), "jitter" (an overrun whose responses went in bursts a few ms apart), "think" (one in a READ after others the requester asked for 10 ms apart), "rate" (an overrun after 1000 responses in 100 ms), "again" (the responses asked for again overrun at once), "random" (a loss, no overrun), "answered" (a READ of readProbeBytes), "half" (one of half that), "later" (a small one seconds after the spacing changed)
		wantGap time.Duration
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a retry from nothing", []step{{"retry", readGapMin}, {"retry", 2 * readGapMin}, {"retry", 4 * readGapMin}}},
		{"capped", []step{{"rate", 125 * time.Microsecond}, {"retry", 250 * time.Microsecond}, {"retry", 500 * time.Microsecond}, {"retry", readGapMax}, {"retry", readGapMax}}},
		{"the rate a retry shows", []step{{"retry", readGapMin}, {"rate", 125 * time.Microsecond}}},
		{"recovery needs a clean READ", []step{{"rate", 125 * time.Microsecond}, {"answered", 125 * time.Microsecond}, {"answered", 125*time.Microsecond - 125*time.Microsecond/8}}},
		{"recovery counts bytes", []step{{"rate", 125 * time.Microsecond}, {"half", 125 * time.Microsecond}, {"half", 125 * time.Microsecond}, {"half", 125*time.Microsecond - 125*time.Microsecond/8}}},
		{"recovery counts time", []step{{"rate", 125 * time.Microsecond}, {"half", 125 * time.Microsecond}, {"later", 125*time.Microsecond - 125*time.Microsecond/8}}},
		{"back to none", []step{{"retry", readGapMin}, {"answered", readGapMin}, {"answered", 0}, {"answered", 0}}},
		{"the engine's own pauses keep the sample", []step{{"jitter", 93750 * time.Nanosecond}}},
		{"a requester's think time does not count", []step{{"think", 156250 * time.Nanosecond}}},
		{"resent responses count the overrun's backlog", []step{{"rate", 125 * time.Microsecond}, {"again", 100 * time.Millisecond * 5 / (4 * (500 + 999))}, {"rate", 125 * time.Microsecond}}},
		{"a random loss cuts nothing", []step{{"random", 0}, {"rate", 125 * time.Microsecond}, {"random", 125 * time.Microsecond}}},
		{"a retry spoils the READ under way", []step{{"rate", 125 * time.Microsecond}, {"answered", 125 * time.Microsecond}, {"retry", 250 * time.Microsecond}, {"answered", 250 * time.Microsecond}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p readPace
			p.clean = true
			for i, s := range tc.steps {
				t0 := t0.Add(time.Duration(i) * time.Second) // each step a READ after a pause
				switch s.do {
				case "retry":
					p.retry(burst(&p, t0, 1000), 5)
				case "rate":
					p.retry(burst(&p, t0, 2000).Add(100*time.Millisecond), 1000)
				case "jitter": // 1000 responses in ten bursts 2 ms apart; the requester took 400 by +30 ms
					at := t0
					for i := range 1000 {
						if i%100 == 0 && i > 0 {
							at = at.Add(2 * time.Millisecond)
						}
						p.sent(at, wire.PSN(i), false)
					}
					p.retry(t0.Add(30*time.Millisecond), 400)
				case "think": // nine READs of 100 responses 10 ms apart, then one of 1000 10 ms on; the requester took 400 of it by 50 ms
					at := t0
					for i := range 1900 {
						if i%100 == 0 && i > 0 && i <= 900 {
							at = at.Add(10 * time.Millisecond)
						}
						p.sent(at, wire.PSN(i), i%100 == 0 && i <= 900)
					}
					p.retry(at.Add(50*time.Millisecond), 1300)
				case "again": // the responses asked for again (1000 on) overrun too, at once: 500 of them through behind the 999 the retry left
					at := p.last
					for i := range 2000 {
						p.sent(at, wire.PSN(1000+i), false)
					}
					p.retry(at.Add(100*time.Millisecond), 1500)
				case "random":
					p.retry(burst(&p, t0, 16), 10)
				case "answered":
					p.answered(readProbeBytes, t0)
				case "later": // a small READ seconds on
					p.answered(1, t0.Add(4*time.Second))
				case "half":
					p.answered(readProbeBytes/2, t0)
				}
				if p.gap != s.wantGap {
					t.Fatalf("step %d (%s): spacing %v, want %v", i, s.do, p.gap, s.wantGap)
				}
			}
		})
	}

	// The spacing holds each response after the one before; idle time
	// buys one response at most.
	var p readPace
	if _, held := p.holds(t0); held {
		t.Fatal("unpaced, a response was held")
	}
	p.retry(burst(&p, t0.Add(-100*time.Millisecond), 2000).Add(100*time.Millisecond), 1000) // 125 us
	p.sent(t0, 1000, false)
	if at, held := p.holds(t0.Add(100 * time.Microsecond)); !held || !at.Equal(t0.Add(125*time.Microsecond)) {
		t.Errorf("after one response the next is held until %v (%v), want +125us", at.Sub(t0), held)
	}
	p.sent(t0, 1001, false)
	if at, _ := p.holds(t0); !at.Equal(t0.Add(250 * time.Microsecond)) {
		t.Errorf("two responses sent at once: the next at %v, want +250us", at.Sub(t0))
	}
	now := t0.Add(time.Second)
	if _, held := p.holds(now); held {
		t.Fatal("a response was held after idle time")
	}
	p.sent(now, 1002, false) // late by far: it went at once, and one more may
	if at, held := p.holds(now); held || !at.Equal(now) {
		t.Errorf("after a long pause the second response may go at %v (held %v), want at once", at.Sub(now), held)
	}
	p.sent(now, 1003, false)
	if at, held := p.holds(now); !held || !at.Equal(now.Add(125*time.Microsecond)) {
		t.Errorf("after a long pause the third response may go at %v (held %v), want +125us", at.Sub(now), held)
	}
}

// A go-back-N retry of a READ (the rest of it, from the first response
// the requester lacks) that leaves more responses behind it than any
// receiver holds in flight (an overrun) paces the QP's responses at the
// rate that got through before it. A retry after a random loss, and a
// selective request for a range inside the READ, cut nothing and are
// answered at once.
func TestReadRetryPacesResponses(t *testing.T) {
	rt := newRespTest(t)
	const packets, mtu = 768, 1024
	key, va := rt.mr(make([]byte, packets*mtu), ibv.AccessRemoteRead)
	read := func(psn wire.PSN, from, n int) {
		rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAReadRequest, psn),
			RETH: wire.RETHFields{VA: va + uint64(from*mtu), RKey: key, DMALen: uint32(n * mtu)}})
	}
	answer := func() int { // the responses that go while the clock runs on by host round trips only
		n := 0
		for range 200 {
			rt.after(pcieLatency)
			n += len(rt.sent())
		}
		return n
	}
	cuts := func() uint64 { return rt.nic.counters.ReadPaceCuts.Load() }
	read(0, 0, packets)
	if n := answer(); n != packets {
		t.Fatalf("%d responses, want the READ's %d", n, packets)
	}
	rt.after(10 * time.Millisecond)
	read(10, 10, 2)             // selective: two responses inside the READ
	read(700, 700, packets-700) // the rest after a random loss near the end: 68 left behind
	if n := answer(); n != 2+packets-700 || cuts() != 0 {
		t.Fatalf("a selective request and a retry after a random loss: %d responses at once, %d cuts; want %d and none", n, cuts(), 2+packets-700)
	}

	rt.after(2 * readIdle) // a pause: the next READ's responses begin a sample
	start := rt.clock.Now()
	read(packets, 0, packets) // a new READ
	if n := answer(); n != packets {
		t.Fatalf("%d responses, want the second READ's %d", n, packets)
	}
	rt.after(10 * time.Millisecond)     // the requester took 200 of them, then lost the rest
	read(packets+200, 200, packets-200) // go-back-N after an overrun: 568 left behind
	gap := rt.clock.Now().Sub(start) * 5 / (4 * 200)
	rt.turns()
	got := rt.sent()
	if len(got) != 1 || got[0].BTH().PSN() != packets+200 || cuts() != 1 {
		t.Fatalf("after an overrun's retry %d responses went at once (want the first, PSN %d), %d cuts", len(got), packets+200, cuts())
	}
	// 200 responses came through in the time since the READ began: the
	// rest go at that rate, with a quarter to spare.
	n := 0
	for range 160 {
		rt.after(25 * time.Microsecond)
		n += len(rt.sent())
	}
	if want := int(4 * time.Millisecond / gap); n < want-2 || n > want+3 { // the sample begins at the first response, a little after
		t.Errorf("%d responses in the 4 ms after the retry, want %d (one each %v)", n, want, gap)
	}
}

// With selective repeat a duplicate READ asks for the responses its
// requester lacks: they go first, and the READs being answered go on
// after them, none dropped (go-back-N's retry drops the later answers,
// which its requester asks for again). Re-reads beyond maxRereads are
// dropped and counted, and never take a new READ's place.
func TestSelectiveRereadGoesFirst(t *testing.T) {
	const packets, mtu = 64, 1024
	for _, sr := range []bool{true, false} {
		rt := newRespTest(t)
		if sr {
			rt.q.Flags |= hostmem.QPFlagSelectiveRepeat
			rt.rcQPAt(respQP, rt.q)
		}
		key, va := rt.mr(make([]byte, 2*packets*mtu), ibv.AccessRemoteRead)
		read := func(psn wire.PSN, from, n int) {
			rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAReadRequest, psn),
				RETH: wire.RETHFields{VA: va + uint64(from*mtu), RKey: key, DMALen: uint32(n * mtu)}})
		}
		var psns []wire.PSN
		collect := func(steps int) {
			for range steps {
				rt.after(pcieLatency)
				for _, p := range rt.sent() {
					psns = append(psns, p.BTH().PSN())
				}
			}
		}
		read(0, 0, packets)
		read(packets, packets, packets)
		for len(psns) < 8 {
			collect(1)
		}
		before := len(psns)
		read(5, 5, 2) // the requester lacks responses 5 and 6
		collect(400)
		seen := map[wire.PSN]int{}
		for _, p := range psns {
			seen[p]++
		}
		if !sr {
			// Go-back-N: the retry's two, and the answers queued after it
			// dropped.
			if seen[packets] != 0 || seen[5] != 2 {
				t.Errorf("go-back-N: PSN 5 sent %d times, PSN %d %d times; want 2 and 0", seen[5], packets, seen[packets])
			}
			continue
		}
		if len(psns) != 2*packets+2 || seen[5] != 2 || seen[6] != 2 {
			t.Fatalf("selective: %d responses (PSN 5 %d times, 6 %d times), want %d with 5 and 6 twice", len(psns), seen[5], seen[6], 2*packets+2)
		}
		for psn := range wire.PSN(2 * packets) {
			if seen[psn] == 0 {
				t.Fatalf("selective: PSN %d never sent", psn)
			}
		}
		// The re-read went before the rest of the READ under way.
		for i, p := range psns[before:] {
			if p == 5 {
				if i > readBurst {
					t.Errorf("selective: the re-read went %d responses after it came, want at most %d", i, readBurst)
				}
				break
			}
		}

		// More re-reads than places: the extra are dropped and counted; a
		// new READ is answered in full.
		dropped := rt.nic.counters.DuplicateDropped.Load()
		for i := range maxRereads + 2 {
			read(wire.PSN(packets+i), packets+i, 32)
		}
		read(2*packets, 0, 4)
		psns = psns[:0]
		collect(400)
		if d := rt.nic.counters.DuplicateDropped.Load() - dropped; d != 2 || len(psns) != 32*maxRereads+4 {
			t.Errorf("selective: %d re-reads dropped, %d responses; want 2 dropped and %d responses", d, len(psns), 32*maxRereads+4)
		}
		// In the order asked: the oldest hole first.
		for i := 1; i < 32*maxRereads; i++ {
			if i%32 != 0 && psns[i] != psns[i-1]+1 || i%32 == 0 && psns[i] != psns[i-32]+1 {
				t.Fatalf("selective: re-read responses out of order at %d: %v", i, psns[:32*maxRereads])
			}
		}
	}
}

// A go-back-N requester that went back for READs and then went quiet (an
// rxe whose completer, retrying, dropped every response after one lost
// again) gets the READs from the PSN it went back to once more, unasked,
// as first sent: IdleQuiet after the last response, then twice as long,
// ReadRepairs times in all. A requester that never went back gets none.
func TestQuietReadRepair(t *testing.T) {
	for _, tc := range []struct {
		timeout uint8
		paced   bool
	}{{19, false}, {14, false}, {19, true}} {
		t.Run(fmt.Sprintf("timeout %d paced %v", tc.timeout, tc.paced), func(t *testing.T) { quietReadRepair(t, tc.timeout, tc.paced) })
	}
}

// quietReadRepair is TestQuietReadRepair on a QP whose local ACK timeout
// has the code given: one below readRepairTimeout (its peer's timer asks
// again soon) gets no repair, nor does one whose READ pace is on (paced:
// its requester was overrun, and its backlog may outlast the wait).
func quietReadRepair(t *testing.T, timeout uint8, paced bool) {
	rt := newRespTest(t)
	rt.q.Timeout = timeout
	rt.rcQPAt(respQP, rt.q)
	repairs := timeout >= readRepairTimeout && !paced
	const mtu = 1024
	data := make([]byte, 8*mtu)
	for i := range data {
		data[i] = byte(i/mtu + 1) // each packet's bytes its number + 1
	}
	key, va := rt.mr(data, ibv.AccessRemoteRead)
	read := func(psn wire.PSN, from, n int) {
		rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAReadRequest, psn),
			RETH: wire.RETHFields{VA: va + uint64(from*mtu), RKey: key, DMALen: uint32(n * mtu)}})
	}
	responses := func() []reply {
		rt.settle()
		var out []reply
		for _, p := range rt.sent() {
			psn := p.BTH().PSN()
			i := int(psn) % 8 // the READ at 8 reads the first packets again
			if want := data[i*mtu : (i+1)*mtu]; !bytes.Equal(p.Payload(), want) {
				t.Errorf("the response at PSN %d carries %d bytes of %d..., want packet %d's", psn, len(p.Payload()), p.Payload()[0], i)
			}
			out = append(out, reply{qpn: p.BTH().DestQP(), op: p.Opcode, psn: psn})
		}
		return out
	}
	read(0, 0, 4) // PSN 0-3
	read(4, 4, 4) // PSN 4-7
	if got := responses(); len(got) != 8 {
		t.Fatalf("%d responses to two READs of 4, want 8", len(got))
	}
	rt.after(2 * reliability.IdleQuiet)
	if got := rt.replies(); len(got) != 0 || rt.counters()["read_repairs"] != 0 {
		t.Fatalf("a requester that never went back got %v (read_repairs %d)", got, rt.counters()["read_repairs"])
	}

	if paced {
		rt.nic.qps[respQP].readPace.gap = readGapMax
	}
	// It lost PSN 2 and went back there: the rest of the first READ, then
	// the second again.
	read(2, 2, 2)
	read(4, 4, 4)
	retry := responses()
	for i := 0; paced && i < 20; i++ { // one response a millisecond
		rt.after(time.Millisecond)
		retry = append(retry, responses()...)
	}
	if len(retry) != 6 {
		t.Fatalf("%d responses to the retry, want 6", len(retry))
	}
	want := []reply{ // the first READ's as first sent (its MIDDLE at 2), then the second's
		{qpn: respPeer, op: wire.RCRDMAReadResponseMiddle, psn: 2}, {qpn: respPeer, op: wire.RCRDMAReadResponseLast, psn: 3},
		{qpn: respPeer, op: wire.RCRDMAReadResponseFirst, psn: 4}, {qpn: respPeer, op: wire.RCRDMAReadResponseMiddle, psn: 5},
		{qpn: respPeer, op: wire.RCRDMAReadResponseMiddle, psn: 6}, {qpn: respPeer, op: wire.RCRDMAReadResponseLast, psn: 7},
	}
	if !repairs {
		rt.after(time.Second)
		if got := rt.replies(); len(got) != 0 || rt.counters()["read_repairs"] != 0 {
			t.Fatalf("with a short local ACK timeout or the READ pace on: %d packets sent, read_repairs %d; want none", len(got), rt.counters()["read_repairs"])
		}
		return
	}
	wait := reliability.IdleQuiet
	for i := range reliability.ReadRepairs {
		rt.after(wait - time.Millisecond)
		if got := rt.replies(); len(got) != 0 {
			t.Fatalf("repair %d: %d responses before the wait", i+1, len(got))
		}
		rt.after(time.Millisecond)
		got := responses()
		if !slices.Equal(got, want) {
			t.Fatalf("repair %d sent %v, want %v", i+1, got, want)
		}
		wait *= 2
	}
	rt.after(time.Second)
	if got := rt.replies(); len(got) != 0 {
		t.Fatalf("%d responses after %d repairs", len(got), reliability.ReadRepairs)
	}
	if n := rt.counters()["read_repairs"]; n != 2*reliability.ReadRepairs {
		t.Errorf("read_repairs %d, want %d (two READs a repair)", n, 2*reliability.ReadRepairs)
	}

	// A new READ (8-11), the requester goes back to it, and a request
	// beyond it comes with one lost before (a gap at 12, NAKed): the gap's
	// quiet NAK goes behind the READs again, the two before the retry's
	// first seen whole (its first requests may have been lost).
	read(8, 0, 4)
	read(8, 0, 4)
	if got := responses(); len(got) != 8 {
		t.Fatalf("%d responses to a READ and its retry, want 8", len(got))
	}
	rt.request(wire.FrameFields{BTH: bth(wire.RCRDMAWriteOnly, 13), RETH: wire.RETHFields{VA: rt.va, RKey: rt.rkey, DMALen: 1}, Payload: []byte{1}})
	rt.settle()
	if got := rt.replies(); len(got) == 0 || !got[len(got)-1].nak || got[len(got)-1].psn != 12 {
		t.Fatalf("a request beyond a gap got %v, want the gap's NAK of 12 (behind an ACK)", got)
	}
	rt.after(reliability.GapQuiet)
	rt.settle()
	var got []wire.PSN
	nak := false
	for _, r := range rt.replies() {
		switch {
		case r.op != wire.RCAcknowledge:
			got = append(got, r.psn)
		case r.nak && r.psn == 12:
			nak = true
		}
	}
	if want := []wire.PSN{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !slices.Equal(got, want) || !nak {
		t.Fatalf("the quiet gap sent responses at %v and NAKed 12: %v; want the READs' %v and the NAK", got, nak, want)
	}
}
