// Package hpubench measures package hpu: the scheduler's latency from a
// packet's arrival to its handler's completion and its packet rate with an
// empty handler, and each application of package apps on a live NIC
// against doing the same on the host after a plain RDMA WRITE or SEND.
// softrnic bench hpu prints its tables.
package hpubench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/hpu"
)

// PsPIN's handler latencies (ISCA 2021): from a packet's arrival to its
// handler's completion on its 1 GHz HPUs, an empty handler.
var pspinLatency = map[int]time.Duration{64: 26 * time.Nanosecond, 1024: 40 * time.Nanosecond}

// LatencyRow is the latency of one handler and packet size.
type LatencyRow struct {
	Handler  string
	Size     int
	P50, P99 time.Duration // arrival (Submit) to the handler's return
	Run50    time.Duration // the handler's own run time, median
	PsPIN    time.Duration // PsPIN's figure, where it reports one
}

// base is the clock's origin: handlers read time as nanoseconds from it.
var base = time.Now()

func nanotime() int64 { return int64(time.Since(base)) }

// work32 is the "32-instruction" handler's work: 8 words of the payload
// folded with a multiply, an add, a shift and an xor each, about 32
// operations, and the result stored in handler memory.
func work32(t *hpu.Task) {
	p := t.Packet.Payload
	var x uint32 = 2166136261
	for i := 8; i+4 <= len(p) && i < 40; i += 4 {
		v := uint32(p[i]) | uint32(p[i+1])<<8 | uint32(p[i+2])<<16 | uint32(p[i+3])<<24
		x = (x ^ v) * 16777619
		x += x >> 7
	}
	t.Mem.Store32(0, x)
}

