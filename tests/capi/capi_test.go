package capi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/testenv"
	"github.com/softrnic/softrnic/internal/topo"
)

// nobody is the unprivileged user the udp port's two-host run is made as.
const nobody = "65534"

// repoRoot finds the repository's root: the directory above this one
// whose go.mod is softrnic's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/softrnic/softrnic\n")) {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no softrnic go.mod above the test's directory")
		}
		dir = up
	}
}

// requireLibs stops the test unless the C libraries are built and a C
// program can be compiled against the system's libibverbs headers; it
// returns the repository's root.
func requireLibs(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	for _, lib := range []string{"libibverbs.so.1", "libsoftrnic.so"} {
		if _, err := os.Stat(filepath.Join(root, "lib", lib)); err != nil {
			testenv.Unavailable(t, "lib/%s is not built: run `make libs` first (%v)", lib, err)
		}
	}
	testenv.RequireTool(t, "gcc", "`make libs` installs it, with libibverbs-dev")
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		testenv.Unavailable(t, "rdma-core's headers are not installed (apt-get install libibverbs-dev, or run `make libs`, which installs them): %v", err)
	}
	return root
}

// build compiles c/verbs_test.c as an unmodified libibverbs program is
// built: against the system's <infiniband/verbs.h>, linked with
// -libverbs (the system's libibverbs.so).
func build(t *testing.T, root string) string {
	t.Helper()
	return buildC(t, root, "verbs_test", "-libverbs")
}

// buildC compiles c/NAME.c against the system's rdma-core headers,
// linked with libs (the system's libraries, which LD_LIBRARY_PATH
// replaces with lib/'s at run time). The directory is opened to every
// user, for the unprivileged run.
func buildC(t *testing.T, root, name string, libs ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, name)
	args := []string{"-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-o", bin,
		filepath.Join(root, "tests", "capi", "c", name+".c")}
	cmd := exec.Command("gcc", append(args, libs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compiling %s.c: %v\n%s", name, err, out)
	}
	return bin
}

// proc is one run of a test program (verbs_test, cma_test) in a namespace.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  bytes.Buffer // stdout and stderr together
	err  error
	done chan struct{}
}

// start runs bin with args in ns on the given port. As nobody, the
// process drops root (setpriv) before it starts: the udp port needs no
// privileges.
func start(t *testing.T, ctx context.Context, ns *topo.Namespace, name, root, port, setpriv string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	if setpriv != "" {
		args = append([]string{"--reuid=" + nobody, "--regid=" + nobody, "--clear-groups", bin}, args...)
		bin = setpriv
	}
	p.cmd = ns.Command(ctx, bin, args...)
	p.cmd.Env = append(os.Environ(), "SOFTRNIC_NETDEV=veth0", "SOFTRNIC_PORT="+port, "LD_LIBRARY_PATH="+filepath.Join(root, "lib"))
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.WaitDelay = 5 * time.Second // cancelled: killed by its PID, its pipes given up after this
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

var summaryLine = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed$`)

// problems lists what is wrong with a finished run: its exit status,
// FAIL lines, no summary.
func (p *proc) problems() []string {
	var bad []string
	if p.err != nil {
		bad = append(bad, fmt.Sprintf("%s exited: %v", p.name, p.err))
	}
	sc := bufio.NewScanner(bytes.NewReader(p.out.Bytes()))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "FAIL") {
			bad = append(bad, p.name+": "+sc.Text())
		}
	}
	if m := summaryLine.FindStringSubmatch(p.out.String()); m == nil {
		bad = append(bad, p.name+": no summary line (\"N passed, M failed\")")
	} else if m[1] == "0" || m[2] != "0" {
		bad = append(bad, fmt.Sprintf("%s: %s passed, %s failed", p.name, m[1], m[2]))
	}
	return bad
}

// onPort reports whether the run's device says (in its fw_ver) that it
// has the port asked for: SOFTRNIC_PORT took effect.
func (p *proc) onPort(port string) bool {
	return regexp.MustCompile(`(?m)^# device softrnic_veth0 fw_ver softrnic .*\(` + port + `, `).Match(p.out.Bytes())
}

func (p *proc) report() string {
	return fmt.Sprintf("--- %s (%v):\n%s", p.name, p.err, p.out.String())
}

var ports = []string{"xsk", "udp"}

