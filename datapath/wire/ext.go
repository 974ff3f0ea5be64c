package wire

import "encoding/binary"

// Extension header sizes.
const (
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	CNPLen          = 16 // the reserved block a CNP carries after its BTH
)

// RETH is a view of an RDMA Extended Transport Header: VA, R_Key, DMA length.
type RETH []byte

func (h RETH) VA() uint64         { return binary.BigEndian.Uint64(h[0:8]) }
func (h RETH) RKey() uint32       { return binary.BigEndian.Uint32(h[8:12]) }
func (h RETH) DMALen() uint32     { return binary.BigEndian.Uint32(h[12:16]) }
func (h RETH) SetVA(v uint64)     { binary.BigEndian.PutUint64(h[0:8], v) }
func (h RETH) SetRKey(v uint32)   { binary.BigEndian.PutUint32(h[8:12], v) }
func (h RETH) SetDMALen(v uint32) { binary.BigEndian.PutUint32(h[12:16], v) }

// RETHFields describes a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// AETH is a view of an ACK Extended Transport Header: syndrome and MSN.
type AETH []byte

func (h AETH) Syndrome() Syndrome     { return Syndrome(h[0]) }
func (h AETH) MSN() uint32            { return uint24(h[1:4]) }
func (h AETH) SetSyndrome(s Syndrome) { h[0] = byte(s) }
func (h AETH) SetMSN(v uint32)        { putUint24(h[1:4], v) }

// AETHFields describes an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

// AtomicETH is a view of an Atomic Extended Transport Header.
type AtomicETH []byte

func (h AtomicETH) VA() uint64          { return binary.BigEndian.Uint64(h[0:8]) }
func (h AtomicETH) RKey() uint32        { return binary.BigEndian.Uint32(h[8:12]) }
func (h AtomicETH) SwapAdd() uint64     { return binary.BigEndian.Uint64(h[12:20]) }
func (h AtomicETH) Compare() uint64     { return binary.BigEndian.Uint64(h[20:28]) }
func (h AtomicETH) SetVA(v uint64)      { binary.BigEndian.PutUint64(h[0:8], v) }
func (h AtomicETH) SetRKey(v uint32)    { binary.BigEndian.PutUint32(h[8:12], v) }
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:20], v) }
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:28], v) }

// AtomicETHFields describes an AtomicETH. SwapAdd is the swap value of a
// compare-and-swap or the addend of a fetch-and-add.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// AtomicAckETH is a view of an Atomic ACK Extended Transport Header.
type AtomicAckETH []byte

func (h AtomicAckETH) OrigData() uint64     { return binary.BigEndian.Uint64(h[0:8]) }
func (h AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(h[0:8], v) }

// ImmDt is a view of the Immediate Data header.
type ImmDt []byte

func (h ImmDt) Imm() uint32     { return binary.BigEndian.Uint32(h[0:4]) }
func (h ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }

// IETH is a view of the Invalidate Extended Transport Header.
type IETH []byte

func (h IETH) RKey() uint32     { return binary.BigEndian.Uint32(h[0:4]) }
func (h IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }

// DETH is a view of a Datagram Extended Transport Header.
type DETH []byte

func (h DETH) QKey() uint32      { return binary.BigEndian.Uint32(h[0:4]) }
func (h DETH) SrcQP() uint32     { return uint24(h[5:8]) }
func (h DETH) SetQKey(v uint32)  { binary.BigEndian.PutUint32(h[0:4], v) }
func (h DETH) SetSrcQP(v uint32) { h[4] = 0; putUint24(h[5:8], v) }

// DETHFields describes a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}