// Latency measures, one packet at a time, the time from Submit to the end
// of the payload handler for 64- and 1024-byte packets, with an empty
// handler and with a 32-instruction one, on an engine of cfg.
func Latency(cfg hpu.Config, samples int) ([]LatencyRow, error) {
	if samples < 10 {
		return nil, errors.New("hpubench: at least 10 samples")
	}
	var rows []LatencyRow
	for _, h := range []struct {
		name string
		work func(*hpu.Task)
	}{{"empty", nil}, {"32 instructions", work32}} {
		for _, size := range []int{64, 1024} {
			row, err := latency(cfg, samples, size, h.name, h.work)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func latency(cfg hpu.Config, samples, size int, name string, work func(*hpu.Task)) (LatencyRow, error) {
	e := hpu.New(cfg)
	defer e.Close()
	lat := make([]time.Duration, samples)
	run := make([]time.Duration, samples)
	var n atomic.Int64
	done := make(chan struct{}, 1)
	in, err := e.Install(hpu.Context{
		Name:       name,
		MemorySize: 64,
		Payload: func(t *hpu.Task) hpu.Action {
			start := nanotime()
			if work != nil {
				work(t)
			}
			end := nanotime()
			p := t.Packet.Payload
			t0 := int64(p[0]) | int64(p[1])<<8 | int64(p[2])<<16 | int64(p[3])<<24 | int64(p[4])<<32 | int64(p[5])<<40 | int64(p[6])<<48 | int64(p[7])<<56
			if i := n.Add(1) - 1; i < int64(len(lat)) {
				lat[i], run[i] = time.Duration(end-t0), time.Duration(end-start)
			}
			return hpu.Success
		},
		Done: func(*hpu.Message, error) { done <- struct{}{} },
	})
	if err != nil {
		return LatencyRow{}, err
	}
	payload := make([]byte, size)
	for i := range samples + samples/10 { // the first tenth warms up
		if i == samples/10 {
			n.Store(0)
		}
		// A refusal (ErrFull: the last packet's buffer not yet handed
		// back on a loaded machine) is what makes the NIC's peer send
		// again: the packet is submitted again, its clock restarted.
		for tries := 0; ; tries++ {
			t0 := nanotime()
			for b := range 8 {
				payload[b] = byte(t0 >> (8 * b))
			}
			err := e.Submit(in, hpu.Message{QPN: 17, MSN: uint32(i)}, hpu.Packet{Payload: payload, First: true, Last: true})
			if err == nil {
				break
			}
			if !errors.Is(err, hpu.ErrFull) || tries == maxRefusals {
				return LatencyRow{}, err
			}
			runtime.Gosched()
		}
		<-done
	}
	slices.Sort(lat)
	slices.Sort(run)
	return LatencyRow{Handler: name, Size: size, P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], Run50: run[len(run)/2], PsPIN: pspinLatency[size]}, nil
}

// maxRefusals bounds the times Latency submits one packet again after
// ErrFull before it gives up.
const maxRefusals = 100000

// RateRow is the scheduler's packet rate with an empty handler.
type RateRow struct {
	Clusters, HPUs int
	Packets        int // through a Submitter
	Elapsed        time.Duration
	Refused        uint64  // Submits refused for a full buffer (and retried)
	Single         float64 // Mpps through Engine.Submit, a packet at a time
}

// Mpps is the packet rate through a Submitter in millions per second.
func (r RateRow) Mpps() float64 { return float64(r.Packets) / r.Elapsed.Seconds() / 1e6 }

// publishEvery is how many packets the Rate rows' Submitter hands over
// at once: a NIC engine's receive batch.
const publishEvery = 32

// Rate submits 64-byte packets of 8-packet messages from one goroutine
// for d, to an empty payload handler, on engines of several shapes: as
// the NIC's engine does (a Submitter published after every burst of
// publishEvery packets), and a packet at a time through Engine.Submit.
func Rate(d time.Duration, shapes [][2]int) ([]RateRow, error) {
	var rows []RateRow
	for _, s := range shapes {
		row := RateRow{Clusters: s[0], HPUs: s[1]}
		for _, batched := range []bool{true, false} {
			n, refused, el, err := rate(d, s, batched)
			if err != nil {
				return nil, err
			}
			if batched {
				row.Packets, row.Refused, row.Elapsed = n, refused, el
			} else {
				row.Single = float64(n) / el.Seconds() / 1e6
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func rate(d time.Duration, shape [2]int, batched bool) (int, uint64, time.Duration, error) {
	e := hpu.New(hpu.Config{Clusters: shape[0], HPUs: shape[1], Slots: 256})
	defer e.Close()
	in, err := e.Install(hpu.Context{Payload: func(*hpu.Task) hpu.Action { return hpu.Success }})
	if err != nil {
		return 0, 0, 0, err
	}
	sub := e.NewSubmitter()
	defer sub.Publish() // before Close: every packet accepted runs
	payload := make([]byte, 64)
	var refused uint64
	i := 0
	start := time.Now()
	for ; ; i++ {
		if i%1024 == 0 && time.Since(start) > d {
			break
		}
		msg := hpu.Message{QPN: 17, MSN: uint32(i / 8)}
		pkt := hpu.Packet{Payload: payload, Index: i % 8, First: i%8 == 0, Last: i%8 == 7}
		for {
			var err error
			if batched { // called directly: a func value's indirect call costs the Submitter's inlining
				err = sub.Submit(in, msg, pkt)
			} else {
				err = e.Submit(in, msg, pkt)
			}
			if err == nil {
				break
			}
			if !errors.Is(err, hpu.ErrFull) {
				return 0, 0, 0, err
			}
			sub.Publish() // what it holds, to make room
			refused++
		}
		if i%publishEvery == publishEvery-1 {
			sub.Publish()
		}
	}
	sub.Publish()
	return i, refused, time.Since(start), nil
}

// ReportScheduler prints the latency and rate tables.
//
// The scheduler alone runs no NIC, and its rows run with one P a
// processor, Go's default, unless the environment sets GOMAXPROCS: the
// spare Ps a softrnic program keeps (datapath.SpareProcs) are for NIC
// and application threads asleep in system calls, which these rows have
// none of, and with them an HPU's yield can wake a thread that takes a
// processor from the submitter (the rate rows ran 10-15 % slower).
func ReportScheduler(w io.Writer, samples int, d time.Duration) error {
	if procs := runtime.GOMAXPROCS(0); os.Getenv("GOMAXPROCS") == "" && procs > runtime.NumCPU() {
		runtime.GOMAXPROCS(runtime.NumCPU())
		defer runtime.GOMAXPROCS(procs)
	}
	fmt.Fprintf(w, "the scheduler alone (no NIC), GOMAXPROCS %d on %d processors\n", runtime.GOMAXPROCS(0), runtime.NumCPU())
	lat, err := Latency(hpu.Config{}, samples)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "handler latency, one packet at a time, %d samples, engine of 4 clusters x 8 HPUs\n", samples)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "handler\tpacket B\tp50\tp99\thandler run p50\tPsPIN (1 GHz HPU)\t")
	for _, r := range lat {
		ps := "-"
		if r.PsPIN > 0 && r.Handler == "empty" {
			ps = r.PsPIN.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%v\t%s\t\n", r.Handler, r.Size, r.P50, r.P99, r.Run50, ps)
	}
	tw.Flush()
	rates, err := Rate(d, [][2]int{{4, 8}, {2, 1}, {1, 1}})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nscheduler alone: 64-byte packets to an empty handler, one submitting goroutine, %v each:\n", d)
	fmt.Fprintf(w, "as a NIC engine submits (hpu.Submitter, handed over every %d packets), and a packet at a time (Engine.Submit)\n", publishEvery)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clusters x HPUs\tpackets\tMpps\tgoal Mpps\trefused (full)\ta packet at a time Mpps\t")
	for _, r := range rates {
		fmt.Fprintf(tw, "%d x %d\t%d\t%.2f\t5\t%d\t%.2f\t\n", r.Clusters, r.HPUs, r.Packets, r.Mpps(), r.Refused, r.Single)
	}
	return tw.Flush()
}
