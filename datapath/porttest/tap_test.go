package porttest_test

import (
	"bytes"
	"testing"

	"github.com/softrnic/softrnic/datapath/porttest"
)

// TestTap: injected frames are received before the link's, in order, the
// watcher sees every frame received and sent, a full tap drops and counts,
// and every buffer of the tap and the port comes back.
func TestTap(t *testing.T) {
	a, b := porttest.NewPair(porttest.Config{Buffers: 64})
	defer a.Close()
	defer b.Close()
	var seenRx, seenTx [][]byte
	tap := porttest.NewTap(b, 4, func(f []byte, rx bool) {
		if rx {
			seenRx = append(seenRx, append([]byte(nil), f...))
		} else {
			seenTx = append(seenTx, append([]byte(nil), f...))
		}
	})
	fs := frames(10)
	sendFrames(t, a, fs[:3])
	for _, f := range fs[3:8] {
		tap.Inject(f)
	}
	if in, drop := tap.Injected(); in != 4 || drop != 1 {
		t.Fatalf("injected %d dropped %d, want 4 and 1 (the tap holds 4)", in, drop)
	}
	got := drain(t, tap)
	want := append(append([][]byte{}, fs[3:7]...), fs[:3]...)
	if len(got) != len(want) {
		t.Fatalf("received %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("frame %d differs", i)
		}
	}
	if len(seenRx) != 3 {
		t.Errorf("watched %d frames from the link, want 3 (not the injected ones)", len(seenRx))
	}
	sendFrames(t, tap, fs[8:])
	if len(seenTx) != 2 || !bytes.Equal(seenTx[0], fs[8]) {
		t.Errorf("watched %d frames sent, want 2", len(seenTx))
	}
	drain(t, a)
	for range 4 { // every tap buffer came back
		if !tap.Inject(fs[0]) {
			t.Fatal("a tap buffer was not released")
		}
	}
	drain(t, tap)
	if err := porttest.CheckNoLeaks(a, b); err != nil {
		t.Error(err)
	}
}
