// Command plots draws the benchmark figures as SVG (gonum/plot, fonts
// embedded) from the data tests/bench/plots.sh collects over several
// rounds: bandwidth against message size for softrnic beside the kernel's
// TCP and UDP and the xsk port's raw frames, the latency CDF beside the
// kernel's UDP ping-pong (sleeping and busy-polling), and the QP-scaling
// curve with GCCache and with the blocking baseline.
//
//	go run ./tests/bench/plots -data DIR -out DIR
//
// DIR holds, one measurement a line, the round first:
//
//	bw.txt, tcp.txt, udp.txt, raw.txt   round size Gbit/s
//	scale.txt                           round cache QPs Gbit/s
//	lat-softrnic.R.txt, lat-udp.R.txt, lat-udp-busy.R.txt
//	                                    one latency (us) a line, round R
//
// A curve of several rounds is drawn through each x's median, with a bar
// from its smallest to its largest value and a marker on every measured
// point; a missing file leaves its curve out.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

func main() {
	data := flag.String("data", ".", "directory of the data files")
	out := flag.String("out", ".", "directory for the SVG files")
	flag.Parse()
	if err := run(*data, *out); err != nil {
		fmt.Fprintln(os.Stderr, "plots:", err)
		os.Exit(1)
	}
}

func run(data, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	wrote := 0
	for _, f := range []func(string, string) (bool, error){bandwidth, latencyCDF, scaling} {
		ok, err := f(data, out)
		if err != nil {
			return err
		}
		if ok {
			wrote++
		}
	}
	if wrote == 0 {
		return errors.New("no data files in " + data)
	}
	return nil
}

// readColumns reads the lines of a data file, fields separated by spaces;
// a missing file gives nil.
func readColumns(name string) ([][]string, error) {
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 0 && !strings.HasPrefix(fs[0], "#") {
			rows = append(rows, fs)
		}
	}
	return rows, sc.Err()
}

// numbers parses the fields of a row.
func numbers(name string, r []string) ([]float64, error) {
	v := make([]float64, len(r))
	for i, f := range r {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(x) {
			return nil, fmt.Errorf("%s: not numbers: %q", name, strings.Join(r, " "))
		}
		v[i] = x
	}
	return v, nil
}

// rounds is a curve measured in several rounds: every round's y at each x.
type rounds map[float64][]float64

// readRounds reads "round x y" lines (with key, "round key x y" lines of
// that key) into their rounds.
func readRounds(name, key string) (rounds, error) {
	rows, err := readColumns(name)
	if err != nil {
		return nil, err
	}
	rs := rounds{}
	for _, r := range rows {
		if key != "" {
			if len(r) != 4 {
				return nil, fmt.Errorf("%s: want round key x y: %q", name, strings.Join(r, " "))
			}
			if r[1] != key {
				continue
			}
			r = []string{r[0], r[2], r[3]}
		}
		if len(r) != 3 {
			return nil, fmt.Errorf("%s: want round x y: %q", name, strings.Join(r, " "))
		}
		v, err := numbers(name, r)
		if err != nil {
			return nil, err
		}
		rs[v[1]] = append(rs[v[1]], v[2])
	}
	return rs, nil
}

// summary is a curve's medians with their spread, ordered by x.
type summary struct {
	pts    plotter.XYs
	errs   plotter.YErrors
	rounds int // the most rounds any point has
}

