package apps

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/hpu"
)

// KV wire format, little-endian. A request (a SEND's payload):
//
//	[0] op (KVGet, KVSet), [1:4] zero, [4:8] request id, [8:16] key,
//	and for KVSet [16:16+ValueSize] the value.
//
// A reply:
//
//	[0] status (KVHit, KVMiss, KVStored), [1:4] zero, [4:8] request id,
//	[8:16] key, [16:16+ValueSize] the value (on a hit; zeros otherwise).
const (
	KVGet = 1 // request: read a key's value
	KVSet = 2 // request: store a key's value

	KVHit    = 1 // reply: the value follows
	KVMiss   = 2 // reply: the key is not cached
	KVStored = 3 // reply: the value was stored
)

// KVHeader is the bytes of a request's or reply's header, before the value.
const KVHeader = 16

const (
	kvMaxValue = 4096 - KVHeader // a SET fits one 4096-byte packet
	kvBuffers  = 64              // reply and miss buffers in handler memory
	kvRetries  = 8               // reads of a bucket being written before a GET gives up (a miss)
)

// Errors of the key-value cache's host side.
var (
	// ErrKVFull: no bucket left for a new key.
	ErrKVFull = errors.New("apps: key-value table full")
	// ErrKVKey: key 0, which marks an empty bucket.
	ErrKVKey = errors.New("apps: key 0 is reserved (an empty bucket)")
)

// KVConfig sizes a key-value cache.
type KVConfig struct {
	Buckets   int // hash table entries in handler memory (power of two; default 4096)
	ValueSize int // bytes per value (multiple of 8, at most 4080; default 64)
	MissSlots int // slots of the host's miss ring (default 256)
}

// KVStats count what the handlers saw.
type KVStats struct {
	Hits   atomic.Uint64 // GETs answered by the NIC
	Misses atomic.Uint64 // GETs passed to the host
	Sets   atomic.Uint64 // SETs passed to the host
}

// KV is a key-value cache on the NIC (after NIC-resident caches such as
// those of PsPIN and KV-Direct): GETs of cached keys are answered by the
// handlers, everything else goes to the host through a ring of slots in
// host memory.
//
// Handler memory holds a table of Buckets buckets, open addressing with
// linear probing; a bucket is its key (0: empty, so key 0 cannot be
// cached), a seqlock version (odd while the host writes the bucket) and
// the value. Only the host writes the table (Set), one writer at a time;
// the GET handlers read it concurrently, as 8-byte atomic words, and
// retry while the version is odd or changed. Keys are never removed.
type KV struct {
	In    *hpu.Installed
	Cfg   KVConfig
	Stats KVStats

	mu     sync.Mutex // one writer of the table
	size   int        // of a request, reply or miss slot: KVHeader + ValueSize
	bucket int        // bytes of a bucket: key, version, value
	shift  uint       // of the key's hash: 64 - log2(Buckets)
}

// Handler memory layout: the counter, the buffers' flags, the buffers,
// then the table (8-aligned: a buffer's size is a multiple of 8).
const (
	kvCounter = 0                     // int64: requests passed to the host so far
	kvFlags   = 8                     // kvBuffers x uint32: buffer taken
	kvBufs    = kvFlags + kvBuffers*4 // kvBuffers x size: replies and miss slots being built
	kvKey     = 0                     // in a bucket
	kvVersion = 8                     // in a bucket
	kvValue   = 16                    // in a bucket
)

// NewKV installs the cache on e. A request is a single-packet message (a
// SEND of KVHeader bytes for a GET, KVHeader+ValueSize for a SET), served
// by the header handler: a GET that hits is answered by the handler
// itself with t.Send (nothing reaches host memory). A GET that misses, a
// hit whose reply cannot be sent, and every SET go to the host: the
// request, zero padded to KVHeader+ValueSize bytes, is DMAed into slot i
// of the miss ring, at i*(KVHeader+ValueSize) of host (i counts the
// requests passed so far, mod MissSlots), then miss(i) runs; the host
// handles slot i before MissSlots more requests come, updates the table
// with Set and answers with a SEND built by Reply. host must hold
// MissSlots*(KVHeader+ValueSize) bytes. A malformed request (short, too
// long, over several packets, or of an unknown op) stops the handler with
// ErrShape: the message fails.
func NewKV(e hpu.Installer, host hpu.Region, cfg KVConfig, miss func(slot int)) (*KV, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Buckets, 4096)
	def(&cfg.ValueSize, 64)
	def(&cfg.MissSlots, 256)
	if cfg.Buckets <= 0 || cfg.Buckets&(cfg.Buckets-1) != 0 || cfg.ValueSize <= 0 || cfg.ValueSize%8 != 0 ||
		cfg.ValueSize > kvMaxValue || cfg.MissSlots <= 0 || host == nil ||
		host.Len() < uint64(cfg.MissSlots)*uint64(KVHeader+cfg.ValueSize) {
		return nil, ErrShape
	}
	k := &KV{Cfg: cfg, size: KVHeader + cfg.ValueSize, bucket: 16 + cfg.ValueSize,
		shift: uint(64 - bits.TrailingZeros(uint(cfg.Buckets)))}
	in, err := e.Install(hpu.Context{
		Name:       "kv",
		MemorySize: k.table() + cfg.Buckets*k.bucket,
		Host:       host,
		Header:     func(t *hpu.Task) hpu.Action { return k.serve(t, miss) },
	})
	k.In = in
	return k, err
}

