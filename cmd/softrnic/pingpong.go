package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/host/pingpong"
)

const pingpongText = `programs: rc uc ud srq

A peer of rdma-core's example programs ibv_rc_pingpong, ibv_uc_pingpong,
ibv_ud_pingpong and ibv_srq_pingpong: the same options, the same exchange
over TCP and the same report. Without a host it is the server and waits
for a client; with one it is the client. Run the C programs with -g (the
GID index of the peer's RoCEv2 IPv4 GID): RoCE needs a GID to route by.
`

// runPingpong is `softrnic pingpong rc|uc|ud|srq [host]`.
func runPingpong(args []string, stdout io.Writer) error {
	fs := newFlagSet("pingpong", "pingpong rc|uc|ud|srq [flags] [host]", pingpongText)
	var cfg pingpong.Config
	var o nicOptions
	port := 18515
	both := func(p any, short, long string, usage string) {
		switch v := p.(type) {
		case *int:
			fs.IntVar(v, short, *v, usage)
			fs.IntVar(v, long, *v, "same as -"+short)
		case *bool:
			fs.BoolVar(v, short, *v, usage)
			fs.BoolVar(v, long, *v, "same as -"+short)
		case *string:
			fs.StringVar(v, short, *v, usage)
			fs.StringVar(v, long, *v, "same as -"+short)
		}
	}
	ibPort, sl := 1, 0
	var odp, ts bool
	parsePoll := addNICFlags(fs, &o, "app")
	both(&port, "p", "port", "listen on or connect to this TCP port")
	both(&o.dev, "d", "ib-dev", "network device to run on (required; the C programs take the RDMA device)")
	both(&ibPort, "i", "ib-port", "port of the device (softrnic's devices have one: 1)")
	both(&cfg.Size, "s", "size", "size of message to exchange (default 4096; ud 2048)")
	both(&cfg.MTU, "m", "mtu", "path MTU (default 1024; not ud)")
	both(&cfg.RxDepth, "r", "rx-depth", "number of receives to post at a time (default 500)")
	both(&cfg.Iters, "n", "iters", "number of exchanges (default 1000; srq: over all QPs)")
	both(&sl, "l", "sl", "service level (accepted; RoCEv2 frames carry none)")
	both(&cfg.Events, "e", "events", "sleep on CQ events instead of polling")
	both(&o.gidIndex, "g", "gid-idx", "local GID index (default: the first IPv4 GID)")
	both(&cfg.NumQP, "q", "num-qp", "number of QPs (srq; default 16)")
	both(&cfg.Check, "c", "chk", "validate received buffer (rc, uc, srq)")
	both(&odp, "o", "odp", "on-demand paging (not supported)")
	both(&ts, "t", "ts", "completion timestamps (not supported)")
	usage := flagUsage(fs)

	var words []string
	for rest := args; ; {
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		words, rest = append(words, fs.Arg(0)), fs.Args()[1:]
	}
	if len(words) == 0 {
		return badUsage(usage, "name the program: rc, uc, ud or srq")
	}
	kind, err := pingpong.ParseKind(words[0])
	if err != nil {
		return badUsage(usage, "%q: want rc, uc, ud or srq", words[0])
	}
	cfg.Kind = kind
	host := ""
	switch len(words) {
	case 1:
	case 2:
		host = words[1]
	default:
		return badUsage(usage, "more than one host: %q and %q", words[1], words[2])
	}
	if o.dev == "" {
		return badUsage(usage, "-d: name the network device (the C programs' -d takes the RDMA device; softrnic runs on the netdev)")
	}
	switch {
	case port < 1 || port > 65535:
		return badValue("-p %d: a TCP port is 1 to 65535", port)
	case ibPort != 1:
		return badValue("-i %d: softrnic's device has one port, 1", ibPort)
	case odp:
		return badValue("-o: on-demand paging is not supported by softrnic")
	case ts:
		return badValue("-t: completion timestamps are not supported by softrnic")
	case flagGiven(fs, "s") && cfg.Size < 1:
		return badValue("-s %d: a message is at least 1 byte", cfg.Size)
	}
	if _, err := cfg.WithDefaults(); err != nil {
		return badValue("%v", err)
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
	if full, err := cfg.WithDefaults(); err == nil {
		if err := full.Fits(e.dev); err != nil {
			return err // before waiting for a client
		}
	}
	var conn net.Conn
	if host == "" {
		ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("couldn't listen to port %d: %w", port, err)
		}
		stopAccept := context.AfterFunc(ctx, func() { ln.Close() })
		conn, err = ln.Accept()
		stopAccept()
		ln.Close()
		if err != nil {
			return errors.Join(ctx.Err(), err)
		}
	} else {
		d := net.Dialer{Timeout: 10 * time.Second}
		if conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
			return fmt.Errorf("couldn't connect to %s:%d: %w", host, port, err)
		}
	}
	defer conn.Close()
	env := pingpong.Env{Dev: e.dev, GID: e.ip, Resolve: e.resolve}
	_, err = pingpong.Run(ctx, env, conn, host == "", cfg, stdout)
	return err
}
