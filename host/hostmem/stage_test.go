package hostmem_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host/hostmem"
)

// TestDMAStagingModel checks the staging ring of a modelled engine
// against a model: random writes (from a buffer the caller changes at once
// after each Write, up to a few MiB each so that the ring wraps and fills),
// reads and polls on a driven clock; memory must end as the writes, applied
// in issue order, leave it, every read must see the writes issued before
// it, and a write that found the ring full is counted and still applied.
func TestDMAStagingModel(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 1))
		m := hostmem.NewMemory()
		clk := hostmem.NewDrivenClock(time.Unix(0, 0))
		d := hostmem.NewDMA(m, hostmem.PCIe{Latency: time.Microsecond, Clock: clk}, 64)
		const size = 8 << 20
		base := m.Alloc(size)
		shadow := make([]byte, size)
		src := make([]byte, 6<<20)
		noise := make([]byte, 8<<20) // random bytes to take writes from (a byte loop is slow under -race)
		for i := 0; i < len(noise); i += 8 {
			binary.LittleEndian.PutUint64(noise[i:], rng.Uint64())
		}
		type read struct {
			want, got []byte
		}
		var reads []*read
		var r recorder
		bigs := 0
		for step := range 2000 {
			switch k := rng.IntN(10); {
			case k < 6:
				n := 1 + rng.IntN(64<<10)
				if rng.IntN(50) == 0 {
					n = 1<<20 + rng.IntN(5<<20) // past the ring's free space, or the whole ring
					bigs++
				}
				off := rng.IntN(size - n)
				copy(src, noise[rng.IntN(len(noise)-n):][:n])
				err := d.Write(base+uint64(off), src[:n])
				for err == hostmem.ErrDMABusy {
					clk.Advance(time.Microsecond)
					d.Poll()
					err = d.Write(base+uint64(off), src[:n])
				}
				if err != nil {
					t.Fatalf("seed %d step %d: Write: %v", seed, step, err)
				}
				copy(shadow[off:], src[:n])
				copy(src, noise[rng.IntN(len(noise)-n):][:n]) // the caller reuses its buffer at once
			case k < 8:
				n := 1 + rng.IntN(4096)
				off := rng.IntN(size - n)
				rd := &read{want: bytes.Clone(shadow[off : off+n]), got: make([]byte, n)}
				if err := d.ReadAsync(base+uint64(off), rd.got, &r, uint64(len(reads))); err != nil {
					if err == hostmem.ErrDMABusy {
						continue
					}
					t.Fatal(err)
				}
				reads = append(reads, rd)
			default:
				clk.Advance(time.Duration(rng.IntN(3)) * time.Microsecond)
				d.Poll()
			}
		}
		d.Quiesce()
		got := make([]byte, size)
		if err := d.Read(base, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, shadow) {
			t.Fatalf("seed %d: memory differs from the writes applied in order", seed)
		}
		for i, rd := range reads {
			if !bytes.Equal(rd.got, rd.want) {
				t.Fatalf("seed %d: read %d did not see the writes issued before it", seed, i)
			}
		}
		if bigs > 0 && d.Stats().StageFull.Load() == 0 {
			t.Errorf("seed %d: %d writes of MiBs, none found the ring full", seed, bigs)
		}
	}
}
