package apps_test

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/softrnic/softrnic/hpu"
	"github.com/softrnic/softrnic/hpu/apps"
)

// replies is a context's network: it records what handlers send.
type replies struct {
	mu   sync.Mutex
	sent [][]byte
}

func (r *replies) Send(_ *hpu.Message, payload []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, append([]byte(nil), payload...))
	return nil
}

func (r *replies) Put(*hpu.Message, uint64, uint32, []byte) error {
	return errors.New("kv test: no puts")
}

func (r *replies) take() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sent
	r.sent = nil
	return s
}

// withNet installs on an engine what a live NIC fills in: the context's
// network and its Done.
type withNet struct {
	e    *hpu.Engine
	net  hpu.Net
	done func(*hpu.Message, error)
}

func (w withNet) Install(c hpu.Context) (*hpu.Installed, error) {
	c.Net, c.Done = w.net, w.done
	return w.e.Install(c)
}

// kvRequest builds a request; value nil for a GET.
func kvRequest(op uint8, id uint32, key uint64, value []byte) []byte {
	b := make([]byte, apps.KVHeader+len(value))
	b[0] = op
	le.PutUint32(b[4:], id)
	le.PutUint64(b[8:], key)
	copy(b[apps.KVHeader:], value)
	return b
}

func fill(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }

// kvFixture is a cache on an engine with a recording network.
type kvFixture struct {
	e      *hpu.Engine
	kv     *apps.KV
	host   *region
	net    *replies
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	misses []int
	msn    uint32
}

