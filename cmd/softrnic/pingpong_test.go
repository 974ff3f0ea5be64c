package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/topo"
)

// TestPingpongCommand runs `softrnic pingpong` server and client in two
// namespaces joined by a veth pair (root only), for each program: both
// print the C programs' report.
func TestPingpongCommand(t *testing.T) {
	tp := topo.New(t, topo.PairSpec(1500, 1))
	for _, args := range [][]string{
		{"rc", "-d", "veth0", "-n", "200", "-c"},
		{"uc", "-d", "veth0", "--iters", "200", "--size", "3000", "-p", "18600"},
		{"ud", "-d", "veth0", "-n", "200", "-s", "1024", "--io", "udp"},
		{"srq", "-d", "veth0", "-n", "200", "-q", "4", "-c", "-e"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var sout, cout bytes.Buffer
			serr := make(chan error, 1)
			go func() {
				serr <- tp.NS("a").Do(func() error { return runPingpong(args, &sout) })
			}()
			var err error
			for try := 0; try < 50; try++ { // until the server listens
				cout.Reset()
				err = tp.NS("b").Do(func() error { return runPingpong(append(append([]string{}, args...), "10.47.0.1"), &cout) })
				if err == nil || !strings.Contains(err.Error(), "couldn't connect") {
					break
				}
			}
			if err != nil {
				t.Fatalf("client: %v\n%s", err, cout.String())
			}
			if err := <-serr; err != nil {
				t.Fatalf("server: %v\n%s", err, sout.String())
			}
			for side, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
				for _, want := range []string{"  local address:  LID 0x0000, QPN 0x", "  remote address: LID 0x0000, QPN 0x", "200 iters in "} {
					if !strings.Contains(out, want) {
						t.Errorf("%s lacks %q:\n%s", side, want, out)
					}
				}
			}
		})
	}
}

// TestPingpongUsage: mistakes on the command line are named, with exit
// status 2.
func TestPingpongUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "name the program"},
		{[]string{"xrc", "-d", "lo"}, `"xrc": want rc, uc, ud or srq`},
		{[]string{"rc"}, "-d: name the network device"},
		{[]string{"rc", "-d", "lo", "-s", "0"}, "-s 0"},
		{[]string{"rc", "-d", "lo", "-m", "1500"}, "-m 1500"},
		{[]string{"rc", "-d", "lo", "-i", "2"}, "one port"},
		{[]string{"rc", "-d", "lo", "-o"}, "on-demand paging"},
		{[]string{"ud", "-d", "lo", "-c"}, "no buffer check"},
		{[]string{"srq", "-d", "lo", "-q", "8", "-r", "4"}, "too small for 8 QPs"},
		{[]string{"rc", "-d", "lo", "a", "b"}, "more than one host"},
		{[]string{"rc", "-d", "lo", "-poll", "busy"}, "-poll"},
	} {
		var out bytes.Buffer
		err := runPingpong(tc.args, &out)
		var ue *usageError
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		} else if !errors.As(err, &ue) {
			t.Errorf("%q: %v is not a usage error (exit 2)", tc.args, err)
		}
	}
}

// TestPingpongUDTooLarge: a UD server asked for a message larger than the
// port's MTU says so at once, before it waits for a client.
func TestPingpongUDTooLarge(t *testing.T) {
	tp := topo.New(t, topo.PairSpec(1500, 1))
	done := make(chan error, 1)
	go func() {
		done <- tp.NS("a").Do(func() error {
			return runPingpong([]string{"ud", "-d", "veth0", "-s", "4096", "-p", "18611"}, &bytes.Buffer{})
		})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "requested size larger than port MTU (1024)") {
			t.Errorf("err %v, want the MTU refused", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server waits for a client before checking the size")
	}
}
