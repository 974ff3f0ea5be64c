package verbs

import (
	"fmt"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/hpu"
)

// Match selects the messages of a QP that go to its execution context
// (datapath.Match): by kind, by a tag in their first bytes, by immediate.
type Match = datapath.Match

// Kinds of message a Match takes.
const (
	MatchSend  = datapath.MatchSend
	MatchWrite = datapath.MatchWrite
)

// AttachHandlers installs an execution context (package hpu) on the QP:
// the messages m selects run through the context's handlers on the NIC
// instead of landing in memory, and the QP acknowledges each only after
// its handlers have finished. A handler's fault fails its message: the
// requester's work request completes with a remote error, c.Done gets
// the fault, and the QP moves to the error state. Attach before the peer
// sends (on a QP that a connection manager connects, in
// cm.QPConfig.Prepare: it runs before the peer may send); the handler
// stage starts at the first attach, with the sizes of DeviceConfig.HPU.
// Handlers and c.Done run on the NIC's HPU goroutines, and those of a
// context whose handlers run short on the engine that received the
// packet (counter hpu_helped): they must not wait for the NIC, as a
// verbs call that changes a QP does.
func (qp *QP) AttachHandlers(c hpu.Context, m Match) (*hpu.Installed, error) {
	if qp.Type == QPTUD {
		return nil, fmt.Errorf("%w: handlers run on RC and UC QPs", ErrInvalid)
	}
	return qp.pd.dev.nic.AttachHPU(qp.Num, c, m)
}

// ShareHandlers attaches a context attached to another QP of the device
// to this QP too: both QPs' messages run through it and share its handler
// memory (an aggregation over several senders, one QP each).
func (qp *QP) ShareHandlers(in *hpu.Installed, m Match) error {
	if qp.Type == QPTUD {
		return fmt.Errorf("%w: handlers run on RC and UC QPs", ErrInvalid)
	}
	return qp.pd.dev.nic.ShareHPU(qp.Num, in, m)
}

// Handlers is the QP as an hpu.Installer: a context installed through it
// is attached to the QP with match m (how package apps installs on a live
// NIC).
func (qp *QP) Handlers(m Match) hpu.Installer { return qpInstaller{qp, m} }

type qpInstaller struct {
	qp *QP
	m  Match
}

func (i qpInstaller) Install(c hpu.Context) (*hpu.Installed, error) {
	return i.qp.AttachHandlers(c, i.m)
}

// DetachHandlers removes the QP's execution context: messages that start
// from now on land as usual.
func (qp *QP) DetachHandlers() { qp.pd.dev.nic.DetachHPU(qp.Num) }

// Region is the MR as an execution context's host region (hpu.Region),
// at offsets from the region's start: handlers' DMAs reach it through an
// HPU cluster's memory path, under the MR's L_Key, with the checks and
// translation of every access the device makes (a write needs
// AccessLocalWrite; a deregistered MR refuses every access).
func (mr *MR) Region() hpu.Region {
	return mr.pd.dev.nic.HostRegion(mr.LKey, mr.pd.num, mr.Addr, uint64(len(mr.Buf)))
}