func newKV(t *testing.T, cfg apps.KVConfig, hostSize int) *kvFixture {
	t.Helper()
	f := &kvFixture{e: hpu.New(hpu.Config{Clusters: 2, HPUs: 2}), net: &replies{}}
	t.Cleanup(f.e.Close)
	f.host = &region{b: fill(hostSize, 0xee)}
	kv, err := apps.NewKV(withNet{f.e, f.net, func(_ *hpu.Message, err error) {
		f.mu.Lock()
		f.errs = append(f.errs, err)
		f.mu.Unlock()
		f.wg.Done()
	}}, f.host, cfg, func(slot int) {
		f.mu.Lock()
		f.misses = append(f.misses, slot)
		f.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	f.kv = kv
	return f
}

// request sends one request and waits for its message to complete; it
// returns the message's error and the miss slots notified.
func (f *kvFixture) request(t *testing.T, req []byte) (error, []int) {
	t.Helper()
	return f.requestMTU(t, req, 4096)
}

func (f *kvFixture) requestMTU(t *testing.T, req []byte, mtu int) (error, []int) {
	t.Helper()
	f.wg.Add(1)
	send(t, f.e, f.kv.In, hpu.Message{QPN: 17, MSN: f.msn}, req, mtu)
	f.msn++
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	err, misses := f.errs[len(f.errs)-1], f.misses
	f.misses = nil
	return err, misses
}

// TestKV: a SET goes to the host's miss ring; after the host's Set, GETs
// hit and are answered by the handler with the exact reply, nothing
// reaching host memory; a GET of an absent key lands in the ring, zero
// padded, and the ring wraps.
func TestKV(t *testing.T) {
	const vs, slots = 64, 4
	size := apps.KVHeader + vs
	f := newKV(t, apps.KVConfig{Buckets: 64, ValueSize: vs, MissSlots: slots}, slots*size+100)
	if f.kv.Cfg.Buckets != 64 || f.kv.Cfg.ValueSize != vs || f.kv.Cfg.MissSlots != slots {
		t.Fatalf("config %+v", f.kv.Cfg)
	}
	ring := fill(len(f.host.b), 0xee) // what host memory should hold

	value := make([]byte, vs)
	for i := range value {
		value[i] = byte(i*7 + 1)
	}
	const key = 0x0102030405060708
	set := kvRequest(apps.KVSet, 1, key, value)
	err, misses := f.request(t, set)
	if err != nil || len(misses) != 1 || misses[0] != 0 {
		t.Fatalf("SET: error %v, slots notified %v, want slot 0", err, misses)
	}
	copy(ring, set)
	if got := f.host.bytes(); !bytes.Equal(got, ring) {
		t.Fatalf("SET: miss ring\n%x\nwant\n%x", got, ring)
	}
	if len(f.net.take()) != 0 {
		t.Fatal("SET: the handler replied")
	}

	// The host updates the table and answers.
	if err := f.kv.Set(key, value); err != nil {
		t.Fatal(err)
	}
	want := append([]byte{apps.KVStored, 0, 0, 0, 1, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1}, make([]byte, vs)...)
	if got := f.kv.Reply(nil, apps.KVStored, 1, key, nil); !bytes.Equal(got, want) {
		t.Errorf("Reply\n%x\nwant\n%x", got, want)
	}
	dst := fill(size+10, 0x55)
	got := f.kv.Reply(dst, apps.KVHit, 1, key, value[:10])
	if want := kvRequest(apps.KVHit, 1, key, append(value[:10:10], make([]byte, vs-10)...)); &got[0] != &dst[0] || !bytes.Equal(got, want) {
		t.Errorf("Reply into dst\n%x\nwant\n%x", got, want)
	}

	// GETs hit, on the NIC: the exact reply, nothing in host memory.
	dma := f.kv.In.Stats.DMABytes.Load()
	for id := uint32(2); id < 6; id++ {
		get := kvRequest(apps.KVGet, id, key, nil)
		if id == 5 {
			get = append(get, make([]byte, vs)...) // a GET may come padded
		}
		err, misses := f.request(t, get)
		if err != nil || len(misses) != 0 {
			t.Fatalf("GET hit: error %v, slots notified %v", err, misses)
		}
		want := kvRequest(apps.KVHit, id, key, value)
		if got := f.net.take(); len(got) != 1 || !bytes.Equal(got[0], want) {
			t.Fatalf("GET hit: replies %x, want [%x]", got, want)
		}
	}
	if d := f.kv.In.Stats.DMABytes.Load(); d != dma {
		t.Errorf("GET hits wrote %d bytes to host memory", d-dma)
	}

	// A new value for the key.
	value2 := fill(vs, 0x42)
	if err := f.kv.Set(key, value2); err != nil {
		t.Fatal(err)
	}
	f.request(t, kvRequest(apps.KVGet, 9, key, nil))
	if got, want := f.net.take(), kvRequest(apps.KVHit, 9, key, value2); len(got) != 1 || !bytes.Equal(got[0], want) {
		t.Fatalf("GET after an update: replies %x, want [%x]", got, want)
	}

	// Misses: the request, zero padded, in slots 1, 2, 3, then 0 and 1 again.
	for n, slot := range []int{1, 2, 3, 0, 1} {
		get := kvRequest(apps.KVGet, uint32(100+n), uint64(1000+n), nil)
		err, misses := f.request(t, get)
		if err != nil || len(misses) != 1 || misses[0] != slot {
			t.Fatalf("miss %d: error %v, slots notified %v, want [%d]", n, err, misses, slot)
		}
		copy(ring[slot*size:(slot+1)*size], append(get, make([]byte, vs)...))
		if got := f.host.bytes(); !bytes.Equal(got, ring) {
			t.Fatalf("miss %d: host memory\n%x\nwant\n%x", n, got, ring)
		}
	}
	if len(f.net.take()) != 0 {
		t.Error("a miss was answered by the handler")
	}
	if h, m, s := f.kv.Stats.Hits.Load(), f.kv.Stats.Misses.Load(), f.kv.Stats.Sets.Load(); h != 5 || m != 5 || s != 1 {
		t.Errorf("stats: %d hits, %d misses, %d sets; want 5, 5, 1", h, m, s)
	}
}

// TestKVTorn: GETs racing the host's Sets never see half of one value and
// half of another (values are one byte repeated).
func TestKVTorn(t *testing.T) {
	const vs, keys = 256, 4
	f := newKV(t, apps.KVConfig{Buckets: 16, ValueSize: vs, MissSlots: 8}, 8*(apps.KVHeader+vs))
	for k := uint64(1); k <= keys; k++ {
		if err := f.kv.Set(k, fill(vs, 0)); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := byte(1); ; c++ {
			select {
			case <-stop:
				return
			default:
			}
			for k := uint64(1); k <= keys; k++ {
				if err := f.kv.Set(k, fill(vs, c)); err != nil {
					t.Error(err)
					return
				}
			}
			writes.Add(1)
		}
	}()
	const gets = 4000
	f.wg.Add(gets)
	for i := range gets {
		send(t, f.e, f.kv.In, hpu.Message{QPN: 17, MSN: uint32(i)}, kvRequest(apps.KVGet, uint32(i), uint64(1+i%keys), nil), 4096)
	}
	f.wg.Wait()
	close(stop)
	wg.Wait()
	hits := 0
	for _, r := range f.net.take() {
		if r[0] != apps.KVHit || len(r) != apps.KVHeader+vs {
			t.Fatalf("a reply of status %d, %d bytes", r[0], len(r))
		}
		v := r[apps.KVHeader:]
		if !bytes.Equal(v, fill(vs, v[0])) {
			t.Fatalf("a torn value: %x", v)
		}
		hits++
	}
	for _, err := range f.errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	h, m := f.kv.Stats.Hits.Load(), f.kv.Stats.Misses.Load()
	if h != uint64(hits) || h+m != gets || hits == 0 {
		t.Errorf("%d replies, stats %d hits %d misses, of %d GETs", hits, h, m, gets)
	}
	t.Logf("%d hits, %d misses (given up), %d rounds of Sets", h, m, writes.Load())
}

// TestKVMalformed: a short, overlong, multi-packet or unknown request
// fails its message with ErrShape; nothing reaches the host.
func TestKVMalformed(t *testing.T) {
	const vs = 64
	f := newKV(t, apps.KVConfig{Buckets: 16, ValueSize: vs, MissSlots: 2}, 2*(apps.KVHeader+vs))
	for _, c := range []struct {
		name string
		req  []byte
		mtu  int
	}{
		{"short", make([]byte, 8), 4096},
		{"unknown op", kvRequest(3, 1, 5, nil), 4096},
		{"SET without its value", kvRequest(apps.KVSet, 1, 5, nil), 4096},
		{"SET with a short value", kvRequest(apps.KVSet, 1, 5, make([]byte, vs-8)), 4096},
		{"too long", kvRequest(apps.KVSet, 1, 5, make([]byte, vs+8)), 4096},
		{"over two packets", kvRequest(apps.KVGet, 1, 5, make([]byte, 8)), apps.KVHeader},
	} {
		err, misses := f.requestMTU(t, c.req, c.mtu)
		if !errors.Is(err, hpu.ErrHandlerPanic) || !strings.Contains(err.Error(), apps.ErrShape.Error()) {
			t.Errorf("%s: error %v, want the handler stopped with ErrShape", c.name, err)
		}
		if len(misses) != 0 {
			t.Errorf("%s: passed to the host", c.name)
		}
	}
	if got := f.host.bytes(); !bytes.Equal(got, fill(len(got), 0xee)) {
		t.Error("a malformed request reached host memory")
	}
	if n := f.kv.In.Stats.Faults.Load(); n != 6 {
		t.Errorf("%d faults, want 6", n)
	}
}

// TestKVSet: the table's and the configuration's limits.
func TestKVSet(t *testing.T) {
	const vs = 8
	f := newKV(t, apps.KVConfig{Buckets: 4, ValueSize: vs, MissSlots: 1}, apps.KVHeader+vs)
	for k := uint64(1); k <= 4; k++ {
		if err := f.kv.Set(k<<40, fill(vs, byte(k))); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.kv.Set(5<<40, fill(vs, 5)); !errors.Is(err, apps.ErrKVFull) {
		t.Errorf("a fifth key in four buckets: %v, want ErrKVFull", err)
	}
	if err := f.kv.Set(2<<40, fill(vs, 9)); err != nil {
		t.Errorf("an update in a full table: %v", err)
	}
	if err := f.kv.Set(0, fill(vs, 1)); !errors.Is(err, apps.ErrKVKey) {
		t.Errorf("key 0: %v, want ErrKVKey", err)
	}
	if err := f.kv.Set(1<<40, fill(vs+1, 1)); !errors.Is(err, apps.ErrShape) {
		t.Errorf("a value of the wrong size: %v, want ErrShape", err)
	}
	for k := uint64(1); k <= 4; k++ { // every key found, over the probe
		want := fill(vs, byte(k))
		if k == 2 {
			want = fill(vs, 9)
		}
		f.request(t, kvRequest(apps.KVGet, uint32(k), k<<40, nil))
		if got := f.net.take(); len(got) != 1 || !bytes.Equal(got[0], kvRequest(apps.KVHit, uint32(k), k<<40, want)) {
			t.Errorf("key %d: replies %x", k, got)
		}
	}

	e := hpu.New(hpu.Config{Clusters: 1, HPUs: 1})
	defer e.Close()
	host := &region{b: make([]byte, 256*(apps.KVHeader+64))}
	for _, cfg := range []apps.KVConfig{
		{Buckets: 3},
		{ValueSize: 12},
		{ValueSize: 4096},
		{MissSlots: -1},
		{MissSlots: 257},
	} {
		if _, err := apps.NewKV(e, host, cfg, nil); !errors.Is(err, apps.ErrShape) {
			t.Errorf("config %+v: %v, want ErrShape", cfg, err)
		}
	}
	if k, err := apps.NewKV(e, host, apps.KVConfig{}, nil); err != nil || k.Cfg != (apps.KVConfig{Buckets: 4096, ValueSize: 64, MissSlots: 256}) {
		t.Errorf("defaults: %+v, %v", k.Cfg, err)
	}
}

// BenchmarkKVGet: GETs that hit, answered on the NIC (reports allocations
// per GET: none in the handler).
func BenchmarkKVGet(b *testing.B) {
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 1, Slots: 256})
	defer e.Close()
	var done atomic.Int64
	kv, err := apps.NewKV(withNet{e, discard{}, func(*hpu.Message, error) { done.Add(1) }},
		&region{b: make([]byte, 256*(apps.KVHeader+64))}, apps.KVConfig{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for k := uint64(1); k <= 1024; k++ {
		kv.Set(k, fill(64, byte(k)))
	}
	req := kvRequest(apps.KVGet, 0, 0, nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		le.PutUint64(req[8:], uint64(1+i%1024))
		for {
			err := e.Submit(kv.In, hpu.Message{QPN: 17, MSN: uint32(i)}, hpu.Packet{Payload: req, First: true, Last: true})
			if err == nil {
				break
			}
			if !errors.Is(err, hpu.ErrFull) {
				b.Fatal(err)
			}
		}
	}
	for done.Load() != int64(b.N) {
		runtime.Gosched()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
	if kv.Stats.Hits.Load() != uint64(b.N) {
		b.Fatalf("%d hits of %d GETs", kv.Stats.Hits.Load(), b.N)
	}
}

// discard is a network that drops what handlers send.
type discard struct{}

func (discard) Send(*hpu.Message, []byte) error                { return nil }
func (discard) Put(*hpu.Message, uint64, uint32, []byte) error { return nil }