func (rs rounds) summary() summary {
	xs := make([]float64, 0, len(rs))
	for x := range rs {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	var s summary
	for _, x := range xs {
		ys := slices.Clone(rs[x])
		slices.Sort(ys)
		m := median(ys)
		s.pts = append(s.pts, plotter.XY{X: x, Y: m})
		s.errs = append(s.errs, struct{ Low, High float64 }{Low: m - ys[0], High: ys[len(ys)-1] - m})
		s.rounds = max(s.rounds, len(ys))
	}
	return s
}

// median of sorted values.
func median(v []float64) float64 {
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// top is the largest y a summary reaches, its bars included.
func (s summary) top() float64 {
	t := 0.0
	for i, p := range s.pts {
		t = max(t, p.Y+s.errs[i].High)
	}
	return t
}

// style is how a curve looks: its colour, marker, and a dashed line for
// a reference.
type style struct {
	c      color.Color
	shape  draw.GlyphDrawer
	dashed bool
}

var (
	blue   = color.RGBA{31, 119, 180, 255}
	red    = color.RGBA{214, 39, 40, 255}
	green  = color.RGBA{44, 160, 44, 255}
	orange = color.RGBA{255, 127, 14, 255}
	purple = color.RGBA{148, 103, 189, 255}
)

// addCurve draws a summary: a line through the medians, a marker on each,
// and the min-max bars of a curve of more than one round.
func addCurve(p *plot.Plot, name string, s summary, st style) error {
	l, pts, err := plotter.NewLinePoints(s.pts)
	if err != nil {
		return err
	}
	l.Color, l.Width = st.c, vg.Points(1.5)
	if st.dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	pts.Color, pts.Shape, pts.Radius = st.c, st.shape, vg.Points(2.5)
	p.Add(l, pts)
	if s.rounds > 1 {
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYer
			plotter.YErrorer
		}{s.pts, s.errs})
		if err != nil {
			return err
		}
		bars.Color, bars.Width = st.c, vg.Points(1)
		p.Add(bars)
	}
	p.Legend.Add(name, l, pts)
	return nil
}

