package cachebench

import "testing"

// TestNICHOL runs the head-of-line benchmark small: every hot WRITE is
// measured; the cold QPs' contexts miss, once per cold WRITE on the
// requester's NIC, and the all-hot run barely misses (each repeat's pair
// of NICs starts cold); the engine never waits for a context with
// GCCache.
func TestNICHOL(t *testing.T) {
	const qps, rounds, repeats = 8, 21, 2
	rows, err := NICHOL(HOLConfig{QPs: qps, Rounds: rounds, Repeats: repeats})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for i, r := range rows {
		if r.Samples != qps/2*rounds {
			t.Errorf("%s: %d hot WRITEs measured, want %d", r.Run, r.Samples, qps/2*rounds)
		}
		if r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("%s: p50 %v, p99 %v", r.Run, r.P50, r.P99)
		}
		cold := i > 0
		if cold && r.Misses < qps/2*rounds {
			t.Errorf("%s: %d QPC misses for %d cold WRITEs", r.Run, r.Misses, qps/2*rounds)
		}
		if !cold && r.Misses > repeats*qps {
			t.Errorf("%s: %d QPC misses, all hot", r.Run, r.Misses)
		}
		if i < 2 && r.Waits != 0 {
			t.Errorf("%s: the engine waited for a context %d times", r.Run, r.Waits)
		}
	}
}
