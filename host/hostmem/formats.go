package hostmem

import (
	"encoding/binary"

	"github.com/softrnic/softrnic/host/ibv"
)

// The formats the driver and the NIC share in host memory: work queue
// entries, completion queue entries and context table entries. All are
// little-endian at fixed offsets; each type has Encode and Decode.

// Sizes of the shared structures.
const (
	SendWQESize = 128
	RecvWQESize = 64
	CQESize     = 32
	MaxSendSGE  = 4
	MaxRecvSGE  = 3
	MaxInline   = 64 // bytes of inline data a send WQE holds, in place of its SGEs
)

var le = binary.LittleEndian

// SGE is a scatter/gather element: a run of registered memory.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

func (s *SGE) encode(b []byte) {
	le.PutUint64(b[0:], s.Addr)
	le.PutUint32(b[8:], s.Length)
	le.PutUint32(b[12:], s.LKey)
}

func (s *SGE) decode(b []byte) {
	*s = SGE{Addr: le.Uint64(b[0:]), Length: le.Uint32(b[8:]), LKey: le.Uint32(b[12:])}
}

// SendWQE is a send work request in a send queue.
//
//	0  wr_id          8  opcode flags nsge av   imm/inv(4)
//	16 rkey  dest QPN 24 remote address      32 compare      40 swap/add
//	48 qkey  AH index 56 inline length (4)   64 four SGEs of 16 bytes, or inline data
//
// A UD work request carries its address vector inline, as hardware NICs'
// datagram segments do: with av set, bytes 96-127 hold the destination MAC
// and GID instead of the third and fourth SGE.
type SendWQE struct {
	WRID       uint64
	Opcode     ibv.WROpcode
	Flags      ibv.SendFlags
	NumSGE     uint8
	Imm        uint32 // immediate data, or the R_Key to invalidate
	RKey       uint32
	DestQPN    uint32 // UD
	RemoteAddr uint64
	Compare    uint64
	SwapAdd    uint64
	QKey       uint32 // UD
	AH         uint32 // UD: address handle index
	SGE        [MaxSendSGE]SGE
	InlineLen  uint32          // with IBV_SEND_INLINE: bytes of Inline used (no SGEs then)
	Inline     [MaxInline]byte // the data itself, copied at post time
	HasAV      bool            // UD: DestMAC and DestGID are set (at most two SGEs then)
	DestMAC    [6]byte         // UD
	DestGID    [16]byte        // UD
	TClass     uint8           // UD: the AV's traffic class (its DSCP bits are sent)
}

// Encode writes the WQE into b (SendWQESize bytes).
func (w *SendWQE) Encode(b []byte) {
	_ = b[SendWQESize-1]
	le.PutUint64(b[0:], w.WRID)
	b[8], b[9], b[10], b[11] = byte(w.Opcode), byte(w.Flags), w.NumSGE, 0
	if w.HasAV {
		b[11] = 1
	}
	le.PutUint32(b[12:], w.Imm)
	le.PutUint32(b[16:], w.RKey)
	le.PutUint32(b[20:], w.DestQPN)
	le.PutUint64(b[24:], w.RemoteAddr)
	le.PutUint64(b[32:], w.Compare)
	le.PutUint64(b[40:], w.SwapAdd)
	le.PutUint32(b[48:], w.QKey)
	le.PutUint32(b[52:], w.AH)
	le.PutUint64(b[56:], uint64(w.InlineLen))
	for i := range w.SGE {
		w.SGE[i].encode(b[64+16*i:])
	}
	if w.InlineLen > 0 {
		copy(b[64:64+MaxInline], w.Inline[:])
	}
	if w.HasAV {
		clear(b[96:128])
		copy(b[96:102], w.DestMAC[:])
		b[102] = w.TClass
		copy(b[104:120], w.DestGID[:])
	}
}

