package cm

import (
	"encoding/binary"
	"fmt"
)

// Private data room of each message, in bytes.
const (
	REQPrivate  = 92
	MRAPrivate  = 222
	REJPrivate  = 148
	REPPrivate  = 196
	RTUPrivate  = 224
	DREQPrivate = 220
	DREPPrivate = 224
)

// Transport service types of a REQ.
const (
	TransportRC = 0
	TransportUC = 1
)

// Path is a REQ's primary path: on RoCE the GIDs carry the addresses (the
// LIDs are zero) and the hop limit, traffic class and flow label those of
// the GRH (the IP header).
type Path struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID [16]byte
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits: 4.096 us x 2^t
}

// REQ asks for a connection.
type REQ struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8  // READs/atomics this side answers at once
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8  // READs/atomics this side has out at once
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits: how long to wait for the answer, 4.096 us x 2^t
	TransportType           uint8  // 2 bits: TransportRC or TransportUC
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits: the PSN the REQ's sender expects first (the passive side sends from it), as Linux's CM reads it
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits, the ibv_mtu enum
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8  // 3 bits
	Primary                 Path   // bytes 52-95; the alternate path (96-139) is left empty
	Private                 []byte // at most REQPrivate bytes, from byte 140
}

// Attr is AttrREQ.
func (*REQ) Attr() AttrID { return AttrREQ }

func (m *REQ) put(d []byte) error {
	if len(m.Private) > REQPrivate {
		return fmt.Errorf("cm: REQ private data of %d bytes, at most %d", len(m.Private), REQPrivate)
	}
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint64(d[8:], m.ServiceID)
	binary.BigEndian.PutUint64(d[16:], m.LocalCAGUID)
	binary.BigEndian.PutUint32(d[28:], m.LocalQKey)
	put24(d[32:], m.LocalQPN)
	d[35] = m.ResponderResources
	put24(d[36:], m.LocalEECN)
	d[39] = m.InitiatorDepth
	put24(d[40:], m.RemoteEECN)
	d[43] = m.RemoteCMResponseTimeout<<3 | (m.TransportType&3)<<1 | b2u(m.EndToEndFlowControl)
	put24(d[44:], m.StartingPSN)
	d[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount&7
	binary.BigEndian.PutUint16(d[48:], m.PKey)
	d[50] = m.PathMTU<<4 | b2u(m.RDCExists)<<3 | m.RNRRetryCount&7
	d[51] = m.MaxCMRetries<<4 | b2u(m.SRQ)<<3 | m.ExtendedTransportType&7
	m.Primary.put(d[52:96])
	copy(d[140:140+REQPrivate], m.Private)
	return nil
}

func (m *REQ) parse(d []byte) error {
	*m = REQ{
		LocalCommID:             binary.BigEndian.Uint32(d[0:]),
		ServiceID:               binary.BigEndian.Uint64(d[8:]),
		LocalCAGUID:             binary.BigEndian.Uint64(d[16:]),
		LocalQKey:               binary.BigEndian.Uint32(d[28:]),
		LocalQPN:                u24(d[32:]),
		ResponderResources:      d[35],
		LocalEECN:               u24(d[36:]),
		InitiatorDepth:          d[39],
		RemoteEECN:              u24(d[40:]),
		RemoteCMResponseTimeout: d[43] >> 3,
		TransportType:           d[43] >> 1 & 3,
		EndToEndFlowControl:     d[43]&1 != 0,
		StartingPSN:             u24(d[44:]),
		LocalCMResponseTimeout:  d[47] >> 3,
		RetryCount:              d[47] & 7,
		PKey:                    binary.BigEndian.Uint16(d[48:]),
		PathMTU:                 d[50] >> 4,
		RDCExists:               d[50]>>3&1 != 0,
		RNRRetryCount:           d[50] & 7,
		MaxCMRetries:            d[51] >> 4,
		SRQ:                     d[51]>>3&1 != 0,
		ExtendedTransportType:   d[51] & 7,
		Private:                 append([]byte(nil), d[140:140+REQPrivate]...),
	}
	m.Primary.parse(d[52:96])
	if m.LocalQPN == 0 {
		return fmt.Errorf("%w: REQ from QP 0", ErrMAD)
	}
	return nil
}

func (p *Path) put(d []byte) {
	binary.BigEndian.PutUint16(d[0:], p.LocalLID)
	binary.BigEndian.PutUint16(d[2:], p.RemoteLID)
	copy(d[4:20], p.LocalGID[:])
	copy(d[20:36], p.RemoteGID[:])
	binary.BigEndian.PutUint32(d[36:], (p.FlowLabel&0xfffff)<<12|uint32(p.PacketRate&0x3f))
	d[40], d[41] = p.TrafficClass, p.HopLimit
	d[42] = p.SL<<4 | b2u(p.SubnetLocal)<<3
	d[43] = p.LocalACKTimeout << 3
}

func (p *Path) parse(d []byte) {
	*p = Path{LocalLID: binary.BigEndian.Uint16(d[0:]), RemoteLID: binary.BigEndian.Uint16(d[2:])}
	copy(p.LocalGID[:], d[4:20])
	copy(p.RemoteGID[:], d[20:36])
	fl := binary.BigEndian.Uint32(d[36:])
	p.FlowLabel, p.PacketRate = fl>>12, uint8(fl&0x3f)
	p.TrafficClass, p.HopLimit = d[40], d[41]
	p.SL, p.SubnetLocal = d[42]>>4, d[42]>>3&1 != 0
	p.LocalACKTimeout = d[43] >> 3
}

// REP accepts a REQ.
type REP struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32
	LocalQPN                  uint32 // 24 bits
	LocalEECN                 uint32 // 24 bits
	StartingPSN               uint32 // 24 bits: the PSN the REP's sender expects first (the active side sends from it)
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits
	FailoverAccepted          uint8 // 2 bits
	EndToEndFlowControl       bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	Private                   []byte // at most REPPrivate bytes
}

