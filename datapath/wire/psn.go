package wire

// PSN is a 24-bit packet sequence number. Arithmetic wraps at 2^24; order is
// serial-number order, so a PSN is after another when it is less than 2^23
// ahead of it.
type PSN uint32

// PSN limits.
const (
	PSNMask   PSN    = 1<<24 - 1
	PSNWindow uint32 = 1 << 23 // the largest distance that still has an order
)

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return (p + PSN(n)) & PSNMask }

// Sub returns p-n modulo 2^24.
func (p PSN) Sub(n uint32) PSN { return (p - PSN(n)) & PSNMask }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return (p + 1) & PSNMask }

// Diff returns the signed distance p-q, in [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 { return int32(uint32(p-q)<<8) >> 8 }

// After reports whether p comes after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// Before reports whether p comes before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// InWindow reports whether p is in [start, start+size).
func (p PSN) InWindow(start PSN, size uint32) bool {
	return uint32((p-start)&PSNMask) < size
}