// save writes the plot as SVG with its fonts embedded, so that it reads
// the same where they are not installed. The legend goes in the band at
// the top that headroom leaves free above the data.
func save(p *plot.Plot, name string) error {
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Title.Padding = vg.Points(6)
	c := vgsvg.NewWith(vgsvg.UseWH(8*vg.Inch, 5*vg.Inch), vgsvg.EmbedFonts(true))
	p.Draw(draw.New(c))
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// headroom sets the y axis from 0 to above the data, leaving the top band
// (legendRows rows of the legend) clear.
func headroom(p *plot.Plot, top float64, legendRows int) {
	p.Y.Min = 0
	p.Y.Max = top * (1.15 + 0.07*float64(legendRows))
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
}

// roundsNote names how many rounds the curves are of.
func roundsNote(n int) string {
	if n > 1 {
		return fmt.Sprintf("medians of %d rounds, bars from min to max", n)
	}
	return "one round"
}

// bandwidth: softrnic write-bw against message size, beside the kernel's
// TCP and UDP and the raw frames, all measured in the same rounds.
func bandwidth(data, out string) (bool, error) {
	p, n, drawn, err := roundsPlot(data, "message size (bytes)", []curve{
		{"bw.txt", "", "softrnic perf write-bw (RDMA WRITE)", style{blue, draw.CircleGlyph{}, false}},
		{"tcp.txt", "", "kernel TCP (iperf3, one stream, -l size)", style{green, draw.TriangleGlyph{}, true}},
		{"udp.txt", "", "kernel UDP received (iperf3 -u -b 0, -l size)", style{orange, draw.SquareGlyph{}, true}},
		{"raw.txt", "", "xsk port, raw frames (bench frames, size = payload)", style{red, draw.CrossGlyph{}, true}},
	})
	if err != nil || !drawn[0] {
		return false, err // no softrnic curve, no plot
	}
	p.Title.Text = "Bandwidth against message size, one veth pair (MTU 9000)\n" + roundsNote(n)
	return true, save(p, filepath.Join(out, "bandwidth.svg"))
}

// curve is one curve of a plot of rounds: its data file (with key, the
// rows of that key), legend and look.
type curve struct {
	file, key, name string
	st              style
}

// roundsPlot draws the curves that have data against a log x axis,
// leaving headroom for the legend; it reports the most rounds a point
// has and which curves were drawn.
func roundsPlot(data, xLabel string, curves []curve) (p *plot.Plot, n int, drawn []bool, err error) {
	p = plot.New()
	p.X.Label.Text = xLabel
	p.Y.Label.Text = "Gbit/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	top, count := 0.0, 0
	drawn = make([]bool, len(curves))
	for i, c := range curves {
		rs, err := readRounds(filepath.Join(data, c.file), c.key)
		if err != nil {
			return nil, 0, nil, err
		}
		if len(rs) == 0 {
			continue
		}
		s := rs.summary()
		if err := addCurve(p, c.name, s, c.st); err != nil {
			return nil, 0, nil, err
		}
		top, n, count, drawn[i] = max(top, s.top()), max(n, s.rounds), count+1, true
	}
	headroom(p, top, count)
	return p, n, drawn, nil
}

// cdf turns latency samples into their empirical distribution (at most
// about 500 points).
func cdf(name string) (plotter.XYs, error) {
	rows, err := readColumns(name)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	v := make([]float64, 0, len(rows))
	for _, r := range rows {
		x, err := numbers(name, r[:1])
		if err != nil {
			return nil, err
		}
		v = append(v, x[0])
	}
	slices.Sort(v)
	out := make(plotter.XYs, 0, 512)
	step := max(1, len(v)/500)
	for i := 0; i < len(v); i += step {
		out = append(out, plotter.XY{X: v[i], Y: float64(i+1) / float64(len(v))})
	}
	return append(out, plotter.XY{X: v[len(v)-1], Y: 1}), nil
}

// latencyCDF: softrnic write-lat against the kernel's UDP ping-pong,
// sleeping and busy-polling; one line a round, so the spread between
// rounds shows.
func latencyCDF(data, out string) (bool, error) {
	kinds := []struct {
		file, name string
		st         style
	}{
		{"lat-softrnic", "softrnic perf write-lat, 2 B", style{blue, draw.CircleGlyph{}, false}},
		{"lat-udp-busy", "kernel UDP, busy-polling (sockperf), 14 B", style{purple, draw.SquareGlyph{}, true}},
		{"lat-udp", "kernel UDP, sleeping (sockperf), 14 B", style{red, draw.TriangleGlyph{}, true}},
	}
	p := plot.New()
	p.X.Label.Text = "microseconds (log)"
	p.Y.Label.Text = "fraction of iterations"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	n := 0
	for _, k := range kinds {
		for r := 1; ; r++ {
			pts, err := cdf(filepath.Join(data, fmt.Sprintf("%s.%d.txt", k.file, r)))
			if err != nil {
				return false, err
			}
			if len(pts) == 0 {
				break
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return false, err
			}
			l.Color, l.Width = k.st.c, vg.Points(1.2)
			if k.st.dashed {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l)
			// A marker at each round's median and 99th percentile.
			marks := plotter.XYs{pts[len(pts)/2], pts[min(len(pts)-1, len(pts)*99/100)]}
			sc, err := plotter.NewScatter(marks)
			if err != nil {
				return false, err
			}
			sc.Color, sc.Shape, sc.Radius = k.st.c, k.st.shape, vg.Points(3)
			p.Add(sc)
			if r == 1 {
				p.Legend.Add(k.name, l, sc)
			}
			n = max(n, r)
		}
		if k.file == "lat-softrnic" && n == 0 {
			return false, nil
		}
	}
	p.Title.Text = "Latency (half round trip), CDF, one veth pair (MTU 9000)\n" +
		"one line a round (" + strconv.Itoa(n) + "), markers at each round's p50 and p99"
	p.Y.Min, p.Y.Max = 0, 1
	// A CDF leaves its lower right empty: the legend goes there, its
	// text growing rightwards (a viewer without the embedded font draws
	// wider text than gonum measured).
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.XOffs, p.Legend.YOffs = 3.9*vg.Inch, 0.45*vg.Inch
	return true, save(p, filepath.Join(out, "latency-cdf.svg"))
}

// scaling: aggregate WRITE throughput against QPs, each cache.
func scaling(data, out string) (bool, error) {
	p, n, drawn, err := roundsPlot(data, "QPs", []curve{
		{"scale.txt", "GCCache", "GCCache (non-blocking)", style{blue, draw.CircleGlyph{}, false}},
		{"scale.txt", "baseline", "blocking baseline cache", style{red, draw.TriangleGlyph{}, true}},
	})
	if err != nil || !slices.Contains(drawn, true) {
		return false, err
	}
	p.Title.Text = "WRITE throughput against QPs (softrnic bench scale, in-memory port)\n" + roundsNote(n)
	return true, save(p, filepath.Join(out, "qp-scaling.svg"))
}
