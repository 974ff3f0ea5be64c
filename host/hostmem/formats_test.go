package hostmem_test

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/softrnic/softrnic/host/hostmem"
	"github.com/softrnic/softrnic/host/ibv"
)

// TestFormatsRoundTrip encodes random values of every shared format and
// decodes them back.
func TestFormatsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	sge := func() hostmem.SGE { return hostmem.SGE{Addr: r.Uint64(), Length: r.Uint32(), LKey: r.Uint32()} }
	for range 1000 {
		w := hostmem.SendWQE{WRID: r.Uint64(), Opcode: ibv.WROpcode(r.Uint32()), Flags: ibv.SendFlags(r.Uint32()), NumSGE: uint8(r.Uint32()),
			Imm: r.Uint32(), RKey: r.Uint32(), DestQPN: r.Uint32(), RemoteAddr: r.Uint64(), Compare: r.Uint64(),
			SwapAdd: r.Uint64(), QKey: r.Uint32(), AH: r.Uint32()}
		for i := range w.SGE {
			w.SGE[i] = sge()
		}
		b := make([]byte, hostmem.SendWQESize)
		w.Encode(b)
		var got hostmem.SendWQE
		got.Decode(b)
		if got != w {
			t.Fatalf("SendWQE %+v -> %+v", w, got)
		}
		iw := hostmem.SendWQE{WRID: r.Uint64(), Opcode: 2, InlineLen: 1 + r.Uint32()%hostmem.MaxInline}
		for i := range iw.Inline[:iw.InlineLen] {
			iw.Inline[i] = byte(r.Uint32())
		}
		iw.Encode(b)
		var igot hostmem.SendWQE
		igot.Decode(b)
		if igot != iw {
			t.Fatalf("inline SendWQE %+v -> %+v", iw, igot)
		}
		w.HasAV, w.SGE[2], w.SGE[3] = true, hostmem.SGE{}, hostmem.SGE{}
		w.DestMAC[2], w.DestGID[15] = byte(r.Uint32()), byte(r.Uint32())
		w.Encode(b)
		got.Decode(b)
		if got != w {
			t.Fatalf("UD SendWQE %+v -> %+v", w, got)
		}
		rw := hostmem.RecvWQE{WRID: r.Uint64(), NumSGE: uint8(r.Uint32())}
		for i := range rw.SGE {
			rw.SGE[i] = sge()
		}
		rb := make([]byte, hostmem.RecvWQESize)
		rw.Encode(rb)
		var rgot hostmem.RecvWQE
		rgot.Decode(rb)
		if rgot != rw {
			t.Fatalf("RecvWQE %+v -> %+v", rw, rgot)
		}
		c := hostmem.CQE{WRID: r.Uint64(), Status: ibv.WCStatus(r.Uint32()), Opcode: ibv.WCOpcode(r.Uint32()), Flags: ibv.WCFlags(r.Uint32()),
			Owner: uint8(r.Uint32()), ByteLen: r.Uint32(), QPN: r.Uint32(), SrcQP: r.Uint32(), Imm: r.Uint32(), WQEIndex: r.Uint32()}
		cb := make([]byte, hostmem.CQESize)
		c.Encode(cb)
		var cgot hostmem.CQE
		cgot.Decode(cb)
		if !reflect.DeepEqual(cgot, c) {
			t.Fatalf("CQE %+v -> %+v", c, cgot)
		}
		m := hostmem.MPTEntry{Valid: r.IntN(2) == 1, Key: uint8(r.Uint32()), Access: ibv.Access(r.Uint32()), PD: r.Uint32(),
			VA: r.Uint64(), Length: r.Uint64(), FirstMTT: r.Uint64(), PageShift: uint8(r.Uint32())}
		mb := make([]byte, 64)
		m.Encode(mb)
		var mgot hostmem.MPTEntry
		mgot.Decode(mb)
		if mgot != m {
			t.Fatalf("MPT %+v -> %+v", m, mgot)
		}
		q := hostmem.QPCEntry{Valid: true, Type: 2, State: 3, MTU: 3, Access: ibv.Access(r.Uint32()), Timeout: 14, RetryCnt: 7,
			RNRRetry: 7, MinRNRTimer: 12, MaxRdAtomic: 16, MaxDestRdAtomic: 16, PD: r.Uint32(), SendCQ: r.Uint32(),
			RecvCQ: r.Uint32(), SRQ: r.Uint32(), DestQPN: r.Uint32(), QKey: r.Uint32(), SQSize: r.Uint32(), RQSize: r.Uint32(),
			SQPSN: r.Uint32(), RQPSN: r.Uint32(), SrcPort: uint16(r.Uint32()), SQBase: r.Uint64(), RQBase: r.Uint64()}
		q.DestMAC[3], q.DestGID[15], q.NIC[7] = 9, 8, r.Uint32()
		qb := make([]byte, 128)
		q.Encode(qb)
		var qgot hostmem.QPCEntry
		qgot.Decode(qb)
		if qgot != q {
			t.Fatalf("QPC %+v -> %+v", q, qgot)
		}
		re := hostmem.RingEntry{Valid: true, PD: r.Uint32(), Size: r.Uint32(), Base: r.Uint64(), Producer: r.Uint32(), Consumer: r.Uint32(), Limit: r.Uint32()}
		rb2 := make([]byte, 64)
		re.Encode(rb2)
		var regot hostmem.RingEntry
		regot.Decode(rb2)
		if regot != re {
			t.Fatalf("ring entry %+v -> %+v", re, regot)
		}
	}
}
