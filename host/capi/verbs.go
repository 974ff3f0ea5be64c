package main

/*
#define SRN_GO
#include "srn.h"
*/
import "C"

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/softrnic/softrnic/host/verbs"
	"golang.org/x/sys/unix"
)

type pd struct {
	dev *device
	pd  *verbs.PD
}

type mr struct{ mr *verbs.MR }

// cq is a CQ and its completion channel: armed by ibv_req_notify_cq, it
// writes its cookie (the C library's struct ibv_cq pointer) to the
// channel's pipe at the next completion.
type cq struct {
	dev           *device
	cq            *verbs.CQ
	fd            int // the channel's write end, or -1
	cookie        [8]byte
	armed         atomic.Bool
	solicitedOnly atomic.Bool // the arm waits for a solicited event
	mu            sync.Mutex
	wc            []verbs.WC // poll's buffer
}

type srq struct {
	srq *verbs.SRQ
	mu  sync.Mutex
	rwr []verbs.RecvWR
	sge [][C.SRN_MAX_RECV_SGE]verbs.SGE
}

// qp is a QP and the buffers its posts convert into, so that a post
// allocates nothing.
type qp struct {
	dev  *device
	qp   *verbs.QP
	mu   sync.Mutex
	swr  []verbs.SendWR
	ssge [][C.SRN_MAX_SEND_SGE]verbs.SGE
	rwr  []verbs.RecvWR
	rsge [][C.SRN_MAX_RECV_SGE]verbs.SGE
}

type ah struct{ ah verbs.AH }

var (
	pds  table[pd]
	mrs  table[mr]
	cqs  table[cq]
	srqs table[srq]
	qps  table[qp]
	ahs  table[ah]
)

// postBatch is the most work requests the C side hands over in one call.
const postBatch = 32

//export srn_alloc_pd
func srn_alloc_pd(dev C.int) C.int {
	d := devices.t.get(dev)
	if d == nil {
		return -C.int(unix.EINVAL)
	}
	p, err := d.dev.AllocPD()
	if err != nil {
		return errno(err)
	}
	return C.int(pds.put(&pd{dev: d, pd: p}))
}

//export srn_dealloc_pd
func srn_dealloc_pd(h C.int) C.int {
	if pds.get(h) == nil {
		return -C.int(unix.EINVAL)
	}
	pds.del(h)
	return 0
}

// srn_reg_mr registers the program's len bytes at addr, named from iova
// on by SGEs and by the peer.
//
//export srn_reg_mr
func srn_reg_mr(h C.int, addr unsafe.Pointer, n C.uint64_t, iova C.uint64_t, access C.int, lkey, rkey *C.uint32_t) C.int {
	p := pds.get(h)
	if p == nil || addr == nil || n == 0 {
		return -C.int(unix.EINVAL)
	}
	m, err := p.pd.RegMRAt(unsafe.Slice((*byte)(addr), int(n)), uint64(iova), verbs.Access(access))
	if err != nil {
		return errno(err)
	}
	*lkey, *rkey = C.uint32_t(m.LKey), C.uint32_t(m.RKey)
	return C.int(mrs.put(&mr{mr: m}))
}

//export srn_dereg_mr
func srn_dereg_mr(h C.int) C.int {
	m := mrs.get(h)
	if m == nil {
		return -C.int(unix.EINVAL)
	}
	if err := m.mr.Dereg(); err != nil {
		return errno(err)
	}
	mrs.del(h)
	return 0
}

// srn_create_cq creates a CQ of at least n entries; fd is its completion
// channel's write end (or -1) and cookie what is written there.
//
//export srn_create_cq
func srn_create_cq(dev C.int, n C.int, fd C.int, cookie C.uint64_t, actual *C.int) C.int {
	d := devices.t.get(dev)
	if d == nil || n < 1 {
		return -C.int(unix.EINVAL)
	}
	c, err := d.dev.CreateCQ(int(n))
	if err != nil {
		return errno(err)
	}
	q := &cq{dev: d, cq: c, fd: int(fd), wc: make([]verbs.WC, postBatch)}
	binary.NativeEndian.PutUint64(q.cookie[:], uint64(cookie))
	if fd >= 0 {
		c.OnCompletion(q.completed)
	}
	size := 1
	for size < int(n) {
		size <<= 1
	}
	*actual = C.int(size)
	return C.int(cqs.put(q))
}

