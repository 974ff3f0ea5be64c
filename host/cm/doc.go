// Package cm is InfiniBand connection management (IBTA chapter 12) as
// RDMA applications use it on RoCE through librdmacm: management
// datagrams (MADs) of the communication management class, carried by the
// general services interface (GSI) on QP1 with the Q_Key 0x80010000, and
// the messages that set up and tear down a reliable connection (REQ,
// MRA, REJ, REP, RTU, DREQ, DREP), with rdma_cm's IP addressing in the
// private data of a REQ (the service ID of a port space and port, the
// source and destination IP addresses).
//
// The wire formats (mad.go, messages.go, ip.go): every message parses
// from and encodes to its 256-byte MAD, and a malformed one is refused
// with an error, never a panic.
//
// The Agent is a device's communication manager. It serves QP1 and
// connects RC QPs the way net.Dial and net.Listen connect sockets:
// Agent.Dial(ctx, "10.0.0.2:7471", QPConfig{}) and Agent.Listen(":7471",
// QPConfig{}) with Listener.Accept return a Conn whose QP is in RTS,
// connected to the peer's; Conn.Close disconnects (DREQ/DREP) and
// destroys what the agent made for it. Each message is sent again on its
// response timeout; a REJ is a *RejectError. It interoperates with the
// Linux kernel's CM and librdmacm (rping, perftest -R).
//
// librdmacm's own model, where the application answers each request,
// is there too (request.go): ListenRequests hands out each Request to
// Accept, with the caller's QP (QPConfig.Existing, receives posted), or
// to Reject; and UD services are found by service ID resolution
// (SIDR_REQ and SIDR_REP: ListenUD, Request.AcceptUD, Agent.ResolveUD),
// as udaddy does it.
package cm
