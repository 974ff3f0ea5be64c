package perftest

import "time"

// window is perftest's duration mode (-D): the run lasts the duration,
// and what is counted is what happened between a warm-up and a
// cool-down of a quarter of it each, in whole seconds as perftest's
// margin (so none below 4 seconds).
type window struct {
	start, from, to time.Time
	dur, margin     time.Duration
	countFrom       int
	countTo         int
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
	}
	if w.to.IsZero() && el >= w.dur-w.margin {
		w.to, w.countTo = now, count
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
	}
	return w.countTo - w.countFrom, w.to.Sub(w.from)
}
