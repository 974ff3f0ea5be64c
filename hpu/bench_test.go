package hpu_test

import (
	"errors"
	"testing"

	"github.com/softrnic/softrnic/hpu"
)

// BenchmarkEmptyHandler is the scheduler alone: 64-byte packets, an
// empty payload handler, 8-packet messages; it reports packets per second
// and allocations per packet (steady state: none).
func BenchmarkEmptyHandler(b *testing.B) {
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 1, Slots: 256})
	defer e.Close()
	in, _ := e.Install(hpu.Context{Payload: func(*hpu.Task) hpu.Action { return hpu.Success }})
	payload := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		msg := hpu.Message{QPN: 17, MSN: uint32(i / 8)}
		pkt := hpu.Packet{Payload: payload, Index: i % 8, First: i%8 == 0, Last: i%8 == 7}
		for {
			err := e.Submit(in, msg, pkt)
			if err == nil {
				break
			}
			if !errors.Is(err, hpu.ErrFull) {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// BenchmarkEmptyHandlerSubmitter is BenchmarkEmptyHandler through a
// Submitter that publishes after every 32 packets, as a NIC engine does
// after a receive batch.
func BenchmarkEmptyHandlerSubmitter(b *testing.B) {
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 1, Slots: 256})
	defer e.Close()
	in, _ := e.Install(hpu.Context{Payload: func(*hpu.Task) hpu.Action { return hpu.Success }})
	s := e.NewSubmitter()
	payload := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		msg := hpu.Message{QPN: 17, MSN: uint32(i / 8)}
		pkt := hpu.Packet{Payload: payload, Index: i % 8, First: i%8 == 0, Last: i%8 == 7}
		for {
			err := s.Submit(in, msg, pkt)
			if err == nil {
				break
			}
			if !errors.Is(err, hpu.ErrFull) {
				b.Fatal(err)
			}
			s.Publish()
		}
		if i%32 == 31 {
			s.Publish()
		}
	}
	s.Publish()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}