// Attr is AttrREP.
func (*REP) Attr() AttrID { return AttrREP }

func (m *REP) put(d []byte) error {
	if len(m.Private) > REPPrivate {
		return fmt.Errorf("cm: REP private data of %d bytes, at most %d", len(m.Private), REPPrivate)
	}
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	binary.BigEndian.PutUint32(d[8:], m.LocalQKey)
	put24(d[12:], m.LocalQPN)
	put24(d[16:], m.LocalEECN)
	put24(d[20:], m.StartingPSN)
	d[24], d[25] = m.ResponderResources, m.InitiatorDepth
	d[26] = m.TargetACKDelay<<3 | (m.FailoverAccepted&3)<<1 | b2u(m.EndToEndFlowControl)
	d[27] = m.RNRRetryCount<<5 | b2u(m.SRQ)<<4
	binary.BigEndian.PutUint64(d[28:], m.LocalCAGUID)
	copy(d[36:36+REPPrivate], m.Private)
	return nil
}

func (m *REP) parse(d []byte) error {
	*m = REP{
		LocalCommID:         binary.BigEndian.Uint32(d[0:]),
		RemoteCommID:        binary.BigEndian.Uint32(d[4:]),
		LocalQKey:           binary.BigEndian.Uint32(d[8:]),
		LocalQPN:            u24(d[12:]),
		LocalEECN:           u24(d[16:]),
		StartingPSN:         u24(d[20:]),
		ResponderResources:  d[24],
		InitiatorDepth:      d[25],
		TargetACKDelay:      d[26] >> 3,
		FailoverAccepted:    d[26] >> 1 & 3,
		EndToEndFlowControl: d[26]&1 != 0,
		RNRRetryCount:       d[27] >> 5,
		SRQ:                 d[27]>>4&1 != 0,
		LocalCAGUID:         binary.BigEndian.Uint64(d[28:]),
		Private:             append([]byte(nil), d[36:36+REPPrivate]...),
	}
	if m.LocalQPN == 0 {
		return fmt.Errorf("%w: REP from QP 0", ErrMAD)
	}
	return nil
}

// RTU (ready to use) ends the three-way setup.
type RTU struct {
	LocalCommID, RemoteCommID uint32
	Private                   []byte // at most RTUPrivate bytes
}

// Attr is AttrRTU.
func (*RTU) Attr() AttrID { return AttrRTU }

func (m *RTU) put(d []byte) error {
	return putIDs(d, m.LocalCommID, m.RemoteCommID, m.Private, 8, RTUPrivate, "RTU")
}

func (m *RTU) parse(d []byte) error {
	m.LocalCommID, m.RemoteCommID, m.Private = parseIDs(d, 8, RTUPrivate)
	return nil
}

// DREP answers a DREQ.
type DREP struct {
	LocalCommID, RemoteCommID uint32
	Private                   []byte // at most DREPPrivate bytes
}

// Attr is AttrDREP.
func (*DREP) Attr() AttrID { return AttrDREP }

