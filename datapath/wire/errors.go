package wire

// ParseError says why a frame was rejected. It is a small value type so that
// returning one never allocates; compare with == or errors.Is.
type ParseError uint8

// The reasons Parse and Encode give.
const (
	ErrTruncated         ParseError = iota + 1 // the frame ends before its headers or lengths say
	ErrNotIP                                   // the EtherType is neither IPv4 nor IPv6
	ErrIPVersion                               // the IP version field disagrees with the EtherType
	ErrIPHeader                                // IPv4 IHL below 5, or lengths that do not fit
	ErrIPChecksum                              // the IPv4 header checksum is wrong
	ErrFragmented                              // an IPv4 fragment (RoCEv2 never fragments)
	ErrNotUDP                                  // the IP payload is not UDP
	ErrNotRoCE                                 // the UDP destination port is not 4791
	ErrUDPLength                               // the UDP length disagrees with the IP length
	ErrBTHVersion                              // the BTH transport header version is not 0
	ErrUnknownOpcode                           // no RC, UC, UD or CNP opcode has this number
	ErrMissingHeader                           // the packet is too short for the opcode's headers
	ErrPadCount                                // the pad count does not fit the payload or 4-byte alignment
	ErrUnexpectedPayload                       // payload bytes on an opcode that carries none
	ErrBadICRC                                 // the ICRC does not match
	ErrBufferTooSmall                          // Encode: the output buffer cannot hold the frame
	ErrPayloadTooLarge                         // Encode: the frame would exceed the IP length limit
	ErrAddress                                 // Encode: source and destination are not both IPv4 or both IPv6
	numParseErrors
)

var parseErrorText = [numParseErrors]string{
	ErrTruncated:         "wire: frame truncated",
	ErrNotIP:             "wire: not an IPv4 or IPv6 frame",
	ErrIPVersion:         "wire: IP version does not match the EtherType",
	ErrIPHeader:          "wire: malformed IP header",
	ErrIPChecksum:        "wire: bad IPv4 header checksum",
	ErrFragmented:        "wire: IP fragment",
	ErrNotUDP:            "wire: not UDP",
	ErrNotRoCE:           "wire: UDP destination port is not 4791",
	ErrUDPLength:         "wire: UDP length disagrees with the IP length",
	ErrBTHVersion:        "wire: unsupported BTH transport header version",
	ErrUnknownOpcode:     "wire: unknown opcode",
	ErrMissingHeader:     "wire: packet too short for the headers its opcode needs",
	ErrPadCount:          "wire: bad pad count",
	ErrUnexpectedPayload: "wire: payload on an opcode that carries none",
	ErrBadICRC:           "wire: bad ICRC",
	ErrBufferTooSmall:    "wire: buffer too small for the frame",
	ErrPayloadTooLarge:   "wire: payload too large for one frame",
	ErrAddress:           "wire: source and destination address families differ",
}

func (e ParseError) Error() string {
	if e == 0 || e >= numParseErrors {
		return "wire: unknown error"
	}
	return parseErrorText[e]
}

// NumParseErrors is one more than the largest ParseError, for arrays of
// counters indexed by ParseError.
const NumParseErrors = int(numParseErrors)
