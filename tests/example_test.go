package tests

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/testenv"
	"github.com/softrnic/softrnic/internal/topo"
)

// TestExampleRDMAWrite runs the tutorial program examples/rdmawrite as
// two processes, a user program's way: the server in namespace a, the
// client in namespace b, across a veth pair, each with its own softrnic
// NIC, connected through Endpoints exchanged over TCP. Both must exit 0,
// and both must report the same verified SHA-256 of the bytes the
// client's RDMA WRITE left in the server's memory. Over the AF_XDP port
// and over the kernel UDP port.
func TestExampleRDMAWrite(t *testing.T) {
	tp := topo.Pair(t, 1500, 1) // skips without root (fails under CI)
	bin := buildExample(t, "rdmawrite")
	const size = 1 << 20
	for i, port := range []string{"xsk", "udp"} {
		t.Run(port, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			addr := "10.47.0.1:" + strconv.Itoa(18515+i)
			common := []string{"-dev", "veth0", "-io", port, "-size", strconv.Itoa(size), "-timeout", "60s"}

			server := tp.NS("a").Command(ctx, bin, append(common, "-listen", addr)...)
			var sout, serr bytes.Buffer
			server.Stdout, server.Stderr = &sout, &serr
			server.WaitDelay = 5 * time.Second // cancelled: killed by PID, and its pipes given up after this
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			serverDone := make(chan error, 1)
			go func() { serverDone <- server.Wait() }()

			client := tp.NS("b").Command(ctx, bin, append(common, "-connect", addr)...)
			var cout, cerr bytes.Buffer
			client.Stdout, client.Stderr = &cout, &cerr
			client.WaitDelay = 5 * time.Second
			clientErr := client.Run()
			// The server ends when the client hangs up; after a failed
			// client it may wait on: it has a moment, then is killed (by
			// its PID, the context's cancellation).
			grace := 30 * time.Second
			if clientErr != nil {
				grace = 2 * time.Second
			}
			var serverErr error
			select {
			case serverErr = <-serverDone:
			case <-time.After(grace):
				cancel()
				serverErr = fmt.Errorf("still running after the client, killed: %v", <-serverDone)
			}
			report := fmt.Sprintf("server (%v):\n%s%s\nclient (%v):\n%s%s", serverErr, serr.String(), sout.String(), clientErr, cerr.String(), cout.String())
			if serverErr != nil || clientErr != nil {
				t.Fatalf("the example failed\n%s", report)
			}
			sm := regexp.MustCompile(`(?m)^server: verified (\d+) bytes written by the client, sha256 ([0-9a-f]{64})$`).FindStringSubmatch(sout.String())
			cm := regexp.MustCompile(`(?m)^client: the server verified (\d+) bytes, sha256 ([0-9a-f]{64})$`).FindStringSubmatch(cout.String())
			if sm == nil || cm == nil {
				t.Fatalf("no verification reported\n%s", report)
			}
			if sm[1] != strconv.Itoa(size) || cm[1] != sm[1] || cm[2] != sm[2] {
				t.Fatalf("server verified %s bytes (%s), client says %s (%s), want %d\n%s", sm[1], sm[2], cm[1], cm[2], size, report)
			}
			if port == "xsk" {
				testenv.CheckREADME(t, "../README.md", "The client's side of one run:", cerr.String()+cout.String())
			}
			t.Logf("%s", report)
		})
	}
}

// buildExample builds examples/<name> into a temporary folder.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "../examples/"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