// completed is the CQ's completion notice: the first after an arm sends
// the channel an event.
func (q *cq) completed(solicited bool) {
	if q.armed.Load() && (solicited || !q.solicitedOnly.Load()) && q.armed.CompareAndSwap(true, false) {
		unix.Write(q.fd, q.cookie[:])
	}
}

//export srn_destroy_cq
func srn_destroy_cq(h C.int) C.int {
	q := cqs.get(h)
	if q == nil {
		return -C.int(unix.EINVAL)
	}
	if err := q.cq.Destroy(); err != nil {
		return errno(err)
	}
	q.cq.OnCompletion(nil)
	cqs.del(h)
	return 0
}

// srn_poll_cq takes up to n completions (at most postBatch) into wc and
// returns how many.
//
//export srn_poll_cq
func srn_poll_cq(h C.int, n C.int, wc *C.struct_srn_wc) C.int {
	q := cqs.get(h)
	if q == nil || n < 0 {
		return -C.int(unix.EINVAL)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var got int
	if q.armed.Load() { // the program sleeps on the channel: the NIC's goroutines drive it
		got = q.cq.PollNoDrive(q.wc[:min(int(n), len(q.wc))])
	} else {
		got = q.cq.Poll(q.wc[:min(int(n), len(q.wc))])
	}
	out := unsafe.Slice(wc, got)
	for i, w := range q.wc[:got] {
		out[i] = C.struct_srn_wc{wr_id: C.uint64_t(w.WRID), status: C.uint32_t(w.Status), opcode: C.uint32_t(w.Opcode),
			byte_len: C.uint32_t(w.ByteLen), qp_num: C.uint32_t(w.QPNum), src_qp: C.uint32_t(w.SrcQP),
			wc_flags: C.uint32_t(w.Flags &^ verbs.WCSolicited), imm: C.uint32_t(w.Imm)}
	}
	return C.int(got)
}

// srn_arm_cq arms the CQ's channel for its next completion (solicited:
// its next solicited event: a message whose sender asked for one, or an
// error).
//
//export srn_arm_cq
func srn_arm_cq(h C.int, solicited C.int) C.int {
	q := cqs.get(h)
	if q == nil {
		return -C.int(unix.EINVAL)
	}
	if q.fd < 0 {
		return -C.int(unix.EINVAL)
	}
	q.solicitedOnly.Store(solicited != 0)
	q.armed.Store(true)
	// The program sleeps on the channel next: its polling drives the NIC
	// no more (SOFTRNIC_POLL=app), the NIC's goroutines take over.
	q.dev.dev.NIC().Release()
	return 0
}

//export srn_create_srq
func srn_create_srq(h C.int, maxWR, maxSGE C.int, actual *C.int) C.int {
	p := pds.get(h)
	if p == nil || maxWR < 1 || maxSGE < 0 {
		return -C.int(unix.EINVAL)
	}
	s, err := p.pd.CreateSRQ(int(maxWR), int(maxSGE))
	if err != nil {
		return errno(err)
	}
	size := 1
	for size < int(maxWR) {
		size <<= 1
	}
	*actual = C.int(size)
	return C.int(srqs.put(&srq{srq: s, rwr: make([]verbs.RecvWR, postBatch), sge: make([][C.SRN_MAX_RECV_SGE]verbs.SGE, postBatch)}))
}

//export srn_destroy_srq
func srn_destroy_srq(h C.int) C.int {
	s := srqs.get(h)
	if s == nil {
		return -C.int(unix.EINVAL)
	}
	if err := s.srq.Destroy(); err != nil {
		return errno(err)
	}
	srqs.del(h)
	return 0
}

//export srn_post_srq_recv
func srn_post_srq_recv(h C.int, n C.int, wr *C.struct_srn_recv_wr, bad *C.int) C.int {
	s := srqs.get(h)
	if s == nil || n < 0 || n > postBatch {
		return -C.int(unix.EINVAL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	wrs := recvWRs(s.rwr, s.sge, unsafe.Slice(wr, int(n)))
	done, err := s.srq.PostRecv(wrs)
	*bad = C.int(done)
	return errno(err)
}

// recvWRs converts receive work requests (the C side refused any with
// more SGEs than the queue takes).
func recvWRs(dst []verbs.RecvWR, sges [][C.SRN_MAX_RECV_SGE]verbs.SGE, src []C.struct_srn_recv_wr) []verbs.RecvWR {
	for i := range src {
		w := &src[i]
		k := min(int(w.num_sge), C.SRN_MAX_RECV_SGE)
		sl := sges[i][:k]
		for j := range k {
			sl[j] = verbs.SGE{Addr: uint64(w.sge[j].addr), Length: uint32(w.sge[j].length), LKey: uint32(w.sge[j].lkey)}
		}
		dst[i] = verbs.RecvWR{WRID: uint64(w.wr_id), SGL: sl}
	}
	return dst[:len(src)]
}

// srn_create_qp creates a QP in RESET and returns its handle; init's
// qp_num is set.
//
//export srn_create_qp
func srn_create_qp(h C.int, init *C.struct_srn_qp_init) C.int {
	p := pds.get(h)
	if p == nil {
		return -C.int(unix.EINVAL)
	}
	sc, rc := cqs.get(C.int(init.send_cq)), cqs.get(C.int(init.recv_cq))
	if sc == nil || rc == nil {
		setLastError("a QP needs a send and a receive CQ")
		return -C.int(unix.EINVAL)
	}
	attr := verbs.QPInitAttr{Type: verbs.QPType(init.qp_type), SendCQ: sc.cq, RecvCQ: rc.cq,
		Cap: verbs.QPCap{MaxSendWR: int(init.max_send_wr), MaxRecvWR: int(init.max_recv_wr), MaxSendSGE: int(init.max_send_sge),
			MaxRecvSGE: int(init.max_recv_sge), MaxInlineData: int(init.max_inline)}}
	if init.srq >= 0 {
		s := srqs.get(C.int(init.srq))
		if s == nil {
			return -C.int(unix.EINVAL)
		}
		attr.SRQ = s.srq
	}
	q, err := p.pd.CreateQP(attr)
	if err != nil {
		return errno(err)
	}
	init.qp_num = C.uint32_t(q.Num)
	init.max_inline = C.uint32_t(q.MaxInline()) // what the QP takes, as ibv_create_qp reports
	return C.int(qps.put(&qp{dev: p.dev, qp: q,
		swr: make([]verbs.SendWR, postBatch), ssge: make([][C.SRN_MAX_SEND_SGE]verbs.SGE, postBatch),
		rwr: make([]verbs.RecvWR, postBatch), rsge: make([][C.SRN_MAX_RECV_SGE]verbs.SGE, postBatch)}))
}

// srn_modify_qp applies ibv_modify_qp's attributes; an address vector's
// GID is resolved to the peer's (or next hop's) MAC here.
//
//export srn_modify_qp
func srn_modify_qp(h C.int, a *C.struct_srn_qp_attr, mask C.int) C.int {
	q := qps.get(h)
	if q == nil {
		return -C.int(unix.EINVAL)
	}
	attr := verbs.QPAttr{State: verbs.QPState(a.qp_state), CurState: verbs.QPState(a.cur_qp_state), AccessFlags: verbs.Access(a.qp_access_flags),
		PKeyIndex: int(a.pkey_index), Port: int(a.port_num), QKey: uint32(a.qkey), PathMTU: int(a.path_mtu),
		Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry), RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn),
		MaxRdAtomic: uint8(a.max_rd_atomic), MaxDestRdAtomic: uint8(a.max_dest_rd_atomic), MinRNRTimer: uint8(a.min_rnr_timer), DestQPN: uint32(a.dest_qp_num)}
	m := verbs.AttrMask(mask)
	if m&verbs.AttrAV != 0 {
		var gid [16]byte
		for i := range gid {
			gid[i] = byte(a.dgid[i])
		}
		mac, err := q.dev.resolve(gid)
		if err != nil {
			return errno(err)
		}
		attr.AH = verbs.AH{DestMAC: mac, DestGID: netip.AddrFrom16(gid).Unmap(), TrafficClass: uint8(a.traffic_class)}
	}
	return errno(q.qp.Modify(&attr, m))
}

// srn_qp_state returns the QP's state (ERR once the NIC completed a work
// request in error).
//
//export srn_qp_state
func srn_qp_state(h C.int) C.int {
	q := qps.get(h)
	if q == nil {
		return -C.int(unix.EINVAL)
	}
	return C.int(q.qp.State())
}

//export srn_destroy_qp
func srn_destroy_qp(h C.int) C.int {
	q := qps.get(h)
	if q == nil {
		return -C.int(unix.EINVAL)
	}
	if err := q.qp.Destroy(); err != nil {
		return errno(err)
	}
	qps.del(h)
	return 0
}

// srn_post_send posts n (at most postBatch) send work requests; *bad is
// set to how many were posted.
//
//export srn_post_send
func srn_post_send(h C.int, n C.int, wr *C.struct_srn_send_wr, bad *C.int) C.int {
	q := qps.get(h)
	if q == nil || n < 0 || n > postBatch {
		return -C.int(unix.EINVAL)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	src := unsafe.Slice(wr, int(n))
	for i := range src {
		w := &src[i]
		k := min(int(w.num_sge), C.SRN_MAX_SEND_SGE) // the C side refused more
		sl := q.ssge[i][:k]
		for j := range k {
			sl[j] = verbs.SGE{Addr: uint64(w.sge[j].addr), Length: uint32(w.sge[j].length), LKey: uint32(w.sge[j].lkey)}
		}
		s := verbs.SendWR{WRID: uint64(w.wr_id), Opcode: verbs.WROpcode(w.opcode), Flags: verbs.SendFlags(w.flags), SGL: sl,
			Imm: uint32(w.imm), RemoteAddr: uint64(w.remote_addr), RKey: uint32(w.rkey), CompareAdd: uint64(w.compare_add), Swap: uint64(w.swap),
			RemoteQPN: uint32(w.remote_qpn), RemoteQKey: uint32(w.remote_qkey)}
		if w.flags&C.uint32_t(verbs.SendInline) != 0 {
			s.Inline = []byte{}
			if w.inline_len > 0 {
				s.Inline = unsafe.Slice((*byte)(w.inline_data), int(w.inline_len))
			}
		}
		if w.ah >= 0 {
			if a := ahs.get(C.int(w.ah)); a != nil {
				s.AH = &a.ah
			}
		}
		q.swr[i] = s
	}
	done, err := q.qp.PostSend(q.swr[:n])
	*bad = C.int(done)
	for i := range src { // drop the references to C memory
		q.swr[i].Inline = nil
	}
	return errno(err)
}

//export srn_post_recv
func srn_post_recv(h C.int, n C.int, wr *C.struct_srn_recv_wr, bad *C.int) C.int {
	q := qps.get(h)
	if q == nil || n < 0 || n > postBatch {
		return -C.int(unix.EINVAL)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	done, err := q.qp.PostRecv(recvWRs(q.rwr, q.rsge, unsafe.Slice(wr, int(n))))
	*bad = C.int(done)
	return errno(err)
}

// srn_create_ah makes an address handle for a GID, resolving its MAC
// (written to dmac).
//
//export srn_create_ah
func srn_create_ah(h C.int, dgid *C.uint8_t, tclass C.uint8_t, dmac *C.uint8_t) C.int {
	p := pds.get(h)
	if p == nil {
		return -C.int(unix.EINVAL)
	}
	var gid [16]byte
	copy(gid[:], unsafe.Slice((*byte)(unsafe.Pointer(dgid)), 16))
	mac, err := p.dev.resolve(gid)
	if err != nil {
		return errno(err)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(dmac)), 6), mac[:])
	return C.int(ahs.put(&ah{ah: verbs.AH{DestMAC: mac, DestGID: netip.AddrFrom16(gid).Unmap(), TrafficClass: uint8(tclass)}}))
}

// srn_attach_mcast attaches UD QP h to the multicast group of GID gid
// (ibv_attach_mcast: an IPv4-mapped group address); detach, with
// detach set (ibv_detach_mcast).
//
//export srn_attach_mcast
func srn_attach_mcast(h C.int, gid *C.uint8_t, detach C.int) C.int {
	q := qps.get(h)
	if q == nil {
		return -C.int(unix.EINVAL)
	}
	var g [16]byte
	copy(g[:], unsafe.Slice((*byte)(unsafe.Pointer(gid)), 16))
	group := netip.AddrFrom16(g).Unmap()
	var err error
	if detach != 0 {
		err = q.qp.DetachMulticast(group)
	} else {
		err = q.qp.AttachMulticast(group)
	}
	return errno(err) // the udp port's refusal is EOPNOTSUPP
}

//export srn_destroy_ah
func srn_destroy_ah(h C.int) C.int {
	if ahs.get(h) == nil {
		return -C.int(unix.EINVAL)
	}
	ahs.del(h)
	return 0
}
