package hpu_test

import (
	"encoding/binary"
	"fmt"

	"github.com/softrnic/softrnic/hpu"
)

// A context that sums the int32 elements of every message in handler
// memory: two packets of one message, then the total, read by the host.
func Example() {
	e := hpu.New(hpu.Config{Clusters: 2, HPUs: 2})
	defer e.Close()
	done := make(chan error, 1)
	in, err := e.Install(hpu.Context{
		Name:       "sum",
		MemorySize: 8,
		Payload: func(t *hpu.Task) hpu.Action {
			var s int64
			p := t.Packet.Payload
			for i := 0; i+4 <= len(p); i += 4 {
				s += int64(int32(binary.LittleEndian.Uint32(p[i:])))
			}
			t.Mem.AddInt64(0, s)
			return hpu.Success
		},
		Done: func(m *hpu.Message, err error) { done <- err },
	})
	if err != nil {
		panic(err)
	}
	data := make([]byte, 16)
	for i := range 4 {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(i+1)) // 1, 2, 3, 4
	}
	msg := hpu.Message{QPN: 17, MSN: 1}
	if err := e.Submit(in, msg, hpu.Packet{Payload: data[:8], First: true}); err != nil {
		panic(err)
	}
	if err := e.Submit(in, msg, hpu.Packet{Payload: data[8:], Offset: 8, Index: 1, Last: true}); err != nil {
		panic(err)
	}
	fmt.Println(<-done, in.Memory().Load64(0))
	// Output: <nil> 10
}