// table is the offset of the hash table in handler memory.
func (k *KV) table() int { return kvBufs + kvBuffers*k.size }

// home is the bucket a key's probe starts at.
func (k *KV) home(key uint64) int { return int((key * 0x9e3779b97f4a7c15) >> k.shift) }

// serve is the header handler: one request.
func (k *KV) serve(t *hpu.Task, miss func(slot int)) hpu.Action {
	p := t.Packet.Payload
	if len(p) < KVHeader || len(p) > k.size || !t.Packet.Last {
		panic(ErrShape)
	}
	op, id, key := p[0], le.Uint32(p[4:]), le.Uint64(p[8:])
	switch {
	case op == KVSet && len(p) != k.size:
		panic(ErrShape)
	case op != KVGet && op != KVSet:
		panic(ErrShape)
	}
	b := k.take(t.Mem, int(key))
	defer t.Mem.Store32(kvFlags+4*b, 0)
	buf := t.Mem.Bytes(kvBufs+b*k.size, k.size)
	if op == KVGet && k.lookup(t.Mem, key, buf[KVHeader:]) {
		kvHead(buf, KVHit, id, key)
		if t.Send(buf) == nil {
			k.Stats.Hits.Add(1)
			return hpu.Success
		}
	}
	// To the host: the request, zero padded, in the next slot of the ring.
	clear(buf[copy(buf, p):])
	i := int(uint64(t.Mem.AddInt64(kvCounter, 1)-1) % uint64(k.Cfg.MissSlots))
	t.DMAToHost(uint64(i*k.size), buf)
	if op == KVSet {
		k.Stats.Sets.Add(1)
	} else {
		k.Stats.Misses.Add(1)
	}
	if miss != nil {
		miss(i)
	}
	return hpu.Success
}

// take claims one of the buffers in handler memory, trying first the one
// at hint; while every one is taken (more handlers at once than buffers),
// it yields and tries again.
func (k *KV) take(m hpu.Memory, hint int) int {
	for {
		for i := range kvBuffers {
			b := (hint + i) & (kvBuffers - 1)
			if m.CAS32(kvFlags+4*b, 0, 1) {
				return b
			}
		}
		runtime.Gosched()
	}
}

// lookup copies key's value into dst and reports whether the key is in
// the table. A bucket being written is read again; after kvRetries reads
// the GET gives up and misses.
func (k *KV) lookup(m hpu.Memory, key uint64, dst []byte) bool {
	if key == 0 {
		return false
	}
	mask := k.Cfg.Buckets - 1
	h := k.home(key)
	for i := range k.Cfg.Buckets {
		at := k.table() + ((h+i)&mask)*k.bucket
		switch m.Load64(at + kvKey) {
		case 0:
			return false // an empty bucket ends the probe: keys are never removed
		case key:
		default:
			continue
		}
		for range kvRetries {
			v := m.Load64(at + kvVersion)
			if v&1 == 0 {
				for j := 0; j < len(dst); j += 8 {
					le.PutUint64(dst[j:], m.Load64(at+kvValue+j))
				}
				if m.Load64(at+kvVersion) == v {
					return true
				}
			}
			runtime.Gosched()
		}
		return false
	}
	return false
}

// Set stores key's value in the NIC's table: the host's update path,
// after it handled a SET or a miss. GET handlers see the old value or the
// new one, never a mix. Set fails with ErrKVKey for key 0, ErrShape when
// len(value) != ValueSize, and ErrKVFull when the key is new and no
// bucket is empty.
func (k *KV) Set(key uint64, value []byte) error {
	if key == 0 {
		return ErrKVKey
	}
	if len(value) != k.Cfg.ValueSize {
		return fmt.Errorf("%w: a value of %d bytes, want %d", ErrShape, len(value), k.Cfg.ValueSize)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.In.Memory()
	mask := k.Cfg.Buckets - 1
	h := k.home(key)
	for i := range k.Cfg.Buckets {
		at := k.table() + ((h+i)&mask)*k.bucket
		old := m.Load64(at + kvKey)
		if old != 0 && old != key {
			continue
		}
		v := m.Load64(at + kvVersion)
		m.Store64(at+kvVersion, v+1) // odd: being written
		for j := 0; j < len(value); j += 8 {
			m.Store64(at+kvValue+j, le.Uint64(value[j:]))
		}
		if old == 0 {
			m.Store64(at+kvKey, key) // under the odd version: a reader that sees it reads again
		}
		m.Store64(at+kvVersion, v+2)
		return nil
	}
	return ErrKVFull
}

// Reply builds a reply into dst (KVHeader+ValueSize bytes; a larger
// buffer is allocated if dst's capacity is short) and returns it: value
// (at most ValueSize bytes of it) follows the header, zero padded. The
// host answers misses and SETs with it, as a plain SEND.
func (k *KV) Reply(dst []byte, status uint8, id uint32, key uint64, value []byte) []byte {
	if cap(dst) < k.size {
		dst = make([]byte, k.size)
	}
	dst = dst[:k.size]
	kvHead(dst, status, id, key)
	clear(dst[KVHeader+copy(dst[KVHeader:], value):])
	return dst
}

// kvHead writes a reply's header.
func kvHead(b []byte, status uint8, id uint32, key uint64) {
	b[0], b[1], b[2], b[3] = status, 0, 0, 0
	le.PutUint32(b[4:], id)
	le.PutUint64(b[8:], key)
}
