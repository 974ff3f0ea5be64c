// Command softrnic is the soft RDMA NIC's one command.
//
//	softrnic decode FILE...   parse RoCEv2 frames in pcap/pcapng files, check every ICRC
//	softrnic demo             show what softrnic does on this machine
//	softrnic perf TEST [ADDR] perftest's tests as server or client (ib_*_bw, ib_*_lat peer)
//	softrnic bench frames     frame rates of the ports over a veth pair
//	softrnic bench cache      GCCache against the blocking baseline
//	softrnic version          print the version
//
// Each subcommand takes -h for its flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type command struct {
	name    string
	summary string
	run     func(args []string, stdout io.Writer) error
}

var commands = []command{
	{"decode", "parse RoCEv2 frames in pcap/pcapng files and check every ICRC", runDecode},
	{"demo", "show what softrnic does on this machine", runDemo},
	{"perf", "perftest's tests (send-bw … atomic-lat), a peer of the ib_* tools", runPerf},
	{"bench", "benchmarks: bench frames (ports over a veth pair), bench cache (GCCache)", runBench},
	{"version", "print the version", func([]string, io.Writer) error { fmt.Println("softrnic", version); return nil }},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: softrnic <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stdout)
		return
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			err := c.run(os.Args[2:], os.Stdout)
			if errors.Is(err, flag.ErrHelp) {
				return
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "softrnic %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "softrnic: unknown command %q\n\n", os.Args[1])
	usage(os.Stderr)
	os.Exit(2)
}