func (m *DREP) put(d []byte) error {
	return putIDs(d, m.LocalCommID, m.RemoteCommID, m.Private, 8, DREPPrivate, "DREP")
}

func (m *DREP) parse(d []byte) error {
	m.LocalCommID, m.RemoteCommID, m.Private = parseIDs(d, 8, DREPPrivate)
	return nil
}

// DREQ asks to disconnect.
type DREQ struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits: the QP the sender asks the receiver to disconnect
	Private                   []byte // at most DREQPrivate bytes
}

// Attr is AttrDREQ.
func (*DREQ) Attr() AttrID { return AttrDREQ }

func (m *DREQ) put(d []byte) error {
	put24(d[8:], m.RemoteQPN)
	return putIDs(d, m.LocalCommID, m.RemoteCommID, m.Private, 12, DREQPrivate, "DREQ")
}

func (m *DREQ) parse(d []byte) error {
	m.LocalCommID, m.RemoteCommID, m.Private = parseIDs(d, 12, DREQPrivate)
	m.RemoteQPN = u24(d[8:])
	return nil
}

// Which message a REJ or an MRA is about.
const (
	MsgREQ   = 0
	MsgREP   = 1
	MsgOther = 2
)

// REJ reasons (IBTA table 112, Linux's enum ib_cm_rej_reason), the ones
// this package sends or names.
const (
	RejNoQP                 = 1
	RejNoEEC                = 2
	RejNoResources          = 3
	RejTimeout              = 4
	RejUnsupported          = 5
	RejInvalidCommID        = 6
	RejInvalidCommInstance  = 7
	RejInvalidServiceID     = 8
	RejInvalidTransportType = 9
	RejStaleConn            = 10
	RejInvalidGID           = 12
	RejInvalidMTU           = 26
	RejConsumer             = 28 // the application refused; the reason is in the private data
)

// REJ refuses a REQ or a REP.
type REJ struct {
	LocalCommID, RemoteCommID uint32
	MessageRejected           uint8 // 2 bits: MsgREQ, MsgREP or MsgOther
	RejectInfoLength          uint8 // 7 bits
	Reason                    uint16
	ARI                       [72]byte // additional reject information
	Private                   []byte   // at most REJPrivate bytes
}

// Attr is AttrREJ.
func (*REJ) Attr() AttrID { return AttrREJ }

func (m *REJ) put(d []byte) error {
	if int(m.RejectInfoLength) > len(m.ARI) {
		return fmt.Errorf("cm: REJ with %d bytes of reject information, at most %d", m.RejectInfoLength, len(m.ARI))
	}
	d[8] = m.MessageRejected << 6
	d[9] = m.RejectInfoLength << 1
	binary.BigEndian.PutUint16(d[10:], m.Reason)
	copy(d[12:84], m.ARI[:])
	return putIDs(d, m.LocalCommID, m.RemoteCommID, m.Private, 84, REJPrivate, "REJ")
}

func (m *REJ) parse(d []byte) error {
	m.LocalCommID, m.RemoteCommID, m.Private = parseIDs(d, 84, REJPrivate)
	m.MessageRejected, m.RejectInfoLength = d[8]>>6, d[9]>>1
	m.Reason = binary.BigEndian.Uint16(d[10:])
	copy(m.ARI[:], d[12:84])
	if int(m.RejectInfoLength) > len(m.ARI) {
		return fmt.Errorf("%w: REJ with %d bytes of reject information, at most %d", ErrMAD, m.RejectInfoLength, len(m.ARI))
	}
	return nil
}

// MRA (message receipt acknowledgement) asks the sender of a REQ, REP or
// LAP to wait longer for the answer.
type MRA struct {
	LocalCommID, RemoteCommID uint32
	MessageMRAed              uint8  // 2 bits: MsgREQ, MsgREP or MsgOther
	ServiceTimeout            uint8  // 5 bits: the answer may take 4.096 us x 2^t more
	Private                   []byte // at most MRAPrivate bytes
}

// Attr is AttrMRA.
func (*MRA) Attr() AttrID { return AttrMRA }

func (m *MRA) put(d []byte) error {
	d[8] = m.MessageMRAed << 6
	d[9] = m.ServiceTimeout << 3
	return putIDs(d, m.LocalCommID, m.RemoteCommID, m.Private, 10, MRAPrivate, "MRA")
}

