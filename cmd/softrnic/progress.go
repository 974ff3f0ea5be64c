package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/softrnic/softrnic/host/perftest"
)

// progress is the status line of a long run on stderr, when stderr is a
// terminal: what the run is doing, how far along it is and the time so
// far, redrawn every second. A nil *progress (stderr is not a terminal)
// does nothing.
type progress struct {
	c     *console
	name  string
	start time.Time
	mu    sync.Mutex
	what  string
	quit  chan struct{}
	done  chan struct{}
}

// startProgress starts a status line named name, or returns nil when
// stderr is not a terminal.
func startProgress(name string) *progress {
	c := stderrConsole
	if !c.tty {
		return nil
	}
	p := &progress{c: c, name: name, start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	p.draw()
	go func() {
		defer close(p.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

// set says what the run is doing now.
func (p *progress) set(what string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.what = what
	p.mu.Unlock()
	p.draw()
}

// step is set for step done+1 of total: "what (3/10)".
func (p *progress) step(done, total int, what string) {
	p.set(fmt.Sprintf("%s (%d/%d)", what, done+1, total))
}

// stepFunc is step as a benchmark's Progress hook, nil without a status
// line.
func (p *progress) stepFunc() func(done, total int, what string) {
	if p == nil {
		return nil
	}
	return p.step
}

func (p *progress) draw() {
	p.mu.Lock()
	line := p.name + ": "
	if p.what != "" {
		line += p.what + ", "
	}
	line += time.Since(p.start).Truncate(time.Second).String()
	p.mu.Unlock()
	p.c.setStatus(line)
}

// stop takes the status line away.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.done
	p.c.setStatus("")
}

// output returns the command's stdout, made to keep clear of the status
// line when it is the same terminal.
func (p *progress) output(w io.Writer) io.Writer {
	if p == nil || !isTerminal(w) {
		return w
	}
	return &output{c: p.c, w: w}
}

// perfSizes returns perf -a's output (nil for none), watched for
// perftest's result rows, one a size, to step the status line through
// the sizes.
func (p *progress) perfSizes(out io.Writer) io.Writer {
	if p == nil {
		return out
	}
	var sizes []int
	for b := 2; b <= perftest.MaxSize; b *= 2 {
		sizes = append(sizes, b)
	}
	if out == nil {
		out = io.Discard
	}
	w := &sizeWatcher{p: p, w: p.output(out), sizes: sizes}
	w.show()
	return w
}

// sizeWatcher passes perftest's output on and steps the progress at each
// row that starts with the size being measured.
type sizeWatcher struct {
	p     *progress
	w     io.Writer
	sizes []int
	next  int // index of the size being measured
	line  []byte
}

func (s *sizeWatcher) show() {
	if s.next < len(s.sizes) {
		s.p.step(s.next, len(s.sizes), "size "+strconv.Itoa(s.sizes[s.next]))
	} else {
		s.p.set("done")
	}
}

func (s *sizeWatcher) Write(b []byte) (int, error) {
	moved := false
	for rest := b; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			s.line = append(s.line, rest...)
			break
		}
		s.line = append(s.line, rest[:i]...)
		if f := strings.Fields(string(s.line)); len(f) > 1 && s.next < len(s.sizes) && f[0] == strconv.Itoa(s.sizes[s.next]) {
			s.next++
			moved = true
		}
		s.line, rest = s.line[:0], rest[i+1:]
	}
	n, err := s.w.Write(b)
	if moved {
		s.show()
	}
	return n, err
}
