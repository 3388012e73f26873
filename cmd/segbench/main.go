// Command segbench measures what durability costs segkv on the disk it runs
// on, and reproduces, side by side in one process, the reference design's
// seal protocol that segkv replaces.
//
// Usage:
//
//	segbench [subcommand] [flags]
//
// Subcommands:
//
//	seal      seal a one-record tail repeatedly: segkv beside the rewrite protocol it replaces
//	fsync     device probe: what one barrier costs here
//	import    export N segments and import them in one call vs N calls
//	put       put throughput and latency with W writers
//	mergeput  durable put latency while the background merge works, against idle
//	plot      render seal -json output as an SVG
//
// With no arguments it runs "seal -protocol both" at a size that finishes in
// well under a minute. Every subcommand runs in a fresh temporary directory
// on the real file system (-dir chooses where) and removes it afterwards. See
// docs/parts/segbench.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/segkv/segkv/internal/cliout"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the benchmark itself failed
	exitUsage = 2 // bad subcommand or flags
)

// The usage-error convention shared with the other tools (internal/cliout).
type usageError = cliout.UsageError

var (
	usagef  = cliout.Usagef
	errHelp = cliout.ErrHelp
)

// command is one subcommand. run parses args itself, so that each subcommand
// owns its flags and its usage text.
type command struct {
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"seal":     {"seal a one-record tail repeatedly: segkv beside the rewrite protocol it replaces", runSeal},
		"fsync":    {"device probe: median and p99 of fdatasync, fsync, directory fsync, rename", runFsync},
		"import":   {"export N sealed segments, import them in one call and in N calls", runImport},
		"put":      {"put throughput and latency percentiles with W writers", runPut},
		"mergeput": {"durable put latency while the background merge works hard, against the same store idle", runMergePut},
		"plot":     {"render the JSON rows of seal as an SVG", runPlot},
	}
}

// env is what a subcommand writes to.
type env struct {
	stdout io.Writer
	stderr io.Writer
	// tty says whether stderr is a terminal: progress is shown only then, so
	// that logs and pipes stay clean.
	tty bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	if f, ok := stderr.(*os.File); ok {
		e.tty = cliout.IsTerminal(f)
	}
	if len(args) > 0 && isHelp(args[0]) {
		// segbench -h: the subcommands, not the default subcommand's flags.
		printUsage(stdout)
		return exitOK
	}
	name := "seal"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if name == "help" {
		printUsage(stdout)
		return exitOK
	}
	cmd, ok := commands()[name]
	if !ok {
		fmt.Fprintf(stderr, "segbench: unknown subcommand %q\n\n", name)
		printUsage(stderr)
		return exitUsage
	}
	err := cmd.run(ctx, e, args)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "segbench %s: %v\n", name, err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "segbench %s: %v\n", name, err)
		return exitFail
	}
}

// isHelp says whether arg asks for help the way the flag package would.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "--h":
		return true
	}
	return false
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "segbench measures what durability costs segkv on this disk.")
	fmt.Fprintln(w, "\nusage: segbench [subcommand] [flags]   (no subcommand: seal, what `make bench` runs)")
	fmt.Fprintln(w, "\nsubcommands:")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nsegbench <subcommand> -h lists its flags. Every subcommand works in a temporary")
	fmt.Fprintln(w, "directory under -dir (default: the system temp dir) on the real disk, and removes it.")
}
