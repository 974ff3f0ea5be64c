package perftest

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// window is perftest's duration mode (-D): the run lasts the duration,
// and what is counted is what happened between a warm-up and a
// cool-down of a quarter of it each, in whole seconds as perftest's
// margin (so none below 4 seconds).
type window struct {
	start, from, to time.Time
	dur, margin     time.Duration
	countFrom       int
	countTo         int
	cpu             bool    // read the machine's CPU use at the sample's ends (--cpu_util)
	cpuFrom, cpuTo  cpuTime // what was read
}

func newWindow(d time.Duration, now time.Time) *window {
	return &window{start: now, dur: d, margin: (d / 4).Truncate(time.Second)}
}

// tick records count (what has completed so far) at now, opening or
// closing the sample as its time comes, and reports whether the run is
// over.
func (w *window) tick(now time.Time, count int) (over bool) {
	el := now.Sub(w.start)
	if w.from.IsZero() && el >= w.margin {
		w.from, w.countFrom = now, count
		if w.cpu {
			w.cpuFrom = readCPUTime()
		}
	}
	if w.to.IsZero() && el >= w.dur-w.margin {
		w.to, w.countTo = now, count
		if w.cpu {
			w.cpuTo = readCPUTime()
		}
	}
	return el >= w.dur
}

// deadline is when the run ends.
func (w *window) deadline() time.Time { return w.start.Add(w.dur) }

// sample returns what was counted in the sample and how long it lasted
// (a run cut short closes it at now).
func (w *window) sample(now time.Time, count int) (int, time.Duration) {
	if w.from.IsZero() {
		return 0, 0
	}
	if w.to.IsZero() {
		w.to, w.countTo = now, count
		if w.cpu {
			w.cpuTo = readCPUTime()
		}
	}
	return w.countTo - w.countFrom, w.to.Sub(w.from)
}

// cpuUtil is the machine's CPU use over the sample in percent, as
// perftest's --cpu_util computes it (user time over user and idle time);
// 0 when not read.
func (w *window) cpuUtil() float64 {
	if !w.cpu {
		return 0
	}
	return w.cpuTo.since(w.cpuFrom)
}

// cpuTime is the user and idle time of /proc/stat's first line (every
// CPU's), in clock ticks.
type cpuTime struct{ user, idle uint64 }

// readCPUTime reads it; zero if /proc/stat cannot be read.
func readCPUTime() cpuTime {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTime{}
	}
	return parseCPUTime(b)
}

// parseCPUTime takes the user and idle fields of a /proc/stat text's
// "cpu" line (user nice system idle ...).
func parseCPUTime(b []byte) cpuTime {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTime{}
	}
	user, err1 := strconv.ParseUint(f[1], 10, 64)
	idle, err2 := strconv.ParseUint(f[4], 10, 64)
	if err1 != nil || err2 != nil {
		return cpuTime{}
	}
	return cpuTime{user: user, idle: idle}
}

// since is the share of user time in the user and idle time from t0 to
// t, in percent.
func (t cpuTime) since(t0 cpuTime) float64 {
	if t.user < t0.user || t.idle < t0.idle {
		return 0
	}
	u, i := t.user-t0.user, t.idle-t0.idle
	if u+i == 0 {
		return 0
	}
	return float64(u) / float64(u+i) * 100
}
