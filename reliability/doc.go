// Package reliability keeps Reliable Connection reliable. It holds RC's
// recovery as plain state machines, with no goroutines, no I/O and no
// clock of their own (the caller passes the time in), so that tests drive
// them event by event:
//
//   - Pool is the NIC-wide replay buffer: a fixed number of entries, set
//     at start, from which each RC QP reserves its allocation.
//   - Sender is a requester's half: the PSN window [Una, Next), one
//     replay Entry per packet in it (a reference back to the work request
//     and the bytes the packet carries, plus its header state, never the
//     payload), admission at the transmit gate (a QP without a free
//     entry stalls, counted, while other QPs go on), retirement by
//     cumulative ACKs, READ responses and atomic ACKs, go-back-N after a
//     PSN sequence NAK, a READ response gap or a local ACK timeout (4.096
//     us x 2^timeout, doubled after each timeout in a row, failing after
//     retry_cnt retries), RNR waits (rnr_retry 7 meaning forever), and
//     the NAKs that fail the QP. Answers outside the window are ignored.
//     Congestion control sits at the same gate: a loss-driven window
//     (AIMD, in packets), pacing at that window per round trip, DCQCN's
//     cut on CNPs, Swift's delay rule on long paths (Params.Delay), and,
//     before the local ACK timeout, a tail loss probe (go-back-N: the
//     oldest unacknowledged packet alone) or an early selective resend.
//     The gate is one call (Send: the packet goes, or a Hold says why
//     not: window, pacing until when, credits, an RNR wait, no replay
//     entry free), and so is an ACK or NAK (OnAETH); the window, the
//     pacer and the round-trip estimate are types of their own
//     (congestion.go), as quic-go keeps its congestion controller, pacer
//     and RTT statistics apart from its sent-packet handler.
//   - Receiver is a responder's half: the expected PSN, the class of each
//     request's PSN (new, duplicate, out of sequence), one sequence NAK
//     per gap and no more than one per SeqNAKInterval, the MSN, and the
//     READs and atomics it executed, so that a duplicate is answered
//     again and never executed twice.
//
// Selective repeat (Params.SelectiveRepeat, a Receiver initialised with
// it) is used only when both ends enable it. Its frames are standard
// RoCEv2 with one change of use: a WRITE of n packets goes as n
// RDMA_WRITE_ONLY packets, each with a RETH of its own (its VA, the R_Key
// and its own length), the last of a WRITE_WITH_IMM as
// RDMA_WRITE_ONLY_WITH_IMMEDIATE, so that the responder can place any of
// them on its own; the responder NAKs (PSN sequence error) each hole as it
// finds it, and the sender resends the missing packet and those after it
// that cannot be placed that way. READ responses that come ahead of order
// are placed by the requester, and the missing ones asked for with a READ
// request for just that range (a standard partial request, answered as a
// duplicate), whose answer ends with a LAST before the READ's end.
// softrnic perf agrees it in the keys exchange: bit 31 of the SRQN field (perftest.SelectiveRepeatFlag),
// which RC QPs otherwise leave 0. testdata/selective_write.txt is a
// three-packet WRITE as it goes on the wire.
//
// The datapath calls these and acts on what they return: it sends the
// packets, places data, and writes completions.
package reliability
