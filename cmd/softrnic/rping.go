package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/host/cm"
	"github.com/softrnic/softrnic/host/rping"
	"github.com/softrnic/softrnic/host/verbs"
)

const rpingText = `A peer of librdmacm's rping: -s waits for a client's connection (through
the connection manager, rdma_cm's TCP port space) and answers its pings;
-c connects to -a ADDR and pings. Each ping: the client advertises its
buffer, the server READs it and says go ahead, the client advertises a
second one, the server WRITEs the data back and says go ahead.
`

// runRping is `softrnic rping -s|-c`.
func runRping(args []string, stdout io.Writer) error {
	fs := newFlagSet("rping", "rping -s|-c --dev NETDEV [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V]", rpingText)
	server := fs.Bool("s", false, "server side")
	client := fs.Bool("c", false, "client side")
	addr := fs.String("a", "", "address: the client's server (required with -c); the server's to listen on (default its netdev's)")
	port := fs.Int("p", rping.Port, "port")
	count := fs.Int("C", 0, "ping count (0: for ever; a server answers until the client disconnects)")
	size := fs.Int("S", rping.DefaultSize, fmt.Sprintf("ping data size (%d to %d)", rping.MinSize, rping.MaxSize))
	// rping's -v prints the ping data and -d its debug messages: here -v
	// is rping's, and -d turns on the log's debug level (every other
	// command's -v).
	verbose := new(bool)
	v := fs.Lookup("v")
	v.Value, v.Usage = (*boolFlag)(verbose), "display ping data to stdout"
	validate := fs.Bool("V", false, "validate ping data")
	fs.BoolFunc("d", "log debug messages on stderr", verboseFlag)
	var o nicOptions
	fs.StringVar(&o.dev, "dev", "", "network device to run on (required; rping finds it from the address)")
	parsePoll := addNICFlags(fs, &o, "sleep")
	usage := flagUsage(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	switch {
	case *server == *client:
		return badUsage(usage, "one of -s (server) and -c (client)")
	case o.dev == "":
		return badUsage(usage, "--dev: name the network device")
	case *client && *addr == "":
		return badUsage(usage, "-c needs -a, the server's address")
	case *port < 1 || *port > 65535:
		return badValue("-p %d: a port is 1 to 65535", *port)
	case *size < rping.MinSize || *size > rping.MaxSize:
		return badValue("Invalid size %d (valid range is %d to %d)", *size, rping.MinSize, rping.MaxSize)
	case *count < 0:
		return badValue("Invalid count %d", *count)
	}
	var peer netip.Addr
	if *addr != "" {
		var err error
		if peer, err = netip.ParseAddr(*addr); err != nil {
			return badValue("-a %q: an IP address", *addr)
		}
	}
	if err := parsePoll(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, closeNIC, err := openNIC(o)
	if err != nil {
		return err
	}
	defer closeNIC()
	if *server && peer.IsValid() && !slices.Contains(e.nd.Addrs(), peer.Unmap()) {
		return fmt.Errorf("-a %v: %s's addresses are %v", peer, e.nd.Name, e.nd.Addrs())
	}
	agent, err := cm.NewAgent(e.dev, e.ip, cm.Config{Resolve: e.resolve})
	if err != nil {
		return err
	}
	defer agent.Close()
	pd, err := e.dev.AllocPD()
	if err != nil {
		return err
	}
	cq, err := e.dev.CreateCQ(64)
	if err != nil {
		return err
	}
	ep := &rping.Endpoint{CQ: cq, Buf: make([]byte, rping.BufSize(*size))}
	if ep.MR, err = pd.RegMR(ep.Buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite); err != nil {
		return err
	}
	qc := rping.QPConfig(pd, cq)
	qc.Prepare = func(qp *verbs.QP) error {
		ep.QP = qp
		return ep.PostRecv()
	}
	cfg := rping.Config{Count: *count, Size: *size, Verbose: *verbose, Validate: *validate}
	if *server {
		listen := fmt.Sprintf(":%d", *port)
		if peer.IsValid() {
			listen = netip.AddrPortFrom(peer.Unmap(), uint16(*port)).String()
		}
		l, err := agent.Listen(listen, qc)
		if err != nil {
			return err
		}
		defer l.Close()
		c, err := l.Accept(ctx)
		if err != nil {
			return err
		}
		err = rping.Server(ctx, c, ep, cfg, stdout)
		c.Close()
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := agent.Dial(dctx, netip.AddrPortFrom(peer, uint16(*port)).String(), qc)
	cancel()
	if err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	err = rping.Client(ctx, c, ep, cfg, stdout)
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return err
}

// boolFlag is a boolean flag.Value over a bool.
type boolFlag bool

func (b *boolFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	*b = boolFlag(v)
	return err
}
func (b *boolFlag) String() string   { return strconv.FormatBool(bool(*b)) }
func (b *boolFlag) IsBoolFlag() bool { return true }
