// Package cm is InfiniBand connection management (IBTA chapter 12) as
// RDMA applications use it on RoCE through librdmacm: management
// datagrams (MADs) of the communication management class, carried by the
// general services interface (GSI) on QP1 with the Q_Key 0x80010000, and
// the messages that set up and tear down a reliable connection (REQ,
// MRA, REJ, REP, RTU, DREQ, DREP), with rdma_cm's IP addressing in the
// private data of a REQ (the service ID of a port space and port, the
// source and destination IP addresses).
//
// This file set holds the wire formats: every message parses from and
// encodes to its 256-byte MAD, and a malformed one is refused with an
// error, never a panic.
package cm
