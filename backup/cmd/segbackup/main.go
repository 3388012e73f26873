// Command segbackup backs a segkv store up to object storage (or a
// directory) and restores it, to the latest state or any recorded
// manifest seq. See docs/BACKUP.md.
//
//	segbackup run -store DIR -to URL [-once] [-poll D] [-seal D] [-json]
//	segbackup restore -from URL -to DIR [-seq N] [-json]
//	segbackup prune -from URL [-keep-checkpoints K] [-keep-within D] [-orphans] [-dry-run] [-json]
//
// URL is a gocloud.dev/blob URL (file:///path, mem://, s3://bucket?endpoint=...,
// gs://, azblob://; prefix=... puts the backup under a key prefix) or a
// plain directory path.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/segkv/segkv/backup"
	"github.com/segkv/segkv/backup/bucket"
	"github.com/segkv/segkv/internal/cliout"
	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, cliout.IsTerminal(os.Stderr))
	stop()
	os.Exit(code)
}

const usage = `usage:
  segbackup run -store DIR -to URL [-once] [-poll 1s] [-seal 0] [-json]
  segbackup restore -from URL -to DIR [-seq N] [-json]
  segbackup prune -from URL [-keep-checkpoints K] [-keep-within D] [-orphans] [-dry-run] [-json]
`

// run is main without the process: exit code 0 ok, 1 failure, 2 usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, tty bool) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], stdout, stderr, tty)
	case "restore":
		err = cmdRestore(ctx, args[1:], stdout, stderr, tty)
	case "prune":
		err = cmdPrune(ctx, args[1:], stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = cliout.Usagef("unknown command %q", args[0])
	}
	var ue cliout.UsageError
	switch {
	case err == nil || errors.Is(err, cliout.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "segbackup: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "segbackup: %v\n", err)
		return 1
	}
}

type stepRow struct {
	Event            string `json:"event"`
	Seq              uint64 `json:"seq"`
	Segments         int    `json:"segments"`
	Edits            int64  `json:"edits"`
	Checkpoints      int64  `json:"checkpoints"`
	SegmentsUploaded int64  `json:"segments_uploaded"`
	SegmentBytes     int64  `json:"segment_bytes"`
	MetaBytes        int64  `json:"meta_bytes"`
	Error            string `json:"error,omitempty"`
}

func (r stepRow) Header() []string {
	return []string{"event", "seq", "segments", "edits", "checkpoints", "uploaded", "segment_bytes", "meta_bytes"}
}

func (r stepRow) Cells() []string {
	return []string{r.Event, u(r.Seq), strconv.Itoa(r.Segments), i64(r.Edits), i64(r.Checkpoints), i64(r.SegmentsUploaded), i64(r.SegmentBytes), i64(r.MetaBytes)}
}

func u(v uint64) string  { return strconv.FormatUint(v, 10) }
func i64(v int64) string { return strconv.FormatInt(v, 10) }

