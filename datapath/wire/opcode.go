package wire

// Opcode is the BTH opcode: the transport in bits 7-5, the operation in bits
// 4-0.
type Opcode uint8

// Transport is the transport service in an opcode's top three bits.
type Transport uint8

// Transports.
const (
	TransportRC  Transport = 0x00
	TransportUC  Transport = 0x20
	TransportRD  Transport = 0x40
	TransportUD  Transport = 0x60
	TransportCNP Transport = 0x80
)

func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	}
	return "reserved"
}

// RC opcodes.
const (
	RCSendFirst                  Opcode = 0x00
	RCSendMiddle                 Opcode = 0x01
	RCSendLast                   Opcode = 0x02
	RCSendLastWithImmediate      Opcode = 0x03
	RCSendOnly                   Opcode = 0x04
	RCSendOnlyWithImmediate      Opcode = 0x05
	RCRDMAWriteFirst             Opcode = 0x06
	RCRDMAWriteMiddle            Opcode = 0x07
	RCRDMAWriteLast              Opcode = 0x08
	RCRDMAWriteLastWithImmediate Opcode = 0x09
	RCRDMAWriteOnly              Opcode = 0x0a
	RCRDMAWriteOnlyWithImmediate Opcode = 0x0b
	RCRDMAReadRequest            Opcode = 0x0c
	RCRDMAReadResponseFirst      Opcode = 0x0d
	RCRDMAReadResponseMiddle     Opcode = 0x0e
	RCRDMAReadResponseLast       Opcode = 0x0f
	RCRDMAReadResponseOnly       Opcode = 0x10
	RCAcknowledge                Opcode = 0x11
	RCAtomicAcknowledge          Opcode = 0x12
	RCCompareSwap                Opcode = 0x13
	RCFetchAdd                   Opcode = 0x14
	RCSendLastWithInvalidate     Opcode = 0x16
	RCSendOnlyWithInvalidate     Opcode = 0x17
)

// UC opcodes.
const (
	UCSendFirst                  = Opcode(TransportUC) | RCSendFirst
	UCSendMiddle                 = Opcode(TransportUC) | RCSendMiddle
	UCSendLast                   = Opcode(TransportUC) | RCSendLast
	UCSendLastWithImmediate      = Opcode(TransportUC) | RCSendLastWithImmediate
	UCSendOnly                   = Opcode(TransportUC) | RCSendOnly
	UCSendOnlyWithImmediate      = Opcode(TransportUC) | RCSendOnlyWithImmediate
	UCRDMAWriteFirst             = Opcode(TransportUC) | RCRDMAWriteFirst
	UCRDMAWriteMiddle            = Opcode(TransportUC) | RCRDMAWriteMiddle
	UCRDMAWriteLast              = Opcode(TransportUC) | RCRDMAWriteLast
	UCRDMAWriteLastWithImmediate = Opcode(TransportUC) | RCRDMAWriteLastWithImmediate
	UCRDMAWriteOnly              = Opcode(TransportUC) | RCRDMAWriteOnly
	UCRDMAWriteOnlyWithImmediate = Opcode(TransportUC) | RCRDMAWriteOnlyWithImmediate
)

// UD opcodes and the RoCEv2 congestion notification packet.
const (
	UDSendOnly              = Opcode(TransportUD) | RCSendOnly
	UDSendOnlyWithImmediate = Opcode(TransportUD) | RCSendOnlyWithImmediate
	CNP                     = Opcode(TransportCNP) | 0x01
)

// Header is a set of extension headers, one bit each, in wire order.
type Header uint8

// Extension headers, in the order they follow the BTH.
const (
	HdrDETH Header = 1 << iota
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrCNP     // the 16 reserved bytes of a CNP
	numHeaders = iota
)

var headerLens = [numHeaders]uint8{DETHLen, RETHLen, AtomicETHLen, AETHLen, AtomicAckETHLen, ImmDtLen, IETHLen, CNPLen}
var headerNames = [numHeaders]string{"DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNP"}

func (h Header) String() string {
	s := ""
	for i := range numHeaders {
		if h&(1<<i) != 0 {
			if s != "" {
				s += "+"
			}
			s += headerNames[i]
		}
	}
	return s
}

// OpFlags describe what an opcode is.
type OpFlags uint16

// Opcode properties.
const (
	OpRequest    OpFlags = 1 << iota // sent by a requester
	OpResponse                       // sent by a responder (ACK, READ response, atomic ACK)
	OpFirst                          // first packet of a multi-packet message
	OpMiddle                         // middle packet
	OpLast                           // last packet
	OpOnly                           // the message's only packet
	OpPayload                        // carries a payload
	OpSend                           // SEND family
	OpWrite                          // RDMA WRITE family
	OpRead                           // RDMA READ request or response
	OpAtomic                         // atomic request or atomic acknowledge
	OpAck                            // ACKNOWLEDGE
	OpImm                            // carries immediate data
	OpInvalidate                     // carries an R_Key to invalidate
)

// OpInfo is one row of the opcode table.
type OpInfo struct {
	Name      string
	Valid     bool
	Transport Transport
	Headers   Header
	Flags     OpFlags
	// HeaderLen is the length of the BTH and all extension headers.
	HeaderLen int
	offsets   [numHeaders]uint8 // offset of each present header from the BTH start
}

// Has reports whether the opcode carries extension header h.
func (i *OpInfo) Has(h Header) bool { return i.Headers&h != 0 }

// Is reports whether every flag in f is set.
func (i *OpInfo) Is(f OpFlags) bool { return i.Flags&f == f }

