// Command segctl inspects and maintains a segkv store directory.
//
//	segctl create    DIR            create an empty store
//	segctl info      DIR            what Open would repair, the store's counters
//	segctl segments  DIR            one row per sealed segment
//	segctl get       DIR KEY        print a key's value
//	segctl scan      DIR            keys (and values) in order, either direction
//	segctl verify    DIR            scrub every sealed segment; exit 1 on damage
//	segctl compact   DIR            merge until the merge policy is satisfied
//	segctl export    DIR ID FILE    write sealed segment ID to FILE (- for stdout)
//	segctl import    DIR FILE...    adopt exported segments in one atomic commit
//	segctl manifest  DIR            decode the manifest, read-only
//
// Flags come before the positional arguments ("segctl scan -prefix a/ DIR");
// "--" ends the flags, so that a key starting with '-' can be given
// ("segctl get DIR -- -k"), and -hex takes any key as hex.
//
// The read commands (info, segments, get, scan, verify, export) open the
// store read-only (segstore.Options.ReadOnly): they repair nothing and
// change no file, and info says what a writable open would repair. compact
// and import open it as an application does and run recovery's repairs
// (printed). Either way the directory lock is taken, so a store another
// process has open is refused; manifest only reads the manifest files, so
// it works on a store in use or one that Open refuses. Only create makes a
// store: every other command wants DIR to hold one already.
//
// Segment ids are printed and read in decimal everywhere; a segment's files
// are named by the same id in 16 hex digits (segments shows the file name).
//
// Output is an aligned table, or one JSON object per line with -json. Keys
// and values print as they are when they are printable UTF-8 and quoted
// otherwise; -hex prints (and reads) them as hex. get and export write raw
// bytes; to a terminal they refuse bytes that are not printable text unless
// -binary is given.
//
// A write error on standard output (a closed pipe: "segctl scan DIR | head
// -1") stops the command; the store is closed cleanly and the exit status is
// 3, with no message.
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
	exitPipe  = 3 // standard output was closed early (a broken pipe)
)

// The usage-error convention shared with the other tools (internal/cliout).
type usageError = cliout.UsageError

var (
	usagef  = cliout.Usagef
	errHelp = cliout.ErrHelp
)

// errPipe marks a write error on standard output: the reader went away.
var errPipe = errors.New("standard output closed")

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
		"create":   {"DIR", "create an empty store in DIR (made if missing)", runCreate},
		"info":     {"DIR", "what a writable open would repair, and the store's counters", runInfo},
		"segments": {"DIR", "one row per sealed segment", runSegments},
		"get":      {"DIR KEY", "print the value of KEY", runGet},
		"scan":     {"DIR", "keys (with -values, values too) in order; -reverse walks backward", runScan},
		"verify":   {"DIR", "scrub every sealed segment against its digest, then check the store; exit 1 on damage", runVerify},
		"compact":  {"DIR", "merge until the merge policy, applied in full, is satisfied", runCompact},
		"export":   {"DIR ID FILE", "write sealed segment ID (decimal) to FILE (- for stdout)", runExport},
		"import":   {"DIR FILE...", "adopt exported segments in one atomic commit (segctl create makes DIR)", runImport},
		"manifest": {"DIR", "decode the manifest generations without opening the store", runManifest},
	}
}

// env is what a command reads flags into and writes to.
type env struct {
	stdout    io.Writer
	stderr    io.Writer
	tty       bool // stderr is a terminal: progress lines are shown
	stdoutTTY bool // stdout is a terminal: raw binary output is refused
}

func (e *env) progress() *cliout.Progress { return cliout.NewProgress(e.stderr, e.tty) }

func main() {
	// A closed pipe on stdout must not kill the process with SIGPIPE in the
	// middle of an operation: ignored, the write returns EPIPE, the command
	// stops, and the store is closed cleanly (exit 3).
	signal.Ignore(syscall.SIGPIPE)
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
	if f, ok := stdout.(*os.File); ok {
		e.stdoutTTY = cliout.IsTerminal(f)
	}
	return runEnv(ctx, e, args)
}

// runEnv is run with the environment made.
func runEnv(ctx context.Context, e *env, args []string) int {
	stdout, stderr := e.stdout, e.stderr
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
	out := &pipeWriter{w: stdout}
	e.stdout = out
	err := cmd.run(ctx, e, args)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		return exitOK
	case out.err != nil:
		// Whatever the command made of it: the reader went away.
		return exitPipe
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

// pipeWriter is standard output: it remembers the first write error, so
// that run reports a closed pipe as such whatever error the command
// returned for it, and refuses every later write.
type pipeWriter struct {
	w   io.Writer
	err error
}

func (p *pipeWriter) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.w.Write(b)
	if err != nil {
		p.err = fmt.Errorf("%w: %w", errPipe, err)
		return n, p.err
	}
	return n, nil
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "segctl inspects and maintains a segkv store directory.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: segctl COMMAND [flags] ARGS...")
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
The read commands (info, segments, get, scan, verify, export) open the store
read-only: they repair and change nothing. compact and import open it as an
application would, running recovery's repairs (printed). All of them take the
directory lock, so they refuse a store another process has open; manifest
only reads the manifest files and works on a store in use. Only create makes
a store.

Flags go before the arguments; "--" ends them (for a key starting with '-').
"segctl COMMAND -h" lists a command's flags. Segment ids are decimal
everywhere. Exit status: 0 done, 1 failed (or damage found, or key absent),
2 bad usage, 3 standard output closed early (broken pipe; the store was
closed cleanly).`))
}