// TestLocal runs verbs_test's single-process checks in namespace a, on
// each port. Its RC QP's RTR transition is addressed to namespace b's
// address, which answers ARP there.
func TestLocal(t *testing.T) {
	root := requireLibs(t)
	tp := topo.Pair(t, 1500, 1) // skips without root (fails under CI)
	bin := build(t, root)
	for _, port := range ports {
		t.Run(port, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p := start(t, ctx, tp.NS("a"), "verbs_test local", root, port, "", bin, "-r", "10.47.0.2", "local")
			<-p.done
			bad := p.problems()
			if !p.onPort(port) {
				bad = append(bad, p.name+": the device does not say it runs on the "+port+" port")
			}
			if len(bad) > 0 {
				t.Fatalf("%s\n%s", strings.Join(bad, "\n"), p.report())
			}
			t.Logf("%s", p.report())
		})
	}
}

// TestTwoHosts runs verbs_test's server in namespace a and its client in
// namespace b (which connects to 10.47.0.1), on each port: RC, UC and UD
// traffic between two NICs, checked byte for byte on both sides. On the
// udp port both run as an unprivileged user, where setpriv is installed.
func TestTwoHosts(t *testing.T) {
	root := requireLibs(t)
	tp := topo.Pair(t, 1500, 1)
	bin := build(t, root)
	for _, port := range ports {
		t.Run(port, func(t *testing.T) { twoHosts(t, tp, root, port, bin, 2*time.Minute) })
	}
}

// twoHosts runs bin's server in namespace a and its client in namespace
// b (which connects to 10.47.0.1) on the given port, both as nobody on
// the udp port where setpriv is installed, within limit; it fails the
// test on a FAIL line, a missing summary, an exit status that is not 0,
// a device not on the port or a run not made as nobody.
func twoHosts(t *testing.T, tp *topo.Topo, root, port, bin string, limit time.Duration) {
	t.Helper()
	twoHostsModes(t, tp, root, port, bin, limit, "server", "client")
}

// TestExitSendsHeld: verbs_test's exit-server takes a SEND and exits at
// once, its device open: the ACK its NIC held for the program's next
// call leaves as the program exits (the library's destructor), and the
// exit-client's SEND completes in success instead of running out of
// retries against a peer that is gone.
func TestExitSendsHeld(t *testing.T) {
	root := requireLibs(t)
	tp := topo.Pair(t, 1500, 1)
	bin := build(t, root)
	for range 3 {
		twoHostsModes(t, tp, root, "xsk", bin, time.Minute, "exit-server", "exit-client")
	}
}

// twoHostsModes is twoHosts with verbs_test's modes for either side.
func twoHostsModes(t *testing.T, tp *topo.Topo, root, port, bin string, limit time.Duration, serverMode, clientMode string) {
	t.Helper()
	setpriv := ""
	if port == "udp" {
		if path, err := exec.LookPath("setpriv"); err == nil {
			setpriv = path
		} else {
			t.Logf("setpriv is not installed (util-linux): the udp port runs as root, not as uid %s (%v)", nobody, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	server := start(t, ctx, tp.NS("a"), "server", root, port, setpriv, bin, serverMode)
	client := start(t, ctx, tp.NS("b"), "client", root, port, setpriv, bin, clientMode, "10.47.0.1")
	<-client.done
	// The server ends with the client; after a failed client it
	// has a moment, then the context kills it (by its PID).
	grace := 30 * time.Second
	if client.err != nil {
		grace = 3 * time.Second
	}
	select {
	case <-server.done:
	case <-time.After(grace):
		cancel()
		<-server.done
		server.err = fmt.Errorf("still running %v after the client, killed: %v", grace, server.err)
	}
	bad := append(server.problems(), client.problems()...)
	for _, p := range []*proc{server, client} {
		if !p.onPort(port) {
			bad = append(bad, p.name+": the device does not say it runs on the "+port+" port")
		}
	}
	if setpriv != "" {
		for _, p := range []*proc{server, client} {
			if !regexp.MustCompile(`(?m)^# uid ` + nobody + ` euid ` + nobody + `$`).Match(p.out.Bytes()) {
				bad = append(bad, p.name+": did not run as uid "+nobody)
			}
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%s\n%s\n%s", strings.Join(bad, "\n"), server.report(), client.report())
	}
	t.Logf("%s\n%s", server.report(), client.report())
}