// Offset returns the offset of extension header h from the start of the BTH,
// or -1 if the opcode does not carry it.
func (i *OpInfo) Offset(h Header) int {
	if i.Headers&h == 0 {
		return -1
	}
	for b := range numHeaders {
		if h == 1<<b {
			return int(i.offsets[b])
		}
	}
	return -1
}

var opTable [256]OpInfo

// Info returns the opcode's row of the table; Valid is false for an opcode
// no transport defines.
func (o Opcode) Info() *OpInfo { return &opTable[o] }

// Valid reports whether the opcode is in the table.
func (o Opcode) Valid() bool { return opTable[o].Valid }

// Transport returns the opcode's transport.
func (o Opcode) Transport() Transport { return Transport(o & 0xe0) }

// Base returns the operation without the transport bits.
func (o Opcode) Base() Opcode { return o & 0x1f }

func (o Opcode) String() string {
	if i := &opTable[o]; i.Valid {
		return i.Name
	}
	const hexDigits = "0123456789abcdef"
	return "OPCODE_0x" + string([]byte{hexDigits[o>>4], hexDigits[o&0xf]})
}

// baseOps lists the operations by their low five bits.
var baseOps = []struct {
	op      Opcode
	name    string
	headers Header
	flags   OpFlags
}{
	{RCSendFirst, "SEND_FIRST", 0, OpRequest | OpSend | OpFirst | OpPayload},
	{RCSendMiddle, "SEND_MIDDLE", 0, OpRequest | OpSend | OpMiddle | OpPayload},
	{RCSendLast, "SEND_LAST", 0, OpRequest | OpSend | OpLast | OpPayload},
	{RCSendLastWithImmediate, "SEND_LAST_WITH_IMMEDIATE", HdrImmDt, OpRequest | OpSend | OpLast | OpPayload | OpImm},
	{RCSendOnly, "SEND_ONLY", 0, OpRequest | OpSend | OpOnly | OpPayload},
	{RCSendOnlyWithImmediate, "SEND_ONLY_WITH_IMMEDIATE", HdrImmDt, OpRequest | OpSend | OpOnly | OpPayload | OpImm},
	{RCRDMAWriteFirst, "RDMA_WRITE_FIRST", HdrRETH, OpRequest | OpWrite | OpFirst | OpPayload},
	{RCRDMAWriteMiddle, "RDMA_WRITE_MIDDLE", 0, OpRequest | OpWrite | OpMiddle | OpPayload},
	{RCRDMAWriteLast, "RDMA_WRITE_LAST", 0, OpRequest | OpWrite | OpLast | OpPayload},
	{RCRDMAWriteLastWithImmediate, "RDMA_WRITE_LAST_WITH_IMMEDIATE", HdrImmDt, OpRequest | OpWrite | OpLast | OpPayload | OpImm},
	{RCRDMAWriteOnly, "RDMA_WRITE_ONLY", HdrRETH, OpRequest | OpWrite | OpOnly | OpPayload},
	{RCRDMAWriteOnlyWithImmediate, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HdrRETH | HdrImmDt, OpRequest | OpWrite | OpOnly | OpPayload | OpImm},
	{RCRDMAReadRequest, "RDMA_READ_REQUEST", HdrRETH, OpRequest | OpRead | OpOnly},
	{RCRDMAReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", HdrAETH, OpResponse | OpRead | OpFirst | OpPayload},
	{RCRDMAReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", 0, OpResponse | OpRead | OpMiddle | OpPayload},
	{RCRDMAReadResponseLast, "RDMA_READ_RESPONSE_LAST", HdrAETH, OpResponse | OpRead | OpLast | OpPayload},
	{RCRDMAReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", HdrAETH, OpResponse | OpRead | OpOnly | OpPayload},
	{RCAcknowledge, "ACKNOWLEDGE", HdrAETH, OpResponse | OpAck | OpOnly},
	{RCAtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", HdrAETH | HdrAtomicAckETH, OpResponse | OpAtomic | OpOnly},
	{RCCompareSwap, "COMPARE_SWAP", HdrAtomicETH, OpRequest | OpAtomic | OpOnly},
	{RCFetchAdd, "FETCH_ADD", HdrAtomicETH, OpRequest | OpAtomic | OpOnly},
	{RCSendLastWithInvalidate, "SEND_LAST_WITH_INVALIDATE", HdrIETH, OpRequest | OpSend | OpLast | OpPayload | OpInvalidate},
	{RCSendOnlyWithInvalidate, "SEND_ONLY_WITH_INVALIDATE", HdrIETH, OpRequest | OpSend | OpOnly | OpPayload | OpInvalidate},
}

func init() {
	for _, b := range baseOps {
		addOp(TransportRC, b.op, "RC_"+b.name, b.headers, b.flags)
		if b.op <= RCRDMAWriteOnlyWithImmediate {
			addOp(TransportUC, b.op, "UC_"+b.name, b.headers, b.flags)
		}
		if b.op == RCSendOnly || b.op == RCSendOnlyWithImmediate {
			addOp(TransportUD, b.op, "UD_"+b.name, b.headers|HdrDETH, b.flags)
		}
	}
	addOp(TransportCNP, CNP.Base(), "CNP", HdrCNP, 0)
}

func addOp(t Transport, base Opcode, name string, headers Header, flags OpFlags) {
	i := &opTable[Opcode(t)|base]
	*i = OpInfo{Name: name, Valid: true, Transport: t, Headers: headers, Flags: flags}
	off := BTHLen
	for b := range numHeaders {
		if headers&(1<<b) != 0 {
			i.offsets[b] = uint8(off)
			off += int(headerLens[b])
		}
	}
	i.HeaderLen = off
}
