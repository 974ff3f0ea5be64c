package reliability_test

import (
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath/wire"
	"github.com/softrnic/softrnic/reliability"
)

// The transmit gate answers in one call whether a packet goes and, if
// not, why: each reason by the state that causes it.
func TestSendHolds(t *testing.T) {
	data := reliability.Entry{Kind: reliability.Data}
	for _, tc := range []struct {
		name  string
		alloc int
		p     reliability.Params
		setup func(s *reliability.Sender) time.Time // returns when to ask
		e     reliability.Entry
		want  reliability.Hold
	}{
		{name: "goes", alloc: 8, e: data, want: reliability.Go,
			setup: func(s *reliability.Sender) time.Time { return t0 }},
		{name: "replay full", alloc: 2, p: reliability.Params{NoCongestionControl: true}, e: data, want: reliability.HoldReplayFull,
			setup: func(s *reliability.Sender) time.Time {
				s.Send(data, t0)
				s.Send(data, t0)
				return t0
			}},
		{name: "window", alloc: 64, e: data, want: reliability.HoldWindow,
			setup: func(s *reliability.Sender) time.Time {
				for s.Send(data, t0).Hold == reliability.Go {
				}
				return t0
			}},
		{name: "rd_atomic limit", alloc: 64, p: reliability.Params{MaxRdAtomic: 1}, e: reliability.Entry{Kind: reliability.Read, Span: 1}, want: reliability.HoldRdAtomic,
			setup: func(s *reliability.Sender) time.Time {
				s.Send(reliability.Entry{Kind: reliability.Read, Span: 1}, t0)
				return t0
			}},
		{name: "RNR wait", alloc: 64, p: reliability.Params{RNRRetry: 7}, e: data, want: reliability.HoldRNR,
			setup: func(s *reliability.Sender) time.Time {
				g := s.Send(data, t0)
				s.OnAETH(g.PSN, wire.RNRNAKSyndrome(14), t0)
				return t0
			}},
		{name: "resend first", alloc: 64, p: reliability.Params{RetryCnt: 7}, e: data, want: reliability.HoldResend,
			setup: func(s *reliability.Sender) time.Time {
				g := s.Send(data, t0)
				s.Send(data, t0)
				s.OnAETH(g.PSN, wire.NAKSyndrome(wire.NAKPSNSequenceError), t0)
				return t0
			}},
		{name: "credits", alloc: 64, e: reliability.Entry{Kind: reliability.Data, Consumes: true}, want: reliability.HoldCredits,
			setup: func(s *reliability.Sender) time.Time {
				g := s.Send(reliability.Entry{Kind: reliability.Data, Consumes: true, AckReq: true}, t0)
				s.OnAETH(g.PSN.Sub(1), wire.ACKSyndrome(wire.CreditCode(0)), t0) // no receive WQE left after the one before
				return t0
			}},
		{name: "failed", alloc: 64, e: data, want: reliability.HoldFailed,
			setup: func(s *reliability.Sender) time.Time {
				g := s.Send(data, t0)
				s.OnAETH(g.PSN, wire.NAKSyndrome(wire.NAKRemoteAccessError), t0)
				return t0
			}},
		{name: "pacing", alloc: 64, e: data, want: reliability.HoldPacing,
			setup: func(s *reliability.Sender) time.Time {
				now := t0
				for range 20 { // round trips of 100 us, one packet each: the window opens, pacing starts
					g := s.Send(data, now)
					now = now.Add(100 * time.Microsecond)
					s.OnAETH(g.PSN, wire.ACKSyndrome(wire.CreditsInvalid), now)
				}
				for s.Send(data, now).Hold == reliability.Go { // a burst, then pacing holds the rest
				}
				return now
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSender(t, tc.alloc, tc.p)
			now := tc.setup(s)
			g := s.Send(tc.e, now)
			if g.Hold != tc.want {
				t.Fatalf("Send: %v, want %v", g.Hold, tc.want)
			}
			if tc.want == reliability.HoldPacing && (!g.Until.After(now) || !g.Again.After(now) || g.Again.After(g.Until)) {
				t.Errorf("held for pacing until %v, to ask again at %v: want both after now, again no later", g.Until, g.Again)
			}
			if tc.want == reliability.Go && (g.PSN != 100 || s.Outstanding() != 1) {
				t.Errorf("went with PSN %d (want 100), %d outstanding", g.PSN, s.Outstanding())
			}
			if tc.want != reliability.Go && s.CanSend(tc.e.Kind, now) == (tc.want != reliability.HoldCredits) {
				t.Errorf("CanSend disagrees with Send's %v", g.Hold)
			}
		})
	}
}
