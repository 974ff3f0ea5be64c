package porttest

import (
	"testing"
	"time"

	"github.com/softrnic/softrnic/datapath"
)

// SendAll sends copies of frames through any port, waiting while its
// transmit ring is full; the test fails if the port refuses a frame.
func SendAll(tb testing.TB, p datapath.Port, frames [][]byte) {
	tb.Helper()
	bufs := make([]datapath.Frame, len(frames))
	if n := p.Alloc(bufs); n != len(bufs) {
		p.Free(bufs[:n])
		tb.Fatalf("Alloc = %d of %d buffers", n, len(bufs))
	}
	for i, f := range frames {
		bufs[i].Data = bufs[i].Data[:copy(bufs[i].Data, f)]
	}
	deadline := time.Now().Add(5 * time.Second)
	for sent := 0; sent < len(bufs); {
		n, err := p.Send(bufs[sent:])
		sent += n
		if err != nil || n == 0 && time.Now().After(deadline) {
			p.Free(bufs[sent:])
			tb.Fatalf("Send: %d of %d frames sent: %v", sent, len(bufs), err)
		}
		if n == 0 {
			flush(p)
			time.Sleep(time.Millisecond)
		}
	}
}

// Received is a frame copied out of a port's buffer.
type Received struct {
	Data   []byte
	NoICRC bool
}

// ReceiveN receives until want frames have arrived or five seconds pass,
// releasing every buffer, and returns copies of the frames.
func ReceiveN(tb testing.TB, p datapath.Port, want int) []Received {
	tb.Helper()
	var got []Received
	bufs := make([]datapath.Frame, 64)
	for deadline := time.Now().Add(5 * time.Second); len(got) < want && time.Now().Before(deadline); {
		got = receiveOnce(tb, p, bufs, got)
	}
	return got
}

// Drain receives until nothing has arrived for three waits in a row.
func Drain(tb testing.TB, p datapath.Port) []Received {
	tb.Helper()
	var got []Received
	bufs := make([]datapath.Frame, 64)
	for idle := 0; idle < 3; {
		n := len(got)
		if got = receiveOnce(tb, p, bufs, got); len(got) == n {
			idle++
		} else {
			idle = 0
		}
	}
	return got
}

// receiveOnce waits briefly for frames and appends copies of one batch.
func receiveOnce(tb testing.TB, p datapath.Port, bufs []datapath.Frame, got []Received) []Received {
	tb.Helper()
	flush(p)
	p.Wait(10 * time.Millisecond)
	n, err := p.Recv(bufs)
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range bufs[:n] {
		got = append(got, Received{Data: append([]byte{}, f.Data...), NoICRC: f.NoICRC})
	}
	p.Release(bufs[:n])
	return got
}

// flush nudges a port that queues transmissions (the AF_XDP port).
func flush(p datapath.Port) {
	p.Flush()
}
