package hpu

// Submitter hands packets to the HPUs from one goroutine (a NIC engine's)
// as Engine.Submit does, except that it gives each cluster's queue its
// tasks a line of queue cells at a time (popBatch), with one
// compare-and-swap, and the HPUs take them the same way: a queue's line
// then moves between the submitting processor and an HPU's once for
// popBatch packets instead of twice for each (at every push, and at the
// pop that chased it), and the packets' slots are written back to back
// with no fence between them. Tasks wait in the Submitter until a
// cluster has popBatch of them or Publish is called: its goroutine calls
// Publish at the end of each burst it submits (a NIC engine, after the
// frames of a receive batch). A Submitter is used by one goroutine at a
// time, which must Publish what it holds before the engine closes.
//
// Nothing it does at a packet is a fence (an atomic read-modify-write,
// a lock) but the slot it takes, and a message's entry at its first and
// last packets: it keeps its own index of the messages
// whose last packet has not come, and its own packet counts, added to
// Stats and ContextStats when it publishes. So the stores of a line of
// packets (their slots, their payloads) go out together instead of one
// after the other, each waiting for its cache line to come from the HPU
// that read it last.
type Submitter struct {
	e       *Engine
	staged  []stage // by cluster
	held    int     // tasks staged, over every cluster
	counted bool    // counted in e.submitting (Close waits for it)

	msgIndex // its messages of several packets whose last packet has not come

	seq        uint64     // packets accepted: one in Config.TimeEvery is timed
	packets    uint64     // packets accepted, not yet in Stats.Packets
	ctx        *Installed // the context of the last packet accepted
	ctxPackets uint64     // its packets not yet in its Stats.Packets
}

type stage struct {
	slots [popBatch]int32 // tasks held for the cluster's queue
	n     int
}

// NewSubmitter returns a Submitter for one goroutine.
func (e *Engine) NewSubmitter() *Submitter {
	return &Submitter{e: e, staged: make([]stage, len(e.clusters)), msgIndex: msgIndex{index: make(map[msgKey]int32, e.cfg.Messages)}}
}

// Submit is Engine.Submit; the task reaches the HPUs at the latest at the
// next Publish.
func (s *Submitter) Submit(in *Installed, msg Message, pkt Packet) error {
	return s.e.submit(in, &msg, &pkt, s, nil)
}

// Held is the number of tasks waiting for Publish.
func (s *Submitter) Held() int { return s.held }

// Publish hands every task held to the HPUs, and adds the packets
// accepted to the counters.
func (s *Submitter) Publish() {
	if s.held > 0 {
		for c := range s.staged {
			if s.staged[c].n > 0 {
				s.publish(&s.e.clusters[c])
			}
		}
	}
	s.flushCounts()
	s.leave()
}

// Abort is Engine.Abort for the messages submitted here.
func (s *Submitter) Abort(in *Installed, qpn, msn uint32, err error) bool {
	k := msgKey{in, qpn, msn}
	mi, ok := s.find(k)
	if !ok {
		return s.e.Abort(in, qpn, msn, err)
	}
	s.remove(k)
	s.e.abort(&s.e.msgs[mi], err)
	return true
}

// enter counts the Submitter in e.submitting, if it is not yet: Close
// waits until it publishes (leave).
func (s *Submitter) enter() {
	if !s.counted {
		s.e.submitting.Add(1)
		s.counted = true
	}
}

// leave takes the Submitter out of e.submitting once it holds nothing.
func (s *Submitter) leave() {
	if s.counted && s.held == 0 {
		s.e.submitting.Add(-1)
		s.counted = false
	}
}

// count counts a packet accepted of context in and returns its number.
func (s *Submitter) count(in *Installed) uint64 {
	if in != s.ctx {
		s.flushCounts()
		s.ctx = in
	}
	s.seq++
	s.packets++
	s.ctxPackets++
	return s.seq
}

// flushCounts adds the packets accepted to the counters.
func (s *Submitter) flushCounts() {
	if s.packets > 0 {
		s.e.Stats.Packets.Add(s.packets)
		s.packets = 0
	}
	if s.ctxPackets > 0 {
		s.ctx.Stats.Packets.Add(s.ctxPackets)
		s.ctxPackets = 0
	}
}

// hold keeps a cluster's task, publishing the cluster's tasks once they
// fill a line of its queue.
func (s *Submitter) hold(cl *cluster, slot int32) {
	st := &s.staged[cl.id]
	st.slots[st.n] = slot
	st.n++
	s.held++
	if st.n == popBatch {
		s.publish(cl)
	}
}

func (s *Submitter) publish(cl *cluster) {
	st := &s.staged[cl.id]
	s.e.queueN(cl, st.slots[:st.n])
	s.held -= st.n
	st.n = 0
	if s.held == 0 {
		s.flushCounts()
	}
}
