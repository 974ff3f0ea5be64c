// Command softrnic is the soft RDMA NIC's one command.
//
//	softrnic decode FILE...    parse RoCEv2 frames in pcap/pcapng files, check every ICRC
//	softrnic demo              every RC operation between two softrnic NICs over a veth pair
//	softrnic perf TEST [ADDR]  perftest's tests as server or client (ib_*_bw, ib_*_lat peer)
//	softrnic pingpong rc|uc|ud|srq [HOST]  a peer of rdma-core's ibv_*_pingpong programs
//	softrnic rping -s|-c --dev NETDEV  a peer of librdmacm's rping
//	softrnic devinfo NETDEV    the device on a netdev as ibv_devinfo -v and show_gids show it
//	softrnic stat ADDR         a running softrnic's counters from its --metrics endpoint
//	softrnic bench NAME        a benchmark: frames, cache, write, replay, loss, shallow,
//	                           isolation, hol, scale, hpu (softrnic bench -h says what each measures)
//	softrnic version           print the version
//	softrnic help [COMMAND]    the usage, or a command's usage and flags
//
// Each command takes -h for its usage and flags, printed on stdout. The
// exit status is 0 on success and for help, 1 when a command fails, and 2
// for a mistake on the command line (a missing command or argument, an
// unknown flag or a bad value), with the error and the usage on stderr, as
// Go's own tools do.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/softrnic/softrnic/datapath"
)

// version, if set at build time with -ldflags "-X main.version=…",
// is what softrnic version prints first; else the module's version from
// the build info ("(devel)" for a build from a checkout).
var version = ""

// versionLine is softrnic version's output: the version, then the VCS
// revision and time the build info records (with "+dirty" for a build
// from a modified tree) and the Go version.
func versionLine() string {
	v, rev, when, dirty, gover := version, "", "", false, runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	line := "softrnic " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+dirty"
		}
		line += ", revision " + rev
		if when != "" {
			line += " of " + when
		}
	}
	return line + ", " + gover
}

type command struct {
	name    string
	summary string
	run     func(args []string, stdout io.Writer) error
}

var commands = []command{
	{"decode", "parse RoCEv2 frames in pcap/pcapng files and check every ICRC", runDecode},
	{"demo", "every RC operation between two softrnic NICs over a veth pair (root)", runDemo},
	{"perf", "perftest's tests (send-bw … atomic-lat), a peer of the ib_* tools", runPerf},
	{"pingpong", "rdma-core's example programs (rc, uc, ud, srq), a peer of ibv_*_pingpong", runPingpong},
	{"rping", "librdmacm's rping through the connection manager, a peer of rping -s/-c", runRping},
	{"devinfo", "an RDMA device on a netdev as ibv_devinfo -v shows one: port, state, MTUs, GID table, capacities", runDevinfo},
	{"stat", "a running softrnic's counters (perf --metrics ADDR), as rdma statistic shows them", runStat},
	{"bench", "benchmarks (bench -h lists them): " + benchNames(), runBench},
	{"version", "print the version", runVersion},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: softrnic <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "the usage, or with a command its usage and flags")
	fmt.Fprintln(w, "\nEach command takes -h for its flags; `softrnic help COMMAND` says the same.")
	fmt.Fprintln(w, "-v, before the command or among its flags, logs debug messages on stderr.")
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func main() {
	datapath.SpareProcs()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command with its arguments (without the program name); it
// returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	args, restore := startLogging(args, stderr) // and the global -v
	defer restore()
	if len(args) == 0 {
		fmt.Fprintln(stderr, "softrnic: no command given")
		fmt.Fprintln(stderr)
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		return help(args[1:], stdout, stderr)
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "softrnic: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return report(c.name, c.run(args[1:], stdout), stdout, stderr)
}

// help is `softrnic help [COMMAND [SUBCOMMAND]]`: the usage, or what
// `softrnic COMMAND [SUBCOMMAND] -h` prints.
func help(topic []string, stdout, stderr io.Writer) int {
	if len(topic) == 0 || topic[0] == "help" || topic[0] == "-h" || topic[0] == "-help" || topic[0] == "--help" {
		usage(stdout)
		return 0
	}
	c := lookup(topic[0])
	if c == nil {
		fmt.Fprintf(stderr, "softrnic help: unknown command %q\n\n", topic[0])
		usage(stderr)
		return 2
	}
	args := append(append([]string{}, topic[1:]...), "-h")
	return report(c.name, c.run(args, stdout), stdout, stderr)
}

// report prints a command's error on the stream it belongs to and returns
// the exit status.
func report(name string, err error, stdout, stderr io.Writer) int {
	var (
		helpReq *helpRequest
		uerr    *usageError
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &helpReq):
		helpReq.usage(stdout)
		return 0
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "softrnic %s: %v\n", name, uerr.err)
		if uerr.usage != nil {
			fmt.Fprintln(stderr)
			uerr.usage(stderr)
		} else {
			fmt.Fprintf(stderr, "run 'softrnic help %s' for usage\n", name)
		}
		return 2
	}
	fmt.Fprintf(stderr, "softrnic %s: %v\n", name, err)
	return 1
}

// usageError is a mistake on the command line: it is reported with the
// usage (or, when usage is nil, a pointer to it) on stderr, and the exit
// status is 2.
type usageError struct {
	err   error
	usage func(io.Writer)
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// badUsage returns a usageError with the usage.
func badUsage(usage func(io.Writer), format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...), usage}
}

// badValue returns a usageError for a flag's value: the error alone, the
// usage being long.
func badValue(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...), nil}
}

// helpRequest is -h or --help: the usage goes to stdout and the exit status
// is 0.
type helpRequest struct{ usage func(io.Writer) }

func (h *helpRequest) Error() string        { return "help requested" }
func (h *helpRequest) Is(target error) bool { return target == flag.ErrHelp }

// newFlagSet returns a flag set whose usage is "usage: softrnic SYNOPSIS",
// the text after it, and the flags.
func newFlagSet(name, synopsis, text string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolFunc("v", "log debug messages on stderr", verboseFlag)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: softrnic %s\n", synopsis)
		if text != "" {
			fmt.Fprintf(w, "\n%s", text)
		}
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(w, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// flagUsage returns a function that writes fs's usage to a writer.
func flagUsage(fs *flag.FlagSet) func(io.Writer) {
	return func(w io.Writer) {
		fs.SetOutput(w)
		defer fs.SetOutput(io.Discard)
		fs.Usage()
	}
}

// parseFlags parses args with fs without printing anything: -h becomes a
// helpRequest and a bad flag a usageError, both carrying fs's usage, so
// that report prints each once, on its stream.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return &helpRequest{flagUsage(fs)}
	case err != nil:
		return &usageError{err, flagUsage(fs)}
	}
	return nil
}

// flagGiven reports whether the flag was on the command line, by its
// name or by another that shares its value (a long form, "--size" for
// "-s").
func flagGiven(fs *flag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	given := false
	fs.Visit(func(g *flag.Flag) { given = given || g.Value == f.Value })
	return given
}

func runVersion(args []string, stdout io.Writer) error {
	fs := newFlagSet("version", "version", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return badUsage(flagUsage(fs), "version takes no arguments, not %q", fs.Args())
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}
