package perftest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Result is one row of a run's report. Bandwidth rows fill the BW fields
// (in Units) and MsgRate (millions of messages a second); latency rows the
// T fields, in microseconds.
type Result struct {
	Test     string  `json:"test"`
	Role     string  `json:"role"`
	Bytes    int     `json:"bytes"`
	Iters    int     `json:"iterations"`
	Lost     int     `json:"lost,omitempty"`             // UC, UD: messages of Iters that did not arrive (not sent again)
	CPUUtil  float64 `json:"cpu_util_percent,omitempty"` // --cpu_util: the machine's CPU use over a timed run's sample
	Units    string  `json:"bw_units,omitempty"`
	BWPeak   float64 `json:"bw_peak,omitempty"`
	BWAvg    float64 `json:"bw_average,omitempty"`
	MsgRate  float64 `json:"msg_rate_mpps,omitempty"`
	TMin     float64 `json:"t_min_usec,omitempty"`
	TMax     float64 `json:"t_max_usec,omitempty"`
	TTypical float64 `json:"t_typical_usec,omitempty"`
	TAvg     float64 `json:"t_avg_usec,omitempty"`
	TStdev   float64 `json:"t_stdev_usec,omitempty"`
	P99      float64 `json:"p99_usec,omitempty"`
	P999     float64 `json:"p99_9_usec,omitempty"`
	TPS      float64 `json:"tps_average,omitempty"` // latency tests with -D: round trips (READs, atomics) a second
	// Samples are every iteration's latency in microseconds, in order
	// (with Config.Samples; latency tests).
	Samples []float64 `json:"samples_usec,omitempty"`
}

// resultLine is perftest's rule: 87 dashes.
var resultLine = strings.Repeat("-", 87) + "\n"

func (s *session) title() string {
	t := testTitles[s.cfg.Test]
	if s.cfg.Test.atomic() {
		t = fmt.Sprintf(t, s.cfg.Atomic)
	}
	return t
}

// gidString prints a GID as perftest does: its bytes in decimal.
func gidString(g [16]byte) string {
	var b strings.Builder
	for i, x := range g {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02d", x)
	}
	return b.String()
}

func addressLines(which string, k *Keys, reads bool) string {
	out := ""
	if reads {
		out = fmt.Sprintf(" OUT 0x%02x", k.OutReads)
	}
	return fmt.Sprintf(" %s address: LID %04x QPN 0x%04x PSN 0x%06x%s RKey 0x%06x VAddr 0x%014x\n GID: %s\n",
		which, k.LID, k.QPN, k.PSN, out, k.RKey, k.VAddr, gidString(k.GID))
}

// printHeader prints perftest's banner, both addresses and the table's
// column names.
func (s *session) printHeader() {
	c := &s.cfg
	w := s.out
	if c.Test.BW() && !c.peakMeasured() {
		// As perftest says it: its BW peak column reads 0.00 then.
		fmt.Fprintln(w, " WARNING: BW peak won't be measured in this run.")
	}
	fmt.Fprint(w, resultLine)
	fmt.Fprintf(w, "%*s\n", 20+len(s.title()), s.title())
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", s.devName)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", c.QPs)
	fmt.Fprintf(w, " Connection type : %v\t\tUsing SRQ      : OFF\n", c.Conn)
	if c.Test.BW() {
		fmt.Fprintf(w, " TX depth        : %d\n", c.TxDepth)
		if c.Test.send() {
			fmt.Fprintf(w, " RX depth        : %d\n", c.RxDepth)
		}
		fmt.Fprintf(w, " CQ Moderation   : %d\n", c.CQMod)
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", 128<<s.mtu)
	fmt.Fprintf(w, " Link type       : Ethernet\n")
	if c.Test.read() || c.Test.atomic() {
		fmt.Fprintf(w, " Outstand reads  : %d\n", c.OutReads)
	}
	method, cmQPs := "Ethernet", "OFF"
	if s.conn.cm() != nil {
		method = "rdma_cm"
	}
	if c.RDMACM {
		cmQPs = "ON"
	}
	fmt.Fprintf(w, " rdma_cm QPs\t : %s\n", cmQPs)
	fmt.Fprintf(w, " Data ex. method : %s\n", method)
	fmt.Fprint(w, resultLine)
	reads := c.Test.read() || c.Test.atomic()
	for i := range s.local {
		fmt.Fprint(w, addressLines("local", &s.local[i], reads))
	}
	for i := range s.peer {
		fmt.Fprint(w, addressLines("remote", &s.peer[i], reads))
	}
	fmt.Fprint(w, resultLine)
	switch {
	case c.Test.BW():
		u := s.cfg.units()
		fmt.Fprintf(w, " #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]%s", u, u, s.cfg.cpuColumn())
	case (c.Test.read() || c.Test.atomic()) && s.conn.Server():
		// The passive side of READ and atomic latency measures nothing.
	case c.Duration > 0:
		fmt.Fprintf(w, " #bytes        #iterations       t_avg[usec]    tps average\n")
	default:
		fmt.Fprint(w, latHeader)
	}
}

