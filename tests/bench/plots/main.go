// Command plots draws the benchmark figures as SVG (gonum/plot) from the
// data tests/bench/plots.sh collects: bandwidth against message size for
// softrnic and the raw port, the latency CDF against kernel UDP, and the
// QP-scaling curve with GCCache and with the blocking baseline.
//
//	go run ./tests/bench/plots -data DIR -out DIR
//
// DIR holds bw.txt (size and Gbit/s per line, softrnic perf write-bw -a),
// raw.txt (payload size and Gbit/s, the xsk port's raw frames),
// lat-softrnic.txt and lat-udp.txt (one latency in microseconds per line)
// and scale.txt (cache name, QPs and Gbit/s per line); a missing file
// leaves its curve out.
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

// xy reads columns x and y of a data file as numbers.
func xy(name string, x, y int) (plotter.XYs, error) {
	rows, err := readColumns(name)
	if err != nil {
		return nil, err
	}
	var pts plotter.XYs
	for _, r := range rows {
		if len(r) <= max(x, y) {
			return nil, fmt.Errorf("%s: short line %q", name, strings.Join(r, " "))
		}
		a, err1 := strconv.ParseFloat(r[x], 64)
		b, err2 := strconv.ParseFloat(r[y], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: not numbers: %q", name, strings.Join(r, " "))
		}
		pts = append(pts, plotter.XY{X: a, Y: b})
	}
	return pts, nil
}

func line(p *plot.Plot, name string, pts plotter.XYs, c color.Color, dashed bool) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

var (
	blue  = color.RGBA{31, 119, 180, 255}
	red   = color.RGBA{214, 39, 40, 255}
	green = color.RGBA{44, 160, 44, 255}
)

// bandwidth: softrnic write-bw against message size, the raw frame rate
// as the ceiling.
func bandwidth(data, out string) (bool, error) {
	bw, err := xy(filepath.Join(data, "bw.txt"), 0, 1)
	if err != nil || len(bw) == 0 {
		return false, err
	}
	p := plot.New()
	p.Title.Text = "RDMA WRITE bandwidth against message size (one veth pair)"
	p.X.Label.Text = "message size (bytes)"
	p.Y.Label.Text = "Gbit/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	if err := line(p, "softrnic perf write-bw", bw, blue, false); err != nil {
		return false, err
	}
	raw, err := xy(filepath.Join(data, "raw.txt"), 0, 1)
	if err != nil {
		return false, err
	}
	if len(raw) > 0 {
		top := raw[len(raw)-1].Y // the port's rate at its largest payload: the ceiling from there on
		ceil := plotter.XYs{{X: bw[0].X, Y: top}, {X: bw[len(bw)-1].X, Y: top}}
		if err := line(p, fmt.Sprintf("xsk raw frames, %g-byte payloads", raw[len(raw)-1].X), ceil, red, true); err != nil {
			return false, err
		}
	}
	p.Legend.Top = true
	return true, p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(out, "bandwidth.svg"))
}

// cdf turns latency samples into their empirical distribution.
func cdf(name string) (plotter.XYs, error) {
	pts, err := xy(name, 0, 0)
	if err != nil || len(pts) == 0 {
		return nil, err
	}
	v := make([]float64, len(pts))
	for i, p := range pts {
		v[i] = p.X
	}
	slices.Sort(v)
	out := make(plotter.XYs, 0, 512)
	step := max(1, len(v)/500)
	for i := 0; i < len(v); i += step {
		out = append(out, plotter.XY{X: v[i], Y: float64(i+1) / float64(len(v))})
	}
	out = append(out, plotter.XY{X: v[len(v)-1], Y: 1})
	return out, nil
}

// latencyCDF: softrnic write-lat against kernel UDP ping-pong.
func latencyCDF(data, out string) (bool, error) {
	s, err := cdf(filepath.Join(data, "lat-softrnic.txt"))
	if err != nil || len(s) == 0 {
		return false, err
	}
	u, err := cdf(filepath.Join(data, "lat-udp.txt"))
	if err != nil {
		return false, err
	}
	p := plot.New()
	p.Title.Text = "Latency (half round trip), CDF"
	p.X.Label.Text = "microseconds"
	p.Y.Label.Text = "fraction of iterations"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	if err := line(p, "softrnic perf write-lat, 2 B", s, blue, false); err != nil {
		return false, err
	}
	if len(u) > 0 {
		if err := line(p, "kernel UDP ping-pong (sockperf), 14 B", u, red, true); err != nil {
			return false, err
		}
	}
	p.Legend.Left, p.Legend.Top = false, false
	return true, p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(out, "latency-cdf.svg"))
}

// scaling: aggregate WRITE throughput against QPs, each cache.
func scaling(data, out string) (bool, error) {
	rows, err := readColumns(filepath.Join(data, "scale.txt"))
	if err != nil || len(rows) == 0 {
		return false, err
	}
	curves := map[string]plotter.XYs{}
	var names []string
	for _, r := range rows {
		if len(r) < 3 {
			return false, fmt.Errorf("scale.txt: short line %q", strings.Join(r, " "))
		}
		q, err1 := strconv.ParseFloat(r[1], 64)
		g, err2 := strconv.ParseFloat(r[2], 64)
		if err1 != nil || err2 != nil || q <= 0 || math.IsNaN(g) {
			return false, fmt.Errorf("scale.txt: bad line %q", strings.Join(r, " "))
		}
		if _, ok := curves[r[0]]; !ok {
			names = append(names, r[0])
		}
		curves[r[0]] = append(curves[r[0]], plotter.XY{X: q, Y: g})
	}
	p := plot.New()
	p.Title.Text = "WRITE throughput against QPs, QP contexts behind each cache"
	p.X.Label.Text = "QPs"
	p.Y.Label.Text = "Gbit/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = 0
	for i, n := range names {
		if err := line(p, n, curves[n], []color.Color{blue, red, green}[i%3], i > 0); err != nil {
			return false, err
		}
	}
	p.Legend.Top = false
	return true, p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(out, "qp-scaling.svg"))
}
