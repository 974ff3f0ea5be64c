// Package rping is librdmacm's rping example program on a softrnic
// device: over a connection set up through the connection manager
// (package cm), the client advertises a buffer holding "rdma-ping-N: "
// and a run of letters, the server READs it, says "go ahead", the
// client advertises a second, empty buffer, the server WRITEs the text
// into it and says "go ahead" again; each advertisement and each "go
// ahead" is a 16-byte SEND (address, R_Key and length, big-endian). The
// client may check the text came back intact (-V).
package rping

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/verbs"
)

// Port is rping's default port (rdma_cm's TCP port space).
const Port = 7174

// Sizes rping accepts for its ping data (-S).
const (
	MinSize     = 22
	MaxSize     = 64*1024 - 1
	DefaultSize = 64
	infoSize    = 16 // struct rping_rdma_info: buf, rkey, size
)

// Config is rping's options.
type Config struct {
	Count    int  // -C: pings (0: until the peer disconnects, server; client: for ever)
	Size     int  // -S: ping data size (0: 64)
	Verbose  bool // -v: print the ping data
	Validate bool // -V: the client checks the data came back intact
}

// Endpoint holds one side's QP, CQ and buffers.
type Endpoint struct {
	QP  *verbs.QP
	CQ  *verbs.CQ // the QP's send and receive CQ
	MR  *verbs.MR // over Buf
	Buf []byte    // at least BufSize(Size) bytes: recv info, send info, rdma buffer, start buffer
}

// BufSize is the buffer an Endpoint needs for a ping size.
func BufSize(size int) int { return 2*infoSize + 2*size }

// QPConfig is what a connection's QP needs for rping (cm.Dial or
// cm.Listen): two receives, sixteen sends, one READ each way, as rping
// sets them.
func QPConfig(pd *verbs.PD, cq *verbs.CQ) cm.QPConfig {
	return cm.QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq, ResponderResources: 1, InitiatorDepth: 1,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

func (e *Endpoint) recvInfo() []byte { return e.Buf[0:infoSize] }
func (e *Endpoint) sendInfo() []byte { return e.Buf[infoSize : 2*infoSize] }
func (e *Endpoint) rdma(size int) []byte {
	return e.Buf[2*infoSize : 2*infoSize+size]
}
func (e *Endpoint) start(size int) []byte {
	return e.Buf[2*infoSize+size : 2*infoSize+2*size]
}
func (e *Endpoint) addr(b []byte) uint64 {
	return e.MR.Addr + uint64(cap(e.Buf)-cap(b))
}

// PostRecv posts the receive of the peer's next 16-byte advertisement.
func (e *Endpoint) PostRecv() error {
	_, err := e.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{{Addr: e.addr(e.recvInfo()), Length: infoSize, LKey: e.MR.LKey}}}})
	return err
}

// advertise sends the address, R_Key and length of b.
func (e *Endpoint) advertise(b []byte, size int) error {
	info := e.sendInfo()
	binary.BigEndian.PutUint64(info[0:], e.addr(b))
	binary.BigEndian.PutUint32(info[8:], e.MR.RKey)
	binary.BigEndian.PutUint32(info[12:], uint32(size))
	return e.send()
}

func (e *Endpoint) send() error {
	_, err := e.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: e.addr(e.sendInfo()), Length: infoSize, LKey: e.MR.LKey}}}})
	return err
}

// ErrDisconnected is the peer going away before the pings were done.
var ErrDisconnected = errors.New("rping: disconnected")

// wait waits for a completion of the given opcode, taking (and checking)
// the others on the way; a receive is posted again. done is the
// connection's end.
func (e *Endpoint) wait(ctx context.Context, done <-chan struct{}, want verbs.WCOpcode) (verbs.WC, error) {
	wc := make([]verbs.WC, 1)
	for {
		if e.CQ.Poll(wc) == 0 {
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := e.CQ.Wait(wctx)
			cancel()
			if ctx.Err() != nil {
				return verbs.WC{}, ctx.Err()
			}
			if err != nil {
				select {
				case <-done:
					return verbs.WC{}, ErrDisconnected
				default:
				}
			}
			continue
		}
		w := wc[0]
		if w.Status == verbs.WCWRFlushErr {
			return w, ErrDisconnected
		}
		if w.Status != verbs.WCSuccess {
			return w, fmt.Errorf("rping: cq completion failed status %d (%v)", int(w.Status), w.Status)
		}
		if w.Opcode == verbs.WCRecv {
			if w.ByteLen != infoSize {
				return w, fmt.Errorf("rping: received bogus data, size %d", w.ByteLen)
			}
			if err := e.PostRecv(); err != nil {
				return w, err
			}
		}
		if w.Opcode == want {
			return w, nil
		}
	}
}

