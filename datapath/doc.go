// Package datapath is the NIC's packet engine: the Port interface through
// which frames come and go in batches, and the NIC, one engine goroutine
// per port queue, each running the requester, the responder and the
// completer for the QPs it owns (QP n belongs to queue n mod queues). A
// frame that arrives on a queue whose engine does not own its QP is copied
// to the owner's hand-off ring (AF_XDP cannot steer a frame to another
// queue's socket); QPs of several engines share CQs and SRQs under a lock
// per CQ and SRQ, and atomics are serialized across engines.
//
//	host (verbs)                       engine goroutine (one per queue)
//	────────────                       ───────────────────
//	PostSend ─ WQE in SQ ─ doorbell ──► request: fetch WQE (DMA), segment by
//	                                     PMTU ─► reliability gate (Sender:
//	                                     replay entry, window, pacing) ─►
//	                                     TX batch ─► Port
//	PostRecv ─ WQE in RQ ─ doorbell ──► (receive doorbells, taken in by the
//	                                     responder when a SEND needs a WQE)
//	                       Port ─► RX batch ─► parse + ICRC ─► QPC in cache?
//	                                     │ miss: park the QP's packets in order
//	                                     ▼ hit
//	                            requests ──► respond: Receiver classifies the
//	                                     PSN (new, duplicate, out of
//	                                     sequence); MPT/MTT access checks,
//	                                     scatter (DMA), READ responses paced
//	                                     per QP, atomics, ACK/NAK/RNR
//	                            responses ─► completeResponse: the Sender
//	                                     retires, goes back or fails; READ
//	                                     data and atomic results placed
//	PollCQ ◄─ CQE in CQ ring ◄── complete (DMA) ◄─┘
//	                            timers ─► tick: the timing wheel of the
//	                                     Sender's local ACK, early-retransmission
//	                                     and RNR timers
//
// One file per stage: resolve.go (each unit of work's context lookups,
// once each, without waiting), rx.go (parse, hand-off, dispatch), park.go
// (packets and requesters waiting for contexts), responder.go,
// requester.go (through the reliability gate), completer.go, qp.go (the
// CQE stage), timers.go, tx.go (encode and send in batches), memory.go
// (MPT and MTT checks, DMA) and dmastage.go (WQE fetches and payload
// reads the engine does not wait for); engine.go is the loop that runs them, nic.go
// the NIC and its counters.
//
// All of RC's recovery (the PSN window, replay entries, ACK/NAK/RNR
// handling, timers, duplicate detection) is package reliability's; the
// engine acts on what its Sender and Receiver decide.
//
// Every context (QPC, CQC, SRQC, MPT, MTT) is read through a ctxcache
// GCCache, and host memory only through the hostmem.DMA engine. Each unit of
// work (a received packet, a doorbell, a timer, a READ to pump, an event
// from the HPUs, a CQE) looks each context up once (ctx_lookups_* count
// them) and never waits for a miss: a packet whose QP context, SRQ
// context, R_Key's MPT entry or MTT lines miss, or whose receive WQE's
// or READ response's landing memory does, waits parked with its QP
// (park.go); a requester whose QP context, L_Key's MPT entry or MTT line
// misses stops until it comes; a READ response waits for its QP's
// context or its memory's; an HPU event or a CQE whose context misses
// waits queued, in order, while the engine goes on (hpu.go, qp.go). Only
// where the cache has no ticket to give, or a fixed queue is full, does
// the engine wait, and ctx_waits counts it. The engine keeps each QP's
// running state (PSNs, in-flight WQEs, receive progress) in fixed arrays,
// as an RNIC keeps it on chip; nothing on the packet path allocates.
//
// The responder is a sequence of named checks, as rxe's is (responder.go:
// QP, PSN, opcode sequence, length, key, the handlers' seam, resources,
// execute, acknowledge), each refusal answered as the protocol says and
// counted under its own name.
//
// Tests of the engine alone live here (harness_test.go): a NIC on host
// tables without host/verbs, a port the test feeds with frames it
// encodes, and a hostmem.DrivenClock shared by the NIC and its DMA engine,
// so that a test decides when each context fetch completes.
//
// The ports live in sub-packages: xsk (AF_XDP), udpport (kernel UDP
// sockets) and porttest (an in-memory pair with a faulty link); wire is the
// RoCEv2 frame format.
package datapath
