package hpu

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestRingModel drives a ring and a slice (the model) with the same
// pushes and pops: they agree on every value, on full and on empty, and
// a push that ends a line of cells says whether 8 values are held.
func TestRingModel(t *testing.T) {
	for _, tc := range []struct {
		name       string
		n, cells   int
		pushWeight int // of 13 steps
	}{
		{"8 cells, mostly full", 5, 8, 7},
		{"32 cells, filling", 20, 32, 8},
		{"32 cells, draining", 32, 32, 6},
		{"4 cells: never deep", 4, 4, 7},
	} {
		t.Run(tc.name, func(t *testing.T) { ringModel(t, tc.n, tc.cells, tc.pushWeight) })
	}
}

func ringModel(t *testing.T, n, cells, pushWeight int) {
	r := newRing(n)
	var model []int32
	next := int32(0)
	deeps := 0
	for step := range 20000 {
		if (step*7919)%13 < pushWeight {
			ok, deep := r.push(next)
			if want := len(model) < cells; ok != want {
				t.Fatalf("step %d: push %v, model has %d", step, ok, len(model))
			}
			if ok {
				model = append(model, next)
				// The pushes so far are next+1: this one filled a line's
				// last cell if next is 7 mod 8.
				want := next%8 == 7 && cells >= 8 && len(model) >= 8
				if deep != want {
					t.Fatalf("step %d: push %d holding %d: deep %v, want %v", step, next, len(model), deep, want)
				}
				if deep {
					deeps++
				}
				next++
			}
		} else {
			v, ok := r.pop()
			if want := len(model) > 0; ok != want {
				t.Fatalf("step %d: pop %v, model has %d", step, ok, len(model))
			}
			if ok {
				if v != model[0] {
					t.Fatalf("step %d: popped %d, want %d", step, v, model[0])
				}
				model = model[1:]
			}
		}
		if r.len() != len(model) {
			t.Fatalf("step %d: len %d, model %d", step, r.len(), len(model))
		}
	}
	if cells >= 16 && 2*pushWeight > 13 && deeps == 0 { // a filling ring goes deep
		t.Fatal("no push saw the ring deep")
	}
}

// TestRingPutWaitsForSlowConsumer: a consumer that has taken a cell's
// value but not yet handed the cell back makes it look full to a
// producer that has come round the ring; push refuses there, and put
// waits for the consumer instead of losing the value (a lost slot number
// once hung the scheduler).
func TestRingPutWaitsForSlowConsumer(t *testing.T) {
	r := newRing(4)
	for i := range int32(4) {
		r.put(i)
	}
	// A consumer takes cell 0 and stops before handing it back.
	pos := r.head.Load()
	if !r.head.CompareAndSwap(pos, pos+1) {
		t.Fatal("could not take the head")
	}
	for range 3 {
		if _, ok := r.pop(); !ok {
			t.Fatal("pop failed")
		}
	}
	if ok, _ := r.push(9); ok {
		t.Fatal("push into a cell not yet handed back succeeded")
	}
	done := make(chan struct{})
	go func() {
		r.put(9)
		close(done)
	}()
	time.Sleep(10 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("put returned before the cell came back")
	default:
	}
	r.cells[pos&r.mask].seq.Store(pos + r.mask + 1) // the consumer hands the cell back
	<-done
	if v, ok := r.pop(); !ok || v != 9 {
		t.Fatalf("popped %d, %v; want 9", v, ok)
	}
}

// TestRingBatchModel drives a ring with popN and putN of random sizes
// beside single pushes and pops, against a slice: they agree on every
// value, and popN takes what the ring holds up to its room.
func TestRingBatchModel(t *testing.T) {
	for _, cells := range []int{8, 16, 64} {
		r := newRing(cells)
		var model []int32
		next := int32(0)
		x := uint32(12345)
		rnd := func(n int) int { x = x*1664525 + 1013904223; return int(x>>8) % n }
		for step := range 20000 {
			switch rnd(4) {
			case 0: // putN of what fits
				k := rnd(popBatch + 1)
				k = min(k, cells-len(model))
				src := make([]int32, k)
				for i := range src {
					src[i] = next
					next++
				}
				r.putN(src)
				model = append(model, src...)
			case 1:
				if ok, _ := r.push(next); ok {
					model = append(model, next)
					next++
				} else if len(model) != cells {
					t.Fatalf("step %d: push refused holding %d of %d", step, len(model), cells)
				}
			case 2: // popN
				dst := make([]int32, 1+rnd(popBatch))
				n := r.popN(dst)
				if want := min(len(dst), len(model)); n != want {
					t.Fatalf("step %d: popN(%d) took %d, model holds %d", step, len(dst), n, len(model))
				}
				for i := range n {
					if dst[i] != model[i] {
						t.Fatalf("step %d: popN value %d is %d, want %d", step, i, dst[i], model[i])
					}
				}
				model = model[n:]
			case 3:
				v, ok := r.pop()
				if ok != (len(model) > 0) {
					t.Fatalf("step %d: pop %v, model holds %d", step, ok, len(model))
				}
				if ok {
					if v != model[0] {
						t.Fatalf("step %d: popped %d, want %d", step, v, model[0])
					}
					model = model[1:]
				}
			}
			if r.len() != len(model) {
				t.Fatalf("step %d: len %d, model %d", step, r.len(), len(model))
			}
		}
	}
}

// TestRingConcurrent: values pushed by several goroutines and popped by
// several others arrive once each, a value at a time and in batches
// (putN, popN).
func TestRingConcurrent(t *testing.T) {
	for _, batch := range []int{1, 5} {
		t.Run(fmt.Sprintf("batches of %d", batch), func(t *testing.T) { ringConcurrent(t, batch) })
	}
}

func ringConcurrent(t *testing.T, batch int) {
	r := newRing(64)
	const producers, per = 4, 20000
	seen := make([]int32, producers*per)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var got sync.WaitGroup
	got.Add(producers * per)
	stop := make(chan struct{})
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]int32, batch)
			for {
				var n int
				if batch == 1 {
					if v, ok := r.pop(); ok {
						dst[0], n = v, 1
					}
				} else {
					n = r.popN(dst)
				}
				if n > 0 {
					mu.Lock()
					for _, v := range dst[:n] {
						seen[v]++
					}
					mu.Unlock()
					for range n {
						got.Done()
					}
					continue
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	for p := range producers {
		go func() {
			src := make([]int32, batch)
			for i := 0; i < per; i += batch {
				for j := range src {
					src[j] = int32(p*per + i + j)
				}
				if batch == 1 {
					for ok, _ := r.push(src[0]); !ok; ok, _ = r.push(src[0]) {
					}
				} else {
					r.putN(src) // waits for room, as put
				}
			}
		}()
	}
	got.Wait()
	close(stop)
	wg.Wait()
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("value %d taken %d times", v, n)
		}
	}
}