// Server answers one client's pings until it disconnects (or Count
// pings, when Count is set).
func Server(ctx context.Context, c *cm.Conn, e *Endpoint, cfg Config, out io.Writer) error {
	size := cfg.Size
	if size == 0 {
		size = DefaultSize
	}
	for ping := 0; cfg.Count == 0 || ping < cfg.Count; ping++ {
		// The client's source buffer.
		if _, err := e.wait(ctx, c.Done(), verbs.WCRecv); err != nil {
			if errors.Is(err, ErrDisconnected) {
				return nil
			}
			return err
		}
		info := e.recvInfo()
		raddr, rkey, rlen := binary.BigEndian.Uint64(info[0:]), binary.BigEndian.Uint32(info[8:]), binary.BigEndian.Uint32(info[12:])
		if int(rlen) > size {
			return fmt.Errorf("rping: the client's buffer of %d bytes is larger than this side's %d (-S)", rlen, size)
		}
		buf := e.rdma(size)
		if _, err := e.QP.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: e.addr(buf), Length: rlen, LKey: e.MR.LKey}}, RemoteAddr: raddr, RKey: rkey}}); err != nil {
			return err
		}
		if _, err := e.wait(ctx, c.Done(), verbs.WCRDMARead); err != nil {
			return err
		}
		text := cstring(buf[:rlen])
		if cfg.Verbose {
			fmt.Fprintf(out, "server ping data: %s\n", text)
		}
		if err := e.send(); err != nil { // go ahead
			return err
		}
		// The client's sink buffer.
		if _, err := e.wait(ctx, c.Done(), verbs.WCRecv); err != nil {
			return err
		}
		raddr, rkey = binary.BigEndian.Uint64(info[0:]), binary.BigEndian.Uint32(info[8:])
		if _, err := e.QP.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: e.addr(buf), Length: uint32(len(text) + 1), LKey: e.MR.LKey}}, RemoteAddr: raddr, RKey: rkey}}); err != nil {
			return err
		}
		if _, err := e.wait(ctx, c.Done(), verbs.WCRDMAWrite); err != nil {
			return err
		}
		if err := e.send(); err != nil { // go ahead again
			return err
		}
	}
	return nil
}

// Client sends Count pings (for ever with 0) and checks each came back
// (with Validate).
func Client(ctx context.Context, c *cm.Conn, e *Endpoint, cfg Config, out io.Writer) error {
	size := cfg.Size
	if size == 0 {
		size = DefaultSize
	}
	start, sink := e.start(size), e.rdma(size)
	letter := byte(65)
	for ping := 0; cfg.Count == 0 || ping < cfg.Count; ping++ {
		n := copy(start, fmt.Sprintf("rdma-ping-%d: ", ping))
		for i, ch := n, letter; i < size; i++ {
			start[i] = ch
			if ch++; ch > 122 {
				ch = 65
			}
		}
		if letter++; letter > 122 {
			letter = 65
		}
		start[size-1] = 0
		clear(sink)
		if err := e.advertise(start, size); err != nil {
			return err
		}
		if _, err := e.wait(ctx, c.Done(), verbs.WCRecv); err != nil { // go ahead: the server read it
			return err
		}
		if err := e.advertise(sink, size); err != nil {
			return err
		}
		if _, err := e.wait(ctx, c.Done(), verbs.WCRecv); err != nil { // go ahead: the server wrote it back
			return err
		}
		if cfg.Validate && string(start) != string(sink) {
			return fmt.Errorf("rping: data mismatch in ping %d: sent %q, got back %q", ping, cstring(start), cstring(sink))
		}
		if cfg.Verbose {
			fmt.Fprintf(out, "ping data: %s\n", cstring(sink))
		}
	}
	return nil
}

// cstring is b up to its first NUL.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