// latHeader is perftest's latency table header.
const latHeader = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"

// cpuColumn ends the bandwidth header: with --cpu_util on a timed run,
// perftest's CPU_Util column.
func (c *Config) cpuColumn() string {
	if c.CPUUtil && c.Duration > 0 && !c.Infinite {
		return "    CPU_Util[%]\n"
	}
	return "\n"
}

// printBW prints a bandwidth row in perftest's format.
func (s *session) printBW(r *Result) {
	if s.cfg.Gbits && r.BWAvg < 0.1 {
		fmt.Fprintf(s.out, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f%s", r.Bytes, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate, s.cpuCell(r))
		return
	}
	fmt.Fprintf(s.out, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f%s", r.Bytes, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate, s.cpuCell(r))
}

// cpuCell ends a bandwidth row: its CPU_Util cell where the header has
// the column.
func (s *session) cpuCell(r *Result) string {
	if s.cfg.cpuColumn() == "\n" {
		return "\n"
	}
	return fmt.Sprintf("\t    %-3.2f\n", r.CPUUtil)
}

// printLat prints a latency row in perftest's format.
func (s *session) printLat(r *Result) {
	if s.cfg.Duration > 0 {
		fmt.Fprintf(s.out, " %-7d       %d            %-7.2f        %-7.2f\n", r.Bytes, r.Iters, r.TAvg, r.TPS)
		return
	}
	if s.cfg.Unsorted || s.cfg.Histogram {
		s.printSamples(r.Samples)
	}
	fmt.Fprintf(s.out, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		r.Bytes, r.Iters, r.TMin, r.TMax, r.TTypical, r.TAvg, r.TStdev, r.P99, r.P999)
}

func (s *session) printFooter() { fmt.Fprint(s.out, resultLine) }

// printSamples prints perftest's -U and -H lists before a latency row:
// every sample in the order taken (-U), then the samples sorted without
// the latTail largest (-H), each "index, usec"; then the header again.
func (s *session) printSamples(samples []float64) {
	w := s.out
	if s.cfg.Unsorted {
		fmt.Fprintln(w, "#, usec")
		for i, v := range samples {
			fmt.Fprintf(w, "%d, %g\n", i+1, roundG(v))
		}
	}
	if s.cfg.Histogram {
		sorted := slices.Clone(samples)
		slices.Sort(sorted)
		if len(sorted) > latTail {
			sorted = sorted[:len(sorted)-latTail]
		}
		fmt.Fprintln(w, "#, usec")
		for i, v := range sorted {
			fmt.Fprintf(w, "%d, %g\n", i+1, roundG(v))
		}
	}
	fmt.Fprint(w, resultLine)
	fmt.Fprint(w, latHeader)
}

// roundG rounds v to the 6 significant digits C's %g prints.
func roundG(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return r
}