// Decode reads a WQE from b.
func (w *SendWQE) Decode(b []byte) {
	_ = b[SendWQESize-1]
	*w = SendWQE{
		WRID: le.Uint64(b[0:]), Opcode: ibv.WROpcode(b[8]), Flags: ibv.SendFlags(b[9]), NumSGE: b[10], Imm: le.Uint32(b[12:]),
		RKey: le.Uint32(b[16:]), DestQPN: le.Uint32(b[20:]), RemoteAddr: le.Uint64(b[24:]),
		Compare: le.Uint64(b[32:]), SwapAdd: le.Uint64(b[40:]), QKey: le.Uint32(b[48:]), AH: le.Uint32(b[52:]),
	}
	if n := le.Uint32(b[56:]); n > 0 && n <= MaxInline {
		w.InlineLen = n
		copy(w.Inline[:], b[64:64+MaxInline])
		return
	}
	if b[11] == 1 {
		w.HasAV = true
		copy(w.DestMAC[:], b[96:102])
		w.TClass = b[102]
		copy(w.DestGID[:], b[104:120])
		w.SGE[0].decode(b[64:])
		w.SGE[1].decode(b[80:])
		return
	}
	for i := range w.SGE {
		w.SGE[i].decode(b[64+16*i:])
	}
}

// RecvWQE is a receive work request in a receive queue or SRQ.
type RecvWQE struct {
	WRID   uint64
	NumSGE uint8
	SGE    [MaxRecvSGE]SGE
}

// Encode writes the WQE into b (RecvWQESize bytes).
func (w *RecvWQE) Encode(b []byte) {
	_ = b[RecvWQESize-1]
	le.PutUint64(b[0:], w.WRID)
	le.PutUint64(b[8:], uint64(w.NumSGE))
	for i := range w.SGE {
		w.SGE[i].encode(b[16+16*i:])
	}
}

// Decode reads a WQE from b.
func (w *RecvWQE) Decode(b []byte) {
	_ = b[RecvWQESize-1]
	*w = RecvWQE{WRID: le.Uint64(b[0:]), NumSGE: uint8(le.Uint64(b[8:]))}
	for i := range w.SGE {
		w.SGE[i].decode(b[16+16*i:])
	}
}

// CQE is a completion queue entry. Owner flips each time the NIC goes round
// the ring, so the driver tells new entries from old without a shared index.
type CQE struct {
	WRID    uint64
	Status  ibv.WCStatus
	Opcode  ibv.WCOpcode // IBV_WC_RECV is 128: fits a byte
	Flags   ibv.WCFlags
	Owner   uint8
	ByteLen uint32
	QPN     uint32
	SrcQP   uint32
	Imm     uint32 // immediate data or invalidated R_Key
	// WQEIndex is the work queue index of the WQE completed: the driver
	// learns from it how far the NIC has consumed its queue.
	WQEIndex uint32
}

// Encode writes the CQE into b (CQESize bytes); the owner byte last, so
// that a driver polling the ring never sees a half-written entry as new.
func (c *CQE) Encode(b []byte) {
	_ = b[CQESize-1]
	le.PutUint64(b[0:], c.WRID)
	b[8], b[9], b[10] = byte(c.Status), byte(c.Opcode), byte(c.Flags)
	le.PutUint32(b[12:], c.ByteLen)
	le.PutUint32(b[16:], c.QPN)
	le.PutUint32(b[20:], c.SrcQP)
	le.PutUint32(b[24:], c.Imm)
	le.PutUint32(b[28:], c.WQEIndex)
	b[11] = c.Owner
}

// Decode reads a CQE from b.
func (c *CQE) Decode(b []byte) {
	_ = b[CQESize-1]
	*c = CQE{
		WRID: le.Uint64(b[0:]), Status: ibv.WCStatus(b[8]), Opcode: ibv.WCOpcode(b[9]), Flags: ibv.WCFlags(b[10]), Owner: b[11],
		ByteLen: le.Uint32(b[12:]), QPN: le.Uint32(b[16:]), SrcQP: le.Uint32(b[20:]), Imm: le.Uint32(b[24:]),
		WQEIndex: le.Uint32(b[28:]),
	}
}

