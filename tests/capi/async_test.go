package capi

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/topo"
)

// TestAsyncEvents: ibv_get_async_event reports the port going down
// (IBV_EVENT_PORT_ERR) and up again (IBV_EVENT_PORT_ACTIVE) as the netdev
// does, on each port: verbs_test async waits on the async fd with poll
// while the test takes veth0 down and up.
func TestAsyncEvents(t *testing.T) {
	root := requireLibs(t)
	tp := topo.Pair(t, 1500, 1)
	bin := build(t, root)
	for _, port := range ports {
		t.Run(port, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := tp.NS("a").Command(ctx, bin, "async")
			cmd.Env = append(os.Environ(), "SOFTRNIC_NETDEV=veth0", "SOFTRNIC_PORT="+port, "LD_LIBRARY_PATH="+filepath.Join(root, "lib"))
			cmd.Stderr = os.Stderr
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var lines []string
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines = append(lines, sc.Text())
				if sc.Text() == "# ready" {
					break
				}
			}
			for _, state := range []string{"down", "up"} {
				time.Sleep(300 * time.Millisecond)
				if b, err := tp.NS("a").Command(ctx, "ip", "link", "set", "veth0", state).CombinedOutput(); err != nil {
					t.Fatalf("ip link set veth0 %s: %v: %s", state, err, b)
				}
			}
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			err = cmd.Wait()
			text := strings.Join(lines, "\n")
			if err != nil || strings.Contains(text, "\nFAIL") || !strings.Contains(text, "ok async_port_err") || !strings.Contains(text, "ok async_port_active") {
				t.Fatalf("verbs_test async: %v\n%s", err, text)
			}
		})
	}
}
