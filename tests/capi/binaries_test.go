package capi

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/testenv"
	"github.com/softrnic/softrnic/internal/topo"
)

// A Debian program, unmodified, at both ends: the server in namespace a,
// the client in b (its last arguments the server's address).
type binaryCase struct {
	name           string
	server, client func(port int) []string // arguments, the program first
	tcp            bool                    // the server listens on a TCP port (perftest's and pingpong's exchange)
	want           *regexp.Regexp          // in the client's output
	xskOnly        bool                    // the udp port cannot run it (multicast)
}

func perftestCase(test string, extra ...string) binaryCase {
	args := func(port int) []string {
		return append([]string{test, "-d", "softrnic_veth0", "-x", "1", "-n", "200", "-p", fmt.Sprint(port)}, extra...)
	}
	want := regexp.MustCompile(`(?m)^\s+\d+\s+200\s+\d`)
	return binaryCase{name: strings.Join(append([]string{test}, extra...), " "), server: args, client: args, tcp: !slices.Contains(extra, "-R"), want: want}
}

func pingpongCase(kind string, extra ...string) binaryCase {
	args := func(port int) []string {
		return append([]string{"ibv_" + kind + "_pingpong", "-d", "softrnic_veth0", "-g", "1", "-n", "100", "-p", fmt.Sprint(port)}, extra...)
	}
	return binaryCase{name: "ibv_" + kind + "_pingpong", server: args, client: args, tcp: true, want: regexp.MustCompile(`100 iters in [\d.]+ seconds`)}
}

func binaryCases() []binaryCase {
	cs := []binaryCase{}
	for _, r := range [][]string{nil, {"-R"}} {
		for _, t := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw", "ib_write_lat", "ib_send_lat", "ib_read_lat"} {
			cs = append(cs, perftestCase(t, r...))
		}
	}
	// Other transports and options a program may use: atomics' latency,
	// UD and UC, a shared receive queue, several QPs, both directions at
	// once, completion events.
	q4 := perftestCase("ib_write_bw", "-q", "4")
	q4.want = regexp.MustCompile(`(?m)^\s+\d+\s+800\s+\d`) // 200 iterations on each QP
	cs = append(cs, perftestCase("ib_atomic_lat"), perftestCase("ib_send_bw", "-c", "UD"), perftestCase("ib_write_bw", "-c", "UC"),
		perftestCase("ib_send_lat", "--use-srq"), q4, perftestCase("ib_send_bw", "-b"),
		perftestCase("ib_send_lat", "-e"), // one channel for both CQs: a QP's completions must reach it in order
		// A UC ping-pong of WRITEs (its sends complete as they leave, and
		// it spins on its buffer) and RC WRITEs of 64 packets (at MTU
		// 1024): each took the NIC thread's lease a half round trip before
		// a poll's linger waited for the whole answer since the last post.
		perftestCase("ib_write_lat", "-c", "UC"), perftestCase("ib_write_lat", "-s", "65536"))
	for _, k := range []string{"rc", "uc", "srq"} {
		cs = append(cs, pingpongCase(k, "-c"))
	}
	cs = append(cs, pingpongCase("ud", "-s", "1024"))
	// GID 0, the link-local IPv6 one: RoCEv2 over IPv6 (the udp port
	// speaks its socket's family only).
	ll := pingpongCase("rc", "-g", "0")
	ll.name, ll.xskOnly = "ibv_rc_pingpong -g 0", true
	cs = append(cs, ll)
	port := func(p int) string { return fmt.Sprint(p) }
	cs = append(cs,
		binaryCase{name: "rping",
			server: func(p int) []string {
				return []string{"rping", "-s", "-v", "-a", "10.47.0.1", "-C", "10", "-p", port(p)}
			},
			client: func(p int) []string { return []string{"rping", "-c", "-v", "-V", "-C", "10", "-p", port(p), "-a"} },
			want:   regexp.MustCompile(`(?s)ping data: rdma-ping-0: .*ping data: rdma-ping-9: `)},
		binaryCase{name: "ucmatose",
			server: func(p int) []string { return []string{"ucmatose", "-p", port(p)} },
			client: func(p int) []string { return []string{"ucmatose", "-p", port(p), "-s"} },
			want:   regexp.MustCompile(`test complete`)},
		binaryCase{name: "ucmatose -c 2 -m", // two connections, the ids migrated to another event channel
			server: func(p int) []string { return []string{"ucmatose", "-c", "2", "-m", "-p", port(p)} },
			client: func(p int) []string { return []string{"ucmatose", "-c", "2", "-m", "-p", port(p), "-s"} },
			want:   regexp.MustCompile(`test complete`)},
		binaryCase{name: "udaddy", // on its own port, 7174 (its -p is the port space)
			server: func(int) []string { return []string{"udaddy"} },
			client: func(int) []string { return []string{"udaddy", "-s"} },
			want:   regexp.MustCompile(`test complete`)},
		binaryCase{name: "rdma_server-rdma_client",
			server: func(p int) []string { return []string{"rdma_server", "-p", port(p)} },
			client: func(p int) []string { return []string{"rdma_client", "-p", port(p), "-s"} },
			want:   regexp.MustCompile(`rdma_client: end 0`)},
		binaryCase{name: "mckey", // UD multicast: the server's QP takes the group's datagrams (the udp port has none)
			server:  func(int) []string { return []string{"mckey", "-m", "239.1.2.3", "-b", "10.47.0.1", "-C", "20"} },
			client:  func(int) []string { return []string{"mckey", "-m", "239.1.2.3", "-b", "10.47.0.2", "-C", "20", "-s"} },
			want:    regexp.MustCompile(`data transfers complete`),
			xskOnly: true},
		binaryCase{name: "rdma_xserver-rdma_xclient -c r", // an inline SEND on a QP that asked for no inline data
			server: func(p int) []string { return []string{"rdma_xserver", "-c", "r", "-p", port(p)} },
			client: func(p int) []string { return []string{"rdma_xclient", "-c", "r", "-p", port(p), "-s"} },
			want:   regexp.MustCompile(`rdma_xclient: end 0`)},
	)
	return cs
}

