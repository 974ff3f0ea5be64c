// Package hpu runs sPIN packet handlers (Hoefler et al., SC 2017; PsPIN,
// ISCA 2021) on handler processing units: user code installs an execution
// context, and as a message's packets arrive its handlers run on them
// before anything reaches host memory.
//
// An execution context (Context) has up to three handlers, each a Go
// function of a *Task: Header runs once, on a message's first packet, and
// finishes before any Payload handler of that message starts; Payload
// runs on every packet, several of one message at once; Completion runs
// after every Payload handler of the message returned. A handler returns
// Success (it consumed the packet), Proceed (the packet lands as it would
// without a handler, through Context.Default) or Drop (for a header, the
// whole message). The context owns handler memory of a fixed size
// (Memory: bounds-checked, with atomic operations, shared by its messages)
// and the host region its handlers may DMA to (Task.DMAToHost,
// DMAFromHost); Task.Send and Task.Put issue packets through Context.Net.
//
// An Engine is Clusters x HPUs goroutines. Each cluster holds a fixed
// number of packet buffer slots (its L1) and a scratchpad. A message has
// a home cluster; its packets go there, and to the least loaded cluster
// only when the home cluster's slots are taken (counted as spills). When
// every slot is taken, Submit returns ErrFull and keeps nothing: the NIC
// then withholds the acknowledgement and the peer sends again, so a
// context slower than the link loses no data. A handler that panics,
// overruns its handler memory or DMAs outside its region is stopped: its
// message completes with the error (Context.Done), the other messages and
// contexts go on. Handlers that run longer than Context.Budget are
// counted. Every pool is sized at New and Install; nothing is allocated
// per packet.
//
// A sum of int32 vectors, kept on the NIC:
//
//	e := hpu.New(hpu.Config{Clusters: 4, HPUs: 8})
//	defer e.Close()
//	in, _ := e.Install(hpu.Context{
//		MemorySize: 4096,
//		Payload: func(t *hpu.Task) hpu.Action {
//			p := t.Packet.Payload
//			for i := 0; i+4 <= len(p); i += 4 {
//				t.Mem.AddInt32(int(t.Packet.Offset)+i, int32(binary.LittleEndian.Uint32(p[i:])))
//			}
//			return hpu.Success
//		},
//		Done: func(m *hpu.Message, err error) { /* acknowledge the message */ },
//	})
//	err := e.Submit(in, hpu.Message{QPN: 17, MSN: 0}, hpu.Packet{Payload: data, First: true, Last: true})
//
// Package hpu/apps holds PsPIN's applications built this way.
package hpu