// MPTEntry describes a memory region to the NIC (an MPT entry, 64 bytes).
// Keys are index<<8 | Key.
type MPTEntry struct {
	Valid     bool
	Key       uint8 // the key's low byte
	Access    ibv.Access
	PD        uint32
	VA        uint64 // the region's first address, as the keys' users see it
	Length    uint64
	FirstMTT  uint64
	PageShift uint8
}

// Encode writes the entry into b (64 bytes).
func (m *MPTEntry) Encode(b []byte) {
	_ = b[63]
	clear(b[:64])
	if m.Valid {
		b[0] = 1
	}
	b[1], b[7] = m.Key, m.PageShift
	le.PutUint16(b[2:], uint16(m.Access))
	le.PutUint32(b[8:], m.PD)
	le.PutUint64(b[16:], m.VA)
	le.PutUint64(b[24:], m.Length)
	le.PutUint64(b[32:], m.FirstMTT)
}

// Decode reads an entry from b.
func (m *MPTEntry) Decode(b []byte) {
	_ = b[63]
	*m = MPTEntry{
		Valid: b[0] == 1, Key: b[1], Access: ibv.Access(le.Uint16(b[2:])), PageShift: b[7], PD: le.Uint32(b[8:]),
		VA: le.Uint64(b[16:]), Length: le.Uint64(b[24:]), FirstMTT: le.Uint64(b[32:]),
	}
}

// QPCEntry is a queue pair context (128 bytes): what the driver sets with
// Modify, and, in the last 32 bytes, the NIC's own running state.
//
//	0  valid type state mtu access(2) timeout retry rnr_retry min_rnr max_rd max_dest_rd
//	12 pd  16 send CQ  20 recv CQ  24 SRQ+1  28 dest QPN  32 qkey  36 SQ size  40 RQ size
//	44 SQ PSN  48 RQ PSN  52 UDP source port  54 dest MAC  64 SQ base  72 RQ base  80 dest GID
//	96 NIC state: SQ consumer, RQ consumer, next PSN, expected PSN, MSN, …
type QPCEntry struct {
	Valid                        bool
	Type                         ibv.QPType
	State                        ibv.QPState
	MTU                          uint8 // enum ibv_mtu
	Access                       ibv.Access
	Timeout, RetryCnt, RNRRetry  uint8
	MinRNRTimer                  uint8
	MaxRdAtomic, MaxDestRdAtomic uint8
	PD, SendCQ, RecvCQ           uint32
	SRQ                          uint32 // SRQ number + 1; 0 without one
	DestQPN, QKey                uint32
	SQSize, RQSize               uint32 // entries, powers of two
	SQPSN, RQPSN                 uint32
	SrcPort                      uint16
	DestMAC                      [6]byte
	SQBase, RQBase               uint64
	DestGID                      [16]byte
	Flags                        uint32    // QPFlag* (16 bits in the entry)
	TClass                       uint8     // the IP header's DSCP (the traffic class's upper six bits; the ECN bits are the NIC's)
	NIC                          [8]uint32 // the NIC's running state, kept in the context
}

// QPC flags.
const (
	// QPFlagSelectiveRepeat: the QP recovers RC losses by selective
	// repeat, which both ends must have enabled (package reliability).
	QPFlagSelectiveRepeat = 1 << 0
	// QPFlagRNRRepair: the peer's requester retries without end after an
	// RNR NAK, so a go-back-N gap a repeated sequence NAK did not repair
	// is asked for with an RNR NAK (verbs.QPAttr.PeerRNRRetry).
	QPFlagRNRRepair = 1 << 1
	// QPFlagIdleProbe: a go-back-N responder whose application waits for
	// a message (a receive posted, or requests had before)
	// NAKs the expected PSN when the peer stays quiet
	// (verbs.QPAttr.IdleProbe, reliability.QuietIdle).
	QPFlagIdleProbe = 1 << 2
)

