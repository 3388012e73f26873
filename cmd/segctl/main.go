// Command segctl inspects and maintains a segkv store directory.
//
//	segctl info      DIR            what Open repaired, the store's counters
//	segctl segments  DIR            one row per sealed segment
//	segctl get       DIR KEY        print a key's value
//	segctl scan      DIR            keys (and values) in order, either direction
//	segctl verify    DIR            scrub every sealed segment; exit 1 on damage
//	segctl compact   DIR            merge until the merge policy is satisfied
//	segctl export    DIR ID FILE    write sealed segment ID to FILE (- for stdout)
//	segctl import    DIR FILE...    adopt exported segments in one atomic commit
//	segctl manifest  DIR            decode the manifest, read-only
//
// Flags come before the positional arguments ("segctl scan -prefix a/ DIR").
// Every command but manifest opens the store the way an application does: it
// takes the directory lock (so it refuses a store another process has open),
// runs recovery (repairs are printed), and closes the store cleanly. It never
// creates a store: DIR must already hold one. manifest only reads the
// manifest files, so it works on a store in use or one that Open refuses.
//
// Output is an aligned table, or one JSON object per line with -json. Keys
// and values print as they are when they are printable UTF-8 and quoted
// otherwise; -hex prints (and reads) them as hex.
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
	exitFail  = 1 // the operation failed, or found damage, or the key is absent
	exitUsage = 2 // bad command, flags or arguments
)

// The usage-error convention shared with the other tools (internal/cliout).
type usageError = cliout.UsageError

var (
	usagef  = cliout.Usagef
	errHelp = cliout.ErrHelp
)

// errReported is returned by a command that already printed why it fails
// (damage found, key absent): exit 1 without another message.
var errReported = errors.New("reported")

type command struct {
	args    string // the positional arguments, for usage
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"info":     {"DIR", "what Open repaired and the store's counters", runInfo},
		"segments": {"DIR", "one row per sealed segment", runSegments},
		"get":      {"DIR KEY", "print the value of KEY", runGet},
		"scan":     {"DIR", "keys (with -values, values too) in order; -reverse walks backward", runScan},
		"verify":   {"DIR", "scrub every sealed segment against its digest, then check the store; exit 1 on damage", runVerify},
		"compact":  {"DIR", "merge until the merge policy, applied in full, is satisfied", runCompact},
		"export":   {"DIR ID FILE", "write sealed segment ID to FILE (- for stdout)", runExport},
		"import":   {"DIR FILE...", "adopt exported segments in one atomic commit", runImport},
		"manifest": {"DIR", "decode the manifest generations without opening the store", runManifest},
	}
}

// env is what a command reads flags into and writes to.
type env struct {
	stdout io.Writer
	stderr io.Writer
	tty    bool // stderr is a terminal: progress lines are shown
}

func (e *env) progress() *cliout.Progress { return cliout.NewProgress(e.stderr, e.tty) }

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
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		return exitOK
	}
	name, args := args[0], args[1:]
	cmd, ok := commands()[name]
	if !ok {
		fmt.Fprintf(stderr, "segctl: unknown command %q\n\n", name)
		printUsage(stderr)
		return exitUsage
	}
	err := cmd.run(ctx, e, args)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		return exitOK
	case errors.Is(err, errReported):
		return exitFail
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "segctl %s: %v\n", name, err)
		fmt.Fprintf(stderr, "usage: segctl %s [flags] %s (segctl %s -h for the flags)\n", name, cmd.args, name)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "segctl %s: %v\n", name, err)
		return exitFail
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "segctl inspects and maintains a segkv store directory.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: segctl COMMAND [flags] ARGS")
	fmt.Fprintln(w)
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := cmds[n]
		fmt.Fprintf(w, "  %-9s %-12s %s\n", n, c.args, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.TrimSpace(`
Every command but manifest opens the store as an application would: it takes
the directory lock, runs recovery (and prints what it repaired) and closes
cleanly. It never creates a store. Flags go before the arguments; "segctl
COMMAND -h" lists them. Exit status: 0 done, 1 failed (or damage found, or
key absent), 2 bad usage.`))
}