func rowOf(event string, st backup.Stats) stepRow {
	return stepRow{Event: event, Seq: st.Seq, Segments: st.Segments, Edits: st.Edits, Checkpoints: st.Checkpoints,
		SegmentsUploaded: st.SegmentsUploaded, SegmentBytes: st.SegmentBytes, MetaBytes: st.MetaBytes}
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer, tty bool) error {
	fs := flag.NewFlagSet("segbackup run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeDir := fs.String("store", "", "store directory (opened by this process: a store not in use)")
	to := fs.String("to", "", "backup URL or directory")
	once := fs.Bool("once", false, "back up everything committed so far, then exit")
	poll := fs.Duration("poll", time.Second, "how often to look for new commits")
	sealEvery := fs.Duration("seal", 0, "seal the live file this often (0: never), bounding the recovery point")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if err := cliout.ParseFlags(fs, args); err != nil {
		return err
	}
	if *storeDir == "" || *to == "" || fs.NArg() > 0 {
		return cliout.Usagef("run needs -store DIR -to URL")
	}
	if *poll <= 0 || *sealEvery < 0 {
		// The library would take them as its defaults, silently.
		return cliout.Usagef("run needs -poll > 0 and -seal >= 0")
	}
	if strings.HasPrefix(*to, "mem://") {
		// Nothing written there outlives this process.
		return cliout.Usagef("run cannot back up to %s: a mem:// bucket is gone when segbackup exits", *to)
	}
	// segstore.Open creates a store where there is none: a mistyped -store
	// would back up a new empty store (and leave one behind) instead of
	// failing.
	if err := hasStore(*storeDir); err != nil {
		return err
	}
	b, err := bucket.OpenURL(ctx, *to)
	if err != nil {
		return err
	}
	defer b.Close()
	s, err := segstore.Open(*storeDir, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	if *once {
		// Everything committed so far includes what is not sealed yet.
		if err := s.Seal(); err != nil {
			return err
		}
	}
	out := cliout.NewPrinter(stdout, *asJSON)
	prog := cliout.NewProgress(stderr, tty && !*asJSON)
	defer prog.Done()
	opts := &backup.Options{Poll: *poll, SealEvery: *sealEvery, Progress: func(ev backup.Event) {
		switch ev.Kind {
		case "segment":
			prog.Update("seq %d: uploaded %d segments, %d bytes", ev.Stats.Seq, ev.Stats.SegmentsUploaded, ev.Stats.SegmentBytes)
		case "edit":
			if !*once {
				prog.Done()
				out.Print(rowOf("edit", ev.Stats))
				out.Flush()
			}
		case "retry":
			prog.Done()
			r := rowOf("retry", ev.Stats)
			r.Error = ev.Err.Error()
			if *asJSON {
				out.Print(r)
			} else {
				fmt.Fprintf(stderr, "segbackup: %v (retrying in %v)\n", ev.Err, ev.Duration)
			}
		}
	}}
	l := backup.NewLoop(backup.StoreSource(s), b, opts)
	if *once {
		if err := l.Once(ctx); err != nil {
			return err
		}
		prog.Done()
		if err := out.Print(rowOf("done", l.Stats())); err != nil {
			return err
		}
		return out.Flush()
	}
	err = l.Run(ctx)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil // interrupted: a clean stop
	}
	return err
}

// errNoStore reports a -store directory that holds no segkv store.
var errNoStore = errors.New("no segkv store")

// hasStore checks that dir holds a store: a manifest generation, which
// every store has from its first Open on.
func hasStore(dir string) error {
	names, err := vfs.NewOS().List(dir)
	if err != nil {
		return fmt.Errorf("%w at %s: %w", errNoStore, dir, err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "MANIFEST-") {
			return nil
		}
	}
	return fmt.Errorf("%w at %s: it has no MANIFEST file", errNoStore, dir)
}

type restoreRow struct {
	Seq      uint64  `json:"seq"`
	Segments int     `json:"segments"`
	Bytes    int64   `json:"bytes"`
	Objects  int     `json:"metadata_objects"`
	Dir      string  `json:"dir"`
	Seconds  float64 `json:"seconds"`
}

func (r restoreRow) Header() []string {
	return []string{"seq", "segments", "bytes", "metadata_objects", "seconds", "dir"}
}
func (r restoreRow) Cells() []string {
	return []string{u(r.Seq), strconv.Itoa(r.Segments), i64(r.Bytes), strconv.Itoa(r.Objects), fmt.Sprintf("%.3f", r.Seconds), r.Dir}
}

func cmdRestore(ctx context.Context, args []string, stdout, stderr io.Writer, tty bool) error {
	fs := flag.NewFlagSet("segbackup restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "backup URL or directory")
	to := fs.String("to", "", "directory of the new store (must not exist, or be empty)")
	seq := fs.Uint64("seq", 0, "restore the state as of this manifest seq (0: the latest)")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if err := cliout.ParseFlags(fs, args); err != nil {
		return err
	}
	if *from == "" || *to == "" || fs.NArg() > 0 {
		return cliout.Usagef("restore needs -from URL -to DIR")
	}
	b, err := bucket.OpenExistingURL(ctx, *from)
	if err != nil {
		return err
	}
	defer b.Close()
	prog := cliout.NewProgress(stderr, tty && !*asJSON)
	start := time.Now()
	res, err := backup.Restore(ctx, b, *to, &backup.RestoreOptions{Seq: *seq, Progress: func(done, total int, bytes int64) {
		prog.Update("segment %d/%d", done, total)
	}})
	prog.Done()
	for _, d := range res.Cleaned {
		fmt.Fprintf(stderr, "segbackup: removed %s, left by a restore that was killed\n", d)
	}
	for _, e := range res.CleanErrors {
		fmt.Fprintf(stderr, "segbackup: warning: %v\n", e)
	}
	for _, e := range res.Skipped {
		fmt.Fprintf(stderr, "segbackup: warning: %v\n", e)
	}
	if err != nil {
		return err
	}
	out := cliout.NewPrinter(stdout, *asJSON)
	if err := out.Print(restoreRow{Seq: res.Seq, Segments: res.Segments, Bytes: res.Bytes, Objects: res.Objects, Dir: *to, Seconds: time.Since(start).Seconds()}); err != nil {
		return err
	}
	return out.Flush()
}

type pruneRow struct {
	Base        uint64 `json:"base"`
	Checkpoints int    `json:"checkpoints_deleted"`
	Edits       int    `json:"edits_deleted"`
	Segments    int    `json:"segments_deleted"`
	Bytes       int64  `json:"bytes_deleted"`
	Orphans     int    `json:"orphans"`
	DryRun      bool   `json:"dry_run"`
}

func (r pruneRow) Header() []string {
	return []string{"base", "checkpoints_deleted", "edits_deleted", "segments_deleted", "bytes_deleted", "orphans", "dry_run"}
}
func (r pruneRow) Cells() []string {
	return []string{u(r.Base), strconv.Itoa(r.Checkpoints), strconv.Itoa(r.Edits), strconv.Itoa(r.Segments), i64(r.Bytes), strconv.Itoa(r.Orphans), strconv.FormatBool(r.DryRun)}
}

func cmdPrune(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("segbackup prune", flag.ContinueOnError)
	from := fs.String("from", "", "backup URL or directory")
	keep := fs.Int("keep-checkpoints", 0, "keep the newest K checkpoints and every state after the oldest")
	within := fs.Duration("keep-within", 0, "keep every state newer than this")
	orphans := fs.Bool("orphans", false, "also delete segment objects nothing names (only while no loop runs)")
	dry := fs.Bool("dry-run", false, "report, delete nothing")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if err := cliout.ParseFlags(fs, args); err != nil {
		return err
	}
	if *from == "" || (*keep <= 0 && *within <= 0) || fs.NArg() > 0 {
		return cliout.Usagef("prune needs -from URL and -keep-checkpoints K or -keep-within D")
	}
	b, err := bucket.OpenExistingURL(ctx, *from)
	if err != nil {
		return err
	}
	defer b.Close()
	res, err := backup.Prune(ctx, b, backup.PruneOptions{KeepCheckpoints: *keep, KeepWithin: *within, Orphans: *orphans, DryRun: *dry})
	if err != nil {
		return err
	}
	out := cliout.NewPrinter(stdout, *asJSON)
	if err := out.Print(pruneRow{Base: res.Base, Checkpoints: res.Checkpoints, Edits: res.Edits, Segments: res.Segments, Bytes: res.Bytes, Orphans: res.Orphans, DryRun: *dry}); err != nil {
		return err
	}
	return out.Flush()
}
