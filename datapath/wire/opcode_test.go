package wire_test

import (
	"testing"

	"github.com/softrnic/softrnic/datapath/wire"
)

// TestOpcodeTable checks every row of the opcode table against the
// InfiniBand specification's opcode list as WIRE.md gives it.
func TestOpcodeTable(t *testing.T) {
	const (
		req, resp = wire.OpRequest, wire.OpResponse
		pay       = wire.OpPayload
	)
	tests := []struct {
		op      wire.Opcode
		name    string
		headers wire.Header
		flags   wire.OpFlags
		hdrLen  int
	}{
		{0x00, "RC_SEND_FIRST", 0, req | wire.OpSend | wire.OpFirst | pay, 12},
		{0x01, "RC_SEND_MIDDLE", 0, req | wire.OpSend | wire.OpMiddle | pay, 12},
		{0x02, "RC_SEND_LAST", 0, req | wire.OpSend | wire.OpLast | pay, 12},
		{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", wire.HdrImmDt, req | wire.OpSend | wire.OpLast | pay | wire.OpImm, 16},
		{0x04, "RC_SEND_ONLY", 0, req | wire.OpSend | wire.OpOnly | pay, 12},
		{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", wire.HdrImmDt, req | wire.OpSend | wire.OpOnly | pay | wire.OpImm, 16},
		{0x06, "RC_RDMA_WRITE_FIRST", wire.HdrRETH, req | wire.OpWrite | wire.OpFirst | pay, 28},
		{0x07, "RC_RDMA_WRITE_MIDDLE", 0, req | wire.OpWrite | wire.OpMiddle | pay, 12},
		{0x08, "RC_RDMA_WRITE_LAST", 0, req | wire.OpWrite | wire.OpLast | pay, 12},
		{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", wire.HdrImmDt, req | wire.OpWrite | wire.OpLast | pay | wire.OpImm, 16},
		{0x0a, "RC_RDMA_WRITE_ONLY", wire.HdrRETH, req | wire.OpWrite | wire.OpOnly | pay, 28},
		{0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", wire.HdrRETH | wire.HdrImmDt, req | wire.OpWrite | wire.OpOnly | pay | wire.OpImm, 32},
		{0x0c, "RC_RDMA_READ_REQUEST", wire.HdrRETH, req | wire.OpRead | wire.OpOnly, 28},
		{0x0d, "RC_RDMA_READ_RESPONSE_FIRST", wire.HdrAETH, resp | wire.OpRead | wire.OpFirst | pay, 16},
		{0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", 0, resp | wire.OpRead | wire.OpMiddle | pay, 12},
		{0x0f, "RC_RDMA_READ_RESPONSE_LAST", wire.HdrAETH, resp | wire.OpRead | wire.OpLast | pay, 16},
		{0x10, "RC_RDMA_READ_RESPONSE_ONLY", wire.HdrAETH, resp | wire.OpRead | wire.OpOnly | pay, 16},
		{0x11, "RC_ACKNOWLEDGE", wire.HdrAETH, resp | wire.OpAck | wire.OpOnly, 16},
		{0x12, "RC_ATOMIC_ACKNOWLEDGE", wire.HdrAETH | wire.HdrAtomicAckETH, resp | wire.OpAtomic | wire.OpOnly, 24},
		{0x13, "RC_COMPARE_SWAP", wire.HdrAtomicETH, req | wire.OpAtomic | wire.OpOnly, 40},
		{0x14, "RC_FETCH_ADD", wire.HdrAtomicETH, req | wire.OpAtomic | wire.OpOnly, 40},
		{0x16, "RC_SEND_LAST_WITH_INVALIDATE", wire.HdrIETH, req | wire.OpSend | wire.OpLast | pay | wire.OpInvalidate, 16},
		{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", wire.HdrIETH, req | wire.OpSend | wire.OpOnly | pay | wire.OpInvalidate, 16},
		{0x20, "UC_SEND_FIRST", 0, req | wire.OpSend | wire.OpFirst | pay, 12},
		{0x23, "UC_SEND_LAST_WITH_IMMEDIATE", wire.HdrImmDt, req | wire.OpSend | wire.OpLast | pay | wire.OpImm, 16},
		{0x24, "UC_SEND_ONLY", 0, req | wire.OpSend | wire.OpOnly | pay, 12},
		{0x26, "UC_RDMA_WRITE_FIRST", wire.HdrRETH, req | wire.OpWrite | wire.OpFirst | pay, 28},
		{0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", wire.HdrRETH | wire.HdrImmDt, req | wire.OpWrite | wire.OpOnly | pay | wire.OpImm, 32},
		{0x64, "UD_SEND_ONLY", wire.HdrDETH, req | wire.OpSend | wire.OpOnly | pay, 20},
		{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", wire.HdrDETH | wire.HdrImmDt, req | wire.OpSend | wire.OpOnly | pay | wire.OpImm, 24},
		{0x81, "CNP", wire.HdrCNP, 0, 28},
	}
	for _, tt := range tests {
		i := tt.op.Info()
		if !i.Valid || i.Name != tt.name || i.Headers != tt.headers || i.Flags != tt.flags || i.HeaderLen != tt.hdrLen {
			t.Errorf("%#02x: got %+v, want %s %v %#x len %d", uint8(tt.op), *i, tt.name, tt.headers, tt.flags, tt.hdrLen)
		}
		if tt.op.String() != tt.name {
			t.Errorf("%#02x: String() = %q", uint8(tt.op), tt.op.String())
		}
	}
	// Offsets: extension headers follow the BTH in wire order.
	offsets := []struct {
		op   wire.Opcode
		h    wire.Header
		want int
	}{
		{wire.RCRDMAWriteOnlyWithImmediate, wire.HdrRETH, 12},
		{wire.RCRDMAWriteOnlyWithImmediate, wire.HdrImmDt, 28},
		{wire.RCAtomicAcknowledge, wire.HdrAETH, 12},
		{wire.RCAtomicAcknowledge, wire.HdrAtomicAckETH, 16},
		{wire.UDSendOnlyWithImmediate, wire.HdrDETH, 12},
		{wire.UDSendOnlyWithImmediate, wire.HdrImmDt, 20},
		{wire.RCSendOnly, wire.HdrRETH, -1},
	}
	for _, o := range offsets {
		if got := o.op.Info().Offset(o.h); got != o.want {
			t.Errorf("%v %v offset %d, want %d", o.op, o.h, got, o.want)
		}
	}
}

// TestOpcodeCounts checks which opcodes exist per transport: RC 23, UC 12
// (SEND and RDMA WRITE only), UD 2, CNP 1, RD none.
func TestOpcodeCounts(t *testing.T) {
	count := map[wire.Transport]int{}
	for i := range 256 {
		op := wire.Opcode(i)
		if !op.Valid() {
			if op.Info().Name != "" || op.String()[:9] != "OPCODE_0x" {
				t.Errorf("invalid opcode %#02x has name %q / %q", i, op.Info().Name, op.String())
			}
			continue
		}
		if op.Transport() != op.Info().Transport {
			t.Errorf("%v: transport %v vs %v", op, op.Transport(), op.Info().Transport)
		}
		count[op.Transport()]++
		f := op.Info().Flags
		if f&wire.OpRequest != 0 && f&wire.OpResponse != 0 {
			t.Errorf("%v is both request and response", op)
		}
		pos := 0
		for _, p := range []wire.OpFlags{wire.OpFirst, wire.OpMiddle, wire.OpLast, wire.OpOnly} {
			if f&p != 0 {
				pos++
			}
		}
		if op != wire.CNP && pos != 1 {
			t.Errorf("%v has %d packet positions", op, pos)
		}
	}
	want := map[wire.Transport]int{wire.TransportRC: 23, wire.TransportUC: 12, wire.TransportUD: 2, wire.TransportCNP: 1}
	for tr, n := range want {
		if count[tr] != n {
			t.Errorf("%v: %d opcodes, want %d", tr, count[tr], n)
		}
	}
	if count[wire.TransportRD] != 0 {
		t.Errorf("RD opcodes in the table")
	}
}

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s             wire.Syndrome
		ack, rnr, nak bool
		value         uint8
	}{
		{0x1f, true, false, false, 0x1f}, // ACK, no credit information
		{wire.ACKSyndrome(12), true, false, false, 12},
		{0x2c, false, true, false, 12}, // rxe's RNR NAK, timer 12 (seen in rnr_send_bw_s64)
		{wire.RNRNAKSyndrome(12), false, true, false, 12},
		{0x60, false, false, true, wire.NAKPSNSequenceError},
		{wire.NAKSyndrome(wire.NAKRemoteAccessError), false, false, true, 2},
		{0x63, false, false, true, wire.NAKRemoteOperationalErr},
	}
	for _, tt := range tests {
		if tt.s.IsACK() != tt.ack || tt.s.IsRNRNAK() != tt.rnr || tt.s.IsNAK() != tt.nak || tt.s.Value() != tt.value {
			t.Errorf("%#02x: ack %v rnr %v nak %v value %d", uint8(tt.s), tt.s.IsACK(), tt.s.IsRNRNAK(), tt.s.IsNAK(), tt.s.Value())
		}
	}
	if wire.Syndrome(0x40).IsACK() || wire.Syndrome(0x40).IsNAK() || wire.Syndrome(0x40).IsRNRNAK() {
		t.Error("reserved syndrome kind 0x40 taken for a known kind")
	}
}

func TestCreditsAndRNRTimer(t *testing.T) {
	credits := []struct {
		code uint8
		n    uint32
	}{{0, 0}, {1, 1}, {4, 4}, {5, 6}, {12, 64}, {20, 1024}, {30, 32768}}
	for _, c := range credits {
		if n, ok := wire.Credits(c.code); !ok || n != c.n {
			t.Errorf("Credits(%d) = %d, %v; want %d", c.code, n, ok, c.n)
		}
		if code := wire.CreditCode(c.n); code != c.code {
			t.Errorf("CreditCode(%d) = %d, want %d", c.n, code, c.code)
		}
	}
	if _, ok := wire.Credits(wire.CreditsInvalid); ok {
		t.Error("credit code 0x1f is not a count")
	}
	if code := wire.CreditCode(100); code != 13 { // 96 ≤ 100 < 128
		t.Errorf("CreditCode(100) = %d, want 13", code)
	}
	if code := wire.CreditCode(1 << 20); code != 30 {
		t.Errorf("CreditCode(1<<20) = %d, want 30", code)
	}
	timers := []struct {
		code uint8
		us   uint32
	}{{0, 655360}, {1, 10}, {12, 640}, {14, 1280}, {31, 491520}}
	for _, tm := range timers {
		if got := wire.RNRTimerMicros(tm.code); got != tm.us {
			t.Errorf("RNRTimerMicros(%d) = %d, want %d", tm.code, got, tm.us)
		}
	}
}