// TestDebianBinaries runs Debian's own perftest (ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw, ib_write_lat, ib_send_lat, ib_read_lat, with
// and without -R; ib_atomic_lat; UD, UC, an SRQ, four QPs, both
// directions, events), rdma-core's ibv_rc/uc/srq/ud_pingpong and
// librdmacm's rping, ucmatose, udaddy, rdma_server/rdma_client and
// rdma_xserver/rdma_xclient, unmodified, on
// softrnic's libraries at both ends of a veth pair: on the xsk port as
// root, and on the udp port as an unprivileged user (uid 65534). Each run
// passes when both sides exit 0 and the client reports what the program
// reports on success.
func TestDebianBinaries(t *testing.T) {
	root := requireLibs(t)
	testenv.RequireTool(t, "ib_write_bw", "apt-get install perftest")
	testenv.RequireTool(t, "ibv_rc_pingpong", "apt-get install ibverbs-utils")
	testenv.RequireTool(t, "rping", "apt-get install rdmacm-utils")
	setpriv := testenv.RequireTool(t, "setpriv", "apt-get install util-linux")
	tp := topo.Pair(t, 1500, 1)
	port := 19000
	for _, io := range []string{"xsk", "udp"} {
		for _, c := range binaryCases() {
			port++
			t.Run(io+"/"+strings.ReplaceAll(c.name, " ", ""), func(t *testing.T) {
				if c.xskOnly && io != "xsk" {
					t.Skipf("%s needs the xsk port", c.name)
				}
				drop := ""
				if io == "udp" {
					drop = setpriv
				}
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				sargs, cargs := c.server(port), append(c.client(port), "10.47.0.1")
				srv := start(t, ctx, tp.NS("a"), "server", root, io, drop, mustLook(t, sargs[0]), sargs[1:]...)
				if c.tcp {
					waitListen(t, ctx, tp.NS("a"), port)
				} else {
					time.Sleep(1500 * time.Millisecond) // a CM listener opens no TCP port
				}
				cli := start(t, ctx, tp.NS("b"), "client", root, io, drop, mustLook(t, cargs[0]), cargs[1:]...)
				<-cli.done
				select {
				case <-srv.done:
				case <-time.After(30 * time.Second):
					cancel()
					<-srv.done
				}
				if cli.err != nil || srv.err != nil || !c.want.Match(cli.out.Bytes()) {
					t.Errorf("%s on %s: client %v, server %v (want %q in the client's output)\nclient: %s\n%s\nserver: %s\n%s",
						c.name, io, cli.err, srv.err, c.want, strings.Join(cargs, " "), cli.out.String(), strings.Join(sargs, " "), srv.out.String())
				}
			})
		}
	}
}

// TestDevinfo: ibv_devinfo -v on softrnic shows the device, its port
// active with the netdev's IB MTU, and the GID table.
func TestDevinfo(t *testing.T) {
	root := requireLibs(t)
	devinfo := testenv.RequireTool(t, "ibv_devinfo", "apt-get install ibverbs-utils")
	tp := topo.Pair(t, 1500, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := start(t, ctx, tp.NS("a"), "ibv_devinfo", root, "xsk", "", devinfo, "-v")
	<-p.done
	out := p.out.String()
	if p.err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s", p.err, out)
	}
	for _, want := range []string{
		`hca_id:\s+softrnic_veth0`,
		`transport:\s+InfiniBand \(0\)`,
		`state:\s+PORT_ACTIVE \(4\)`,
		`active_mtu:\s+1024 \(3\)`,
		`link_layer:\s+Ethernet`,
		`GID\[\s*0\]:\s+fe80::\S+, RoCE v2`,
		`GID\[\s*1\]:\s+::ffff:10\.47\.0\.1, RoCE v2`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("ibv_devinfo -v shows no %q:\n%s", want, out)
		}
	}
}

func mustLook(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitListen waits until something listens on TCP port in ns.
func waitListen(t *testing.T, ctx context.Context, ns *topo.Namespace, port int) {
	t.Helper()
	for ctx.Err() == nil {
		out, _ := ns.Command(ctx, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		if len(strings.TrimSpace(string(out))) > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on TCP port %d", port)
}
