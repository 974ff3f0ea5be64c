package wire_test

import (
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/datapath/wire/wiretest"
)

var benchSizes = []int{64, 1024, 4096}

// reportFrames reports ns/frame and the line rate Parse would sustain in
// Gbit/s of frame bytes on one core.
func reportFrames(b *testing.B, frameLen int) {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns, "ns/frame")
	b.ReportMetric(float64(frameLen*8)/ns, "Gbit/s")
}

// BenchmarkParse is the RX cost of one frame: every header check and the
// ICRC verification, for an RDMA WRITE ONLY carrying 64, 1024 or 4096 bytes.
func BenchmarkParse(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			frame := wiretest.SampleFrame(wire.RCRDMAWriteOnly, size, false, 1)
			var p wire.Packet
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if err := wire.Parse(frame, &p); err != nil {
					b.Fatal(err)
				}
			}
			reportFrames(b, len(frame))
		})
	}
}

// BenchmarkEncode is the TX cost of one frame: headers, payload copy and
// ICRC.
func BenchmarkEncode(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			f := wiretest.SampleFields(wire.RCRDMAWriteOnly, size, false, 1)
			buf := make([]byte, 8192)
			b.ReportAllocs()
			var n int
			for b.Loop() {
				n, _ = wire.Encode(buf, &f)
			}
			b.SetBytes(int64(n))
			reportFrames(b, n)
		})
	}
}

// BenchmarkICRC compares the ICRC as Parse computes it (hash/crc32, which
// uses the CPU's carry-less multiply where it has one) with a byte-at-a-time
// table CRC measured in the same run, and reports both in GB/s.
func BenchmarkICRC(b *testing.B) {
	for _, size := range benchSizes {
		frame := wiretest.SampleFrame(wire.RCRDMAWriteOnly, size, false, 1)
		var p wire.Packet
		if err := wire.Parse(frame, &p); err != nil {
			b.Fatal(err)
		}
		covered := p.ICRCOff - p.IPOff
		b.Run(fmt.Sprintf("path=hash-crc32/payload=%d", size), func(b *testing.B) {
			b.SetBytes(int64(covered))
			var sink uint32
			for b.Loop() {
				sink += p.ComputeICRC()
			}
			reportGBps(b, covered)
			_ = sink
		})
		b.Run(fmt.Sprintf("path=bytewise-reference/payload=%d", size), func(b *testing.B) {
			b.SetBytes(int64(covered))
			data := p.Frame[p.IPOff:p.ICRCOff]
			var sink uint32
			for b.Loop() {
				sink += bytewiseCRC(data)
			}
			reportGBps(b, covered)
			_ = sink
		})
	}
}

func reportGBps(b *testing.B, n int) {
	b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "GB/s")
}

// bytewiseCRC is the textbook one-table CRC-32, the reference the
// accelerated path is compared with.
func bytewiseCRC(p []byte) uint32 {
	crc := ^uint32(0)
	for _, c := range p {
		crc = crc32.IEEETable[byte(crc)^c] ^ crc>>8
	}
	return ^crc
}

// BenchmarkHeaderChangeICRC is what a port pays to fix a frame's ICRC
// after rewriting its IPv4 ID and UDP source port: the full recomputation
// (SetICRC) beside carrying the change alone (UpdateICRCFrom).
func BenchmarkHeaderChangeICRC(b *testing.B) {
	for _, size := range benchSizes {
		frame := wiretest.SampleFrame(wire.RCRDMAWriteMiddle, size, false, 1)
		var p wire.Packet
		if err := wire.Parse(frame, &p); err != nil {
			b.Fatal(err)
		}
		id := uint16(0)
		change := func() {
			id++
			p.IPv4Header().SetID(id)
			p.UDP().SetSrcPort(0xc000 | id&0xff)
		}
		b.Run(fmt.Sprintf("payload=%d/recompute", size), func(b *testing.B) {
			for b.Loop() {
				change()
				p.SetICRC()
			}
		})
		b.Run(fmt.Sprintf("payload=%d/carry", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				old := p.CopyHeaders()
				change()
				p.UpdateICRCFrom(&old)
			}
		})
	}
}
