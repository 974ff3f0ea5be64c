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
// counted (on the tasks the engine times: one in Config.TimeEvery). Every
// pool is sized at New and Install; nothing is allocated per packet.
//
// Idle HPUs (one fewer than the processors) spin for work, at every
// cluster's queue, and keep spinning while they run what they find, so
// that a steady stream wakes no goroutine per packet; a queue that grows
// deep wakes a sleeping HPU, and a watchdog wakes the HPUs of a queue
// that has not moved for a millisecond (a spinner in a long handler).
// A packet moves from the submitter to its HPU in one 64-byte slot. A
// Submitter, one per submitting goroutine (a NIC engine), hands a
// cluster its tasks eight at a time (one cache line of its queue) or
// when the goroutine publishes at the end of a burst, and HPUs take them
// eight at a time (a handler that waits a whole watchdog tick gives the
// others of its eight back to the queue): Engine.Submit, a packet at a
// time, pays a few cache lines moved between processors per packet, a
// Submitter about one. A
// Helper, a Submitter too, lets its goroutine run the tasks of short
// contexts itself, in its own turn: those whose timed tasks run within
// 2 us; one whose handler waits there, or faults, goes back to the HPUs.
//
// On a live NIC a context is attached to a queue pair (package
// host/verbs): the QP's messages that a Match selects (by kind, by a tag
// in their first bytes, by immediate) go to the handlers instead of
// landing, and the QP acknowledges each only after its handlers, and the
// packets they sent, are done. Context.Net then sends on the message's QP
// (Task.Send, a SEND back to the peer; Task.Put, an RDMA WRITE to it),
// and Context.Default lands a packet as without a handler (a WRITE where
// its RETH says; a SEND in the host region). A handler's fault fails its
// message on both sides: the requester's work request completes with a
// remote error, Done gets the fault, and the QP goes to the error state.
// When the handlers have no room, the NIC does not acknowledge the packet
// and the peer sends it again (counter hpu_refused).
//
//	region, _ := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
//	in, err := qp.AttachHandlers(hpu.Context{
//		MemorySize: 8,
//		Host:       region.Region(),
//		Payload: func(t *hpu.Task) hpu.Action {
//			t.Mem.AddInt64(0, int64(len(t.Packet.Payload))) // count the bytes
//			return hpu.Success                              // and keep them off the host
//		},
//		Completion: func(t *hpu.Task) hpu.Action {
//			var b [8]byte
//			binary.LittleEndian.PutUint64(b[:], t.Mem.Load64(0))
//			t.DMAToHost(0, b[:]) // the count, in host memory
//			return hpu.Success
//		},
//	}, verbs.Match{Ops: verbs.MatchWrite})
//
// The scheduler alone, without a NIC: a sum of int32 vectors
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
// Package hpu/apps holds PsPIN's applications built this way (aggregation,
// reduction, filtering, a key-value cache, a histogram, strided scatter);
// softrnic demo -hpu runs two of them between two NICs over a veth pair,
// and softrnic bench hpu measures the scheduler and every application.
package hpu
