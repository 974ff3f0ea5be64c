package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/google/gopacket/pcapgo"

	"github.com/softrnic/softrnic/datapath/wire"
)

// runDecode parses every frame of pcap or pcapng files with package wire,
// prints one line per RoCEv2 frame, and a summary by opcode and by error.
// It exits non-zero if any RoCEv2 frame is malformed.
func runDecode(args []string, stdout io.Writer) error {
	fs := newFlagSet("decode", "decode [-s] FILE.pcap|FILE.pcapng ...",
		"One line per RoCEv2 frame (ICRC checked), then a summary by opcode and by error.\n")
	summary := fs.Bool("s", false, "print only the summary")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return badUsage(flagUsage(fs), "no capture files given")
	}
	var st decodeStats
	st.ops = map[wire.Opcode]int{}
	st.errs = map[error]int{}
	for _, name := range fs.Args() {
		if err := st.decodeFile(name, stdout, *summary); err != nil {
			return err
		}
	}
	st.print(stdout)
	if st.bad > 0 {
		return fmt.Errorf("%d malformed RoCEv2 frames", st.bad)
	}
	return nil
}

type decodeStats struct {
	frames, roce, other, bad int
	ops                      map[wire.Opcode]int
	errs                     map[error]int
}

func (st *decodeStats) decodeFile(name string, w io.Writer, quiet bool) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	next, err := openCapture(f)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for i := 1; ; i++ {
		data, err := next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s frame %d: %w", name, i, err)
		}
		st.frames++
		var p wire.Packet
		err = wire.Parse(data, &p)
		switch {
		case errors.Is(err, wire.ErrNotIP), errors.Is(err, wire.ErrNotUDP), errors.Is(err, wire.ErrNotRoCE):
			st.other++
			continue
		case err != nil:
			st.bad++
			st.errs[err]++
			if !quiet {
				fmt.Fprintf(w, "%s:%d  %v\n", name, i, err)
			}
			continue
		}
		st.roce++
		st.ops[p.Opcode]++
		if !quiet {
			fmt.Fprintf(w, "%s:%d  %s\n", name, i, describe(&p))
		}
	}
}

// openCapture returns a frame reader for a pcapng or classic pcap file.
func openCapture(f *os.File) (func() ([]byte, error), error) {
	if ng, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions); err == nil {
		return func() ([]byte, error) { d, _, err := ng.ReadPacketData(); return d, err }, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, errors.New("neither pcapng nor pcap")
	}
	return func() ([]byte, error) { d, _, err := r.ReadPacketData(); return d, err }, nil
}

// describe renders a packet in one line.
func describe(p *wire.Packet) string {
	var src, dst string
	if p.IPv6 {
		src, dst = p.IPv6Header().Src().String(), p.IPv6Header().Dst().String()
	} else {
		src, dst = p.IPv4Header().Src().String(), p.IPv4Header().Dst().String()
	}
	b := p.BTH()
	s := fmt.Sprintf("%s > %s  %-34s qp=%#06x psn=%d", src, dst, p.Opcode, b.DestQP(), b.PSN())
	if b.AckReq() {
		s += " ackreq"
	}
	if h := p.DETH(); h != nil {
		s += fmt.Sprintf(" qkey=%#x srcqp=%#x", h.QKey(), h.SrcQP())
	}
	if h := p.RETH(); h != nil {
		s += fmt.Sprintf(" va=%#x rkey=%#x len=%d", h.VA(), h.RKey(), h.DMALen())
	}
	if h := p.AtomicETH(); h != nil {
		s += fmt.Sprintf(" va=%#x rkey=%#x swap/add=%#x cmp=%#x", h.VA(), h.RKey(), h.SwapAdd(), h.Compare())
	}
	if h := p.AETH(); h != nil {
		s += fmt.Sprintf(" %s msn=%d", syndromeString(h.Syndrome()), h.MSN())
	}
	if h := p.AtomicAckETH(); h != nil {
		s += fmt.Sprintf(" orig=%#x", h.OrigData())
	}
	if h := p.ImmDt(); h != nil {
		s += fmt.Sprintf(" imm=%#08x", h.Imm())
	}
	if h := p.IETH(); h != nil {
		s += fmt.Sprintf(" inv_rkey=%#x", h.RKey())
	}
	if p.Info.Flags&wire.OpPayload != 0 {
		s += fmt.Sprintf(" payload=%d", p.PayloadLen)
	}
	return s
}

func syndromeString(s wire.Syndrome) string {
	switch {
	case s.IsACK():
		if s.Value() == wire.CreditsInvalid {
			return "ACK"
		}
		n, _ := wire.Credits(s.Value())
		return fmt.Sprintf("ACK(credits=%d)", n)
	case s.IsRNRNAK():
		return fmt.Sprintf("RNR_NAK(%dus)", wire.RNRTimerMicros(s.Value()))
	case s.IsNAK():
		names := []string{"PSN_SEQ_ERR", "INV_REQ", "REM_ACCESS_ERR", "REM_OP_ERR", "INV_RD_REQ"}
		if int(s.Value()) < len(names) {
			return "NAK(" + names[s.Value()] + ")"
		}
	}
	return fmt.Sprintf("syndrome=%#02x", uint8(s))
}

func (st *decodeStats) print(w io.Writer) {
	fmt.Fprintf(w, "\n%d frames: %d RoCEv2 (ICRC good), %d malformed, %d other traffic\n", st.frames, st.roce, st.bad, st.other)
	ops := make([]wire.Opcode, 0, len(st.ops))
	for op := range st.ops {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i] < ops[j] })
	for _, op := range ops {
		fmt.Fprintf(w, "%8d  %s\n", st.ops[op], op)
	}
	for err, n := range st.errs {
		fmt.Fprintf(w, "%8d  %v\n", n, err)
	}
}