// Encode writes the entry into b (128 bytes).
func (q *QPCEntry) Encode(b []byte) {
	_ = b[127]
	if q.Valid {
		b[0] = 1
	} else {
		b[0] = 0
	}
	b[1], b[2], b[3] = byte(q.Type), byte(q.State), q.MTU
	le.PutUint16(b[4:], uint16(q.Access))
	b[6], b[7], b[8], b[9], b[10], b[11] = q.Timeout, q.RetryCnt, q.RNRRetry, q.MinRNRTimer, q.MaxRdAtomic, q.MaxDestRdAtomic
	for i, v := range []uint32{q.PD, q.SendCQ, q.RecvCQ, q.SRQ, q.DestQPN, q.QKey, q.SQSize, q.RQSize, q.SQPSN, q.RQPSN} {
		le.PutUint32(b[12+4*i:], v)
	}
	le.PutUint16(b[52:], q.SrcPort)
	copy(b[54:60], q.DestMAC[:])
	le.PutUint16(b[60:], uint16(q.Flags))
	b[62], b[63] = q.TClass, 0
	le.PutUint64(b[64:], q.SQBase)
	le.PutUint64(b[72:], q.RQBase)
	copy(b[80:96], q.DestGID[:])
	for i, v := range q.NIC {
		le.PutUint32(b[96+4*i:], v)
	}
}

// Decode reads an entry from b.
func (q *QPCEntry) Decode(b []byte) {
	_ = b[127]
	*q = QPCEntry{
		Valid: b[0] == 1, Type: ibv.QPType(b[1]), State: ibv.QPState(b[2]), MTU: b[3], Access: ibv.Access(le.Uint16(b[4:])),
		Timeout: b[6], RetryCnt: b[7], RNRRetry: b[8], MinRNRTimer: b[9], MaxRdAtomic: b[10], MaxDestRdAtomic: b[11],
		SrcPort: le.Uint16(b[52:]), SQBase: le.Uint64(b[64:]), RQBase: le.Uint64(b[72:]),
	}
	for i, p := range []*uint32{&q.PD, &q.SendCQ, &q.RecvCQ, &q.SRQ, &q.DestQPN, &q.QKey, &q.SQSize, &q.RQSize, &q.SQPSN, &q.RQPSN} {
		*p = le.Uint32(b[12+4*i:])
	}
	copy(q.DestMAC[:], b[54:60])
	q.Flags, q.TClass = uint32(le.Uint16(b[60:])), b[62]
	copy(q.DestGID[:], b[80:96])
	for i := range q.NIC {
		q.NIC[i] = le.Uint32(b[96+4*i:])
	}
}

// RingEntry describes a completion queue or a shared receive queue (the
// CQC and SRQC entries, 64 bytes): where its ring lives, how big it is,
// and the NIC's index into it.
type RingEntry struct {
	Valid    bool
	PD       uint32 // SRQs
	Size     uint32 // entries, a power of two
	Base     uint64
	Producer uint32 // CQ: the NIC's next entry; SRQ: the driver's posted count
	Consumer uint32 // SRQ: the NIC's next entry
	Limit    uint32
}

// Encode writes the entry into b (64 bytes).
func (r *RingEntry) Encode(b []byte) {
	_ = b[63]
	clear(b[:64])
	if r.Valid {
		b[0] = 1
	}
	le.PutUint32(b[4:], r.PD)
	le.PutUint32(b[8:], r.Size)
	le.PutUint64(b[16:], r.Base)
	le.PutUint32(b[24:], r.Producer)
	le.PutUint32(b[28:], r.Consumer)
	le.PutUint32(b[32:], r.Limit)
}

// Decode reads an entry from b.
func (r *RingEntry) Decode(b []byte) {
	_ = b[63]
	*r = RingEntry{Valid: b[0] == 1, PD: le.Uint32(b[4:]), Size: le.Uint32(b[8:]), Base: le.Uint64(b[16:]),
		Producer: le.Uint32(b[24:]), Consumer: le.Uint32(b[28:]), Limit: le.Uint32(b[32:])}
}
