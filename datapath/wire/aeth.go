package wire

// Syndrome is the AETH syndrome byte. Bits 6-5 give its kind; the low five
// bits are a credit count code (ACK), an RNR timer code (RNR NAK) or a NAK
// code (NAK).
type Syndrome uint8

// Syndrome kinds (bits 6-5).
const (
	SyndromeACK    = 0x00
	SyndromeRNRNAK = 0x20
	SyndromeNAK    = 0x60
	syndromeKind   = 0x60
)

// NAK codes (low five bits of a NAK syndrome).
const (
	NAKPSNSequenceError     = 0
	NAKInvalidRequest       = 1
	NAKRemoteAccessError    = 2
	NAKRemoteOperationalErr = 3
	NAKInvalidRDRequest     = 4
)

// CreditsInvalid is the ACK credit code meaning "no credit information".
const CreditsInvalid = 0x1f

// Kind returns SyndromeACK, SyndromeRNRNAK, SyndromeNAK or the reserved
// kind 0x40.
func (s Syndrome) Kind() uint8 { return uint8(s) & syndromeKind }

// IsACK, IsRNRNAK and IsNAK tell the syndrome's kind.
func (s Syndrome) IsACK() bool    { return s.Kind() == SyndromeACK }
func (s Syndrome) IsRNRNAK() bool { return s.Kind() == SyndromeRNRNAK }
func (s Syndrome) IsNAK() bool    { return s.Kind() == SyndromeNAK }

// Value is the low five bits: credit code, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1f }

// ACKSyndrome returns an ACK syndrome with the given credit code
// (CreditsInvalid for none).
func ACKSyndrome(creditCode uint8) Syndrome { return Syndrome(SyndromeACK | creditCode&0x1f) }

// RNRNAKSyndrome returns an RNR NAK syndrome with the given RNR timer code.
func RNRNAKSyndrome(timerCode uint8) Syndrome { return Syndrome(SyndromeRNRNAK | timerCode&0x1f) }

// NAKSyndrome returns a NAK syndrome with the given NAK code.
func NAKSyndrome(code uint8) Syndrome { return Syndrome(SyndromeNAK | code&0x1f) }

// creditCounts maps ACK credit codes 0x00-0x1e to receive WQE counts.
var creditCounts = [31]uint32{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
	384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// Credits returns the number of receive WQEs an ACK credit code stands for,
// and false for CreditsInvalid.
func Credits(code uint8) (uint32, bool) {
	code &= 0x1f
	if code == CreditsInvalid {
		return 0, false
	}
	return creditCounts[code], true
}

// CreditCode returns the largest credit code whose count does not exceed n.
func CreditCode(n uint32) uint8 {
	code := uint8(0)
	for i, c := range creditCounts {
		if c <= n {
			code = uint8(i)
		}
	}
	return code
}

// rnrTimerMicros maps RNR timer codes to microseconds.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
	1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440,
	81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerMicros returns the RNR NAK timer, in microseconds, for a code.
func RNRTimerMicros(code uint8) uint32 { return rnrTimerMicros[code&0x1f] }