func (m *MRA) parse(d []byte) error {
	m.LocalCommID, m.RemoteCommID, m.Private = parseIDs(d, 10, MRAPrivate)
	m.MessageMRAed, m.ServiceTimeout = d[8]>>6, d[9]>>3
	return nil
}

// putIDs writes the two communication IDs every message but the REQ
// begins with, and its private data at off.
func putIDs(d []byte, local, remote uint32, private []byte, off, room int, name string) error {
	if len(private) > room {
		return fmt.Errorf("cm: %s private data of %d bytes, at most %d", name, len(private), room)
	}
	binary.BigEndian.PutUint32(d[0:], local)
	binary.BigEndian.PutUint32(d[4:], remote)
	copy(d[off:off+room], private)
	return nil
}

func parseIDs(d []byte, off, room int) (local, remote uint32, private []byte) {
	return binary.BigEndian.Uint32(d[0:]), binary.BigEndian.Uint32(d[4:]), append([]byte(nil), d[off:off+room]...)
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Private data room of the service ID resolution messages (UD).
const (
	SIDRREQPrivate = 216
	SIDRREPPrivate = 136
)

// SIDR_REP statuses (IBTA table 122).
const (
	SIDRValid     = 0 // the QP and Q_Key are valid
	SIDRNoService = 1 // no such service ID
	SIDRReject    = 2 // the service refused (its reason in the private data)
	SIDRNoQP      = 3 // no QP for the service
	SIDRRedirect  = 4
	SIDRVersion   = 5 // the class version is not supported
)

// SIDRREQ asks which UD QP serves a service ID (rdma_cm's UDP port space:
// rdma_connect on a UD id, as udaddy does).
type SIDRREQ struct {
	RequestID uint32
	PKey      uint16
	ServiceID uint64
	Private   []byte // at most SIDRREQPrivate bytes: rdma_cm's IP header, then the application's
}

// Attr is AttrSIDRREQ.
func (*SIDRREQ) Attr() AttrID { return AttrSIDRREQ }

func (m *SIDRREQ) put(d []byte) error {
	if len(m.Private) > SIDRREQPrivate {
		return fmt.Errorf("cm: SIDR_REQ private data of %d bytes, at most %d", len(m.Private), SIDRREQPrivate)
	}
	binary.BigEndian.PutUint32(d[0:], m.RequestID)
	binary.BigEndian.PutUint16(d[4:], m.PKey)
	binary.BigEndian.PutUint64(d[8:], m.ServiceID)
	copy(d[16:16+SIDRREQPrivate], m.Private)
	return nil
}

func (m *SIDRREQ) parse(d []byte) error {
	*m = SIDRREQ{RequestID: binary.BigEndian.Uint32(d[0:]), PKey: binary.BigEndian.Uint16(d[4:]),
		ServiceID: binary.BigEndian.Uint64(d[8:]), Private: append([]byte(nil), d[16:16+SIDRREQPrivate]...)}
	return nil
}

// SIDRREP answers a SIDR_REQ: the QP and Q_Key serving the service, or why
// not.
type SIDRREP struct {
	RequestID uint32
	Status    uint8
	QPN       uint32 // 24 bits
	ServiceID uint64
	QKey      uint32
	Private   []byte // at most SIDRREPPrivate bytes
}

// Attr is AttrSIDRREP.
func (*SIDRREP) Attr() AttrID { return AttrSIDRREP }

func (m *SIDRREP) put(d []byte) error {
	if len(m.Private) > SIDRREPPrivate {
		return fmt.Errorf("cm: SIDR_REP private data of %d bytes, at most %d", len(m.Private), SIDRREPPrivate)
	}
	binary.BigEndian.PutUint32(d[0:], m.RequestID)
	d[4] = m.Status
	put24(d[8:], m.QPN)
	binary.BigEndian.PutUint64(d[12:], m.ServiceID)
	binary.BigEndian.PutUint32(d[20:], m.QKey)
	copy(d[96:96+SIDRREPPrivate], m.Private)
	return nil
}

func (m *SIDRREP) parse(d []byte) error {
	*m = SIDRREP{RequestID: binary.BigEndian.Uint32(d[0:]), Status: d[4], QPN: u24(d[8:]),
		ServiceID: binary.BigEndian.Uint64(d[12:]), QKey: binary.BigEndian.Uint32(d[20:]),
		Private: append([]byte(nil), d[96:96+SIDRREPPrivate]...)}
	if m.Status == SIDRValid && m.QPN == 0 {
		return fmt.Errorf("%w: SIDR_REP of a valid service from QP 0", ErrMAD)
	}
	return nil
}
