package hpubench

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
)

// tiny are sizes small enough for the race detector.
var tiny = AppsConfig{Size: 16 << 10, Messages: 12, Rounds: 4, GETs: 40, RateGETs: 80, Outstanding: 8, Depth: 4, Repeats: 1}

// TestApps: every application runs both ways, with a checked result and
// figures to show, in pairs (NIC, then host); the table prints; no
// goroutine is left running.
func TestApps(t *testing.T) {
	before := runtime.NumGoroutine()
	rows, err := Apps(tiny)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2*(len(appRuns)+1) { // the cache has two patterns
		t.Fatalf("%d rows", len(rows))
	}
	for i, r := range rows {
		if want := []string{"NIC", "host"}[i%2]; r.Way != want || (i%2 == 1 && r.App != rows[i-1].App) {
			t.Errorf("row %d: %s %s, want a %s row", i, r.App, r.Way, want)
		}
		if !r.Verified || r.Ops == 0 || r.Elapsed <= 0 || r.Rate() <= 0 || r.Work == "" || r.Unit == "" {
			t.Errorf("row %d: %+v", i, r)
		}
		if r.Way == "host" && r.HostBytes == 0 {
			t.Errorf("row %d (%s, host): nothing reached host memory", i, r.App)
		}
		if strings.HasPrefix(r.App, "key-value") && (r.P50 <= 0 || r.P99 < r.P50) {
			t.Errorf("row %d (%s): latency p50 %v p99 %v", i, r.App, r.P50, r.P99)
		}
	}
	// What the NIC spares host memory: results instead of data, nothing
	// for the dropped half or for GET hits.
	for i := 0; i < len(rows); i += 2 {
		nic, host := rows[i], rows[i+1]
		switch nic.App {
		case "reduction (sum)":
			if nic.HostBytes != uint64(8*nic.Ops) {
				t.Errorf("reduction: the NIC wrote %d bytes to host memory for %d messages, want 8 each", nic.HostBytes, nic.Ops)
			}
		case "filtering", "aggregation", "histogram":
			if nic.HostBytes >= host.HostBytes {
				t.Errorf("%s: the NIC wrote %d bytes to host memory, the host baseline %d", nic.App, nic.HostBytes, host.HostBytes)
			}
		}
		if strings.HasPrefix(nic.App, "key-value") && nic.HostBytes != 0 {
			t.Errorf("%s: GET hits wrote %d bytes to host memory", nic.App, nic.HostBytes)
		}
	}
	var b strings.Builder
	if err := ReportAppsConfig(&b, tiny); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if n := strings.Count(b.String(), " yes"); n != len(rows) {
		t.Errorf("%d rows checked in the table, want %d", n, len(rows))
	}
	// Every device, port and host server stopped.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left running (%d before):\n%s", n-before, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestAppsCheck: with the reference of one way corrupted, every
// application's run fails that way's check: the figures of a wrong result
// are never reported.
func TestAppsCheck(t *testing.T) {
	for _, way := range []string{"NIC", "host"} {
		cfg := tiny
		cfg.defaults()
		cfg.tamper = way
		for _, a := range appRuns {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			rows, err := a.run(ctx, cfg)
			cancel()
			if err == nil {
				t.Errorf("%s, %s reference corrupted: a wrong result passed: %+v", a.name, way, rows)
				continue
			}
			if msg := err.Error(); !strings.HasPrefix(msg, way) || strings.Contains(msg, "deadline") || strings.Contains(msg, "completed with") {
				t.Errorf("%s, %s reference corrupted: failed, but not on that way's check: %v", a.name, way, err)
			}
			t.Logf("%s: %v", a.name, err)
		}
	}
}

// TestMedianRows: each row of the repeated runs is the run of median
// rate of its way, whole (its other figures from the same run).
func TestMedianRows(t *testing.T) {
	row := func(way string, ops int, ms int, bytes uint64) AppRow {
		return AppRow{App: "a", Way: way, Ops: ops, Elapsed: time.Duration(ms) * time.Millisecond, HostBytes: bytes}
	}
	for _, tc := range []struct {
		name      string
		runs      [][]AppRow
		nic, host uint64 // the HostBytes of the rows picked
	}{
		{"one run", [][]AppRow{{row("NIC", 10, 10, 1), row("host", 10, 20, 2)}}, 1, 2},
		{"three runs", [][]AppRow{
			{row("NIC", 10, 10, 1), row("host", 10, 10, 4)}, // NIC 1000/s, host 1000/s
			{row("NIC", 10, 20, 2), row("host", 10, 30, 5)}, // NIC 500/s, host 333/s
			{row("NIC", 10, 40, 3), row("host", 10, 20, 6)}, // NIC 250/s, host 500/s
		}, 2, 6},
		{"four runs: the upper middle", [][]AppRow{
			{row("NIC", 10, 10, 1), row("host", 10, 10, 5)},
			{row("NIC", 10, 20, 2), row("host", 10, 20, 6)},
			{row("NIC", 10, 30, 3), row("host", 10, 30, 7)},
			{row("NIC", 10, 40, 4), row("host", 10, 40, 8)},
		}, 2, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := medianRows(tc.runs)
			if len(got) != 2 || got[0].HostBytes != tc.nic || got[1].HostBytes != tc.host {
				t.Fatalf("picked %+v, want the NIC run with %d bytes and the host run with %d", got, tc.nic, tc.host)
			}
			if got[0].Runs != len(tc.runs) || got[0].Way != "NIC" || got[1].Way != "host" {
				t.Errorf("rows %+v", got)
			}
		})
	}
}
