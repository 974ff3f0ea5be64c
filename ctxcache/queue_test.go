package ctxcache

import (
	"sync"
	"testing"
)

// TestQueueModel checks the queue against a slice in one goroutine.
func TestQueueModel(t *testing.T) {
	q := newQueue[int](8)
	var model []int
	for i := range 10000 {
		if i%3 != 2 {
			ok := q.push(i)
			if ok != (len(model) < 8) {
				t.Fatalf("push %d: %v with %d queued", i, ok, len(model))
			}
			if ok {
				model = append(model, i)
			}
		} else {
			v, ok := q.pop()
			if ok != (len(model) > 0) || ok && v != model[0] {
				t.Fatalf("pop: %d %v, model %v", v, ok, model)
			}
			if ok {
				model = model[1:]
			}
		}
	}
}

// TestQueueConcurrent: four producers and two consumers; every value comes
// out exactly once, each producer's in order (run with -race).
func TestQueueConcurrent(t *testing.T) {
	q := newQueue[[2]int](64)
	const per = 20000
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; {
				if q.push([2]int{p, i}) {
					i++
				}
			}
		}()
	}
	seen := make([][]int, 2)
	var cwg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for c := range 2 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			last := [4]int{-1, -1, -1, -1}
			for {
				mu.Lock()
				done := total == 4*per
				mu.Unlock()
				if done {
					return
				}
				v, ok := q.pop()
				if !ok {
					continue
				}
				if v[1] <= last[v[0]] {
					t.Errorf("consumer %d: producer %d value %d after %d", c, v[0], v[1], last[v[0]])
				}
				last[v[0]] = v[1]
				seen[c] = append(seen[c], v[0]*per+v[1])
				mu.Lock()
				total++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	cwg.Wait()
	got := make([]bool, 4*per)
	for _, s := range seen {
		for _, v := range s {
			if got[v] {
				t.Fatalf("value %d twice", v)
			}
			got[v] = true
		}
	}
}
