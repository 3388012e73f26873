package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/segkv/segkv/internal/cliout"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// flags are the flags every command takes, plus its own.
type flags struct {
	*flag.FlagSet
	json bool
	hex  bool
}

func newFlags(name string, e *env, withHex bool) *flags {
	f := &flags{FlagSet: flag.NewFlagSet("segctl "+name, flag.ContinueOnError)}
	f.SetOutput(e.stderr)
	f.Usage = func() {
		c := commands()[name]
		w := f.Output()
		fmt.Fprintf(w, "usage: segctl %s [flags] %s\n\n%s.\n", name, c.args, c.summary)
		if name != "create" && name != "manifest" {
			fmt.Fprintln(w, "\nFlags go before the arguments; \"--\" ends them.")
		}
		fmt.Fprintln(w, "\nflags:")
		f.PrintDefaults()
	}
	f.BoolVar(&f.json, "json", false, "print one JSON object per line instead of a table")
	if withHex {
		f.BoolVar(&f.hex, "hex", false, "keys and values in hex, in arguments and output")
	}
	return f
}

// parse parses args and checks the number of positional arguments: exactly
// want, or at least want if more is set.
func (f *flags) parse(args []string, want int, more bool) ([]string, error) {
	if err := cliout.ParseFlags(f.FlagSet, args); err != nil {
		return nil, err
	}
	rest := f.Args()
	// After "--" every argument is positional: a key may start with '-'.
	// Parse consumes a "--" that comes before the first positional
	// argument ("segctl get -- DIR -k"); one among the positional arguments
	// ("segctl get DIR -- -k", the form the docs show) is dropped here.
	// Without it, an argument that looks like a flag is most likely a flag
	// put after the arguments.
	ended := len(rest) < len(args) && args[len(args)-len(rest)-1] == "--"
	pos := make([]string, 0, len(rest))
	for _, a := range rest {
		switch {
		case ended:
		case a == "--":
			ended = true
			continue
		case strings.HasPrefix(a, "-") && len(a) > 1:
			return nil, usagef("flag %s after the arguments: flags go first (\"--\" ends the flags, for a key starting with '-')", a)
		}
		pos = append(pos, a)
	}
	if len(pos) < want || (!more && len(pos) > want) {
		return nil, usagef("want %d argument(s), got %d", want, len(pos))
	}
	return pos, nil
}

// key decodes a key argument.
func (f *flags) key(s string) ([]byte, error) {
	if !f.hex {
		return []byte(s), nil
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, usagef("-hex: %q is not hex: %v", s, err)
	}
	return b, nil
}

// text renders a key or value for output.
func (f *flags) text(b []byte) string {
	if f.hex {
		return hex.EncodeToString(b)
	}
	return printable(b)
}

// printable returns b as it is if it is printable UTF-8, else Go-quoted.
func printable(b []byte) string {
	if utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) }) {
		return string(b)
	}
	return strconv.Quote(string(b))
}

// openStore opens an existing store: never creates one. A read-only open
// (the read commands) repairs nothing; a writable one (compact, import)
// runs recovery's repairs, which go to stderr as they happen (the store
// logs them at WARN).
func openStore(e *env, dir string, mergeOff, readOnly bool) (*segstore.Store, error) {
	names, err := vfs.NewOS().List(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist (segctl create makes a store): %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	found := false
	for _, n := range names {
		if strings.HasPrefix(n, "MANIFEST-") {
			found = true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("%s holds no segkv store (no MANIFEST-* file; segctl create makes one)", dir)
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := segstore.Open(dir, &segstore.Options{Logger: logger, ReadOnly: readOnly, Merge: segstore.MergeOptions{Disable: mergeOff}})
	if errors.Is(err, segstore.ErrLocked) {
		return nil, fmt.Errorf("%w (another process has the store open; segctl manifest can still read it)", err)
	}
	return s, err
}

// withStore runs fn on the store in dir, opened read-only, and closes it,
// joining the errors. The store is closed however fn ends, a write error
// on stdout included.
func withStore(e *env, dir string, fn func(*segstore.Store) error) error {
	return withOpenStore(e, dir, true, fn)
}

func withOpenStore(e *env, dir string, readOnly bool, fn func(*segstore.Store) error) (err error) {
	s, err := openStore(e, dir, true, readOnly)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close: %w", cerr))
		}
	}()
	return fn(s)
}

func runCreate(_ context.Context, e *env, args []string) error {
	f := newFlags("create", e, false)
	pos, err := f.parse(args, 1, false)
	if err != nil {
		return err
	}
	dir := pos[0]
	if names, err := vfs.NewOS().List(dir); err == nil {
		for _, n := range names {
			if strings.HasPrefix(n, "MANIFEST-") {
				return fmt.Errorf("%s already holds a segkv store", dir)
			}
		}
	}
	s, err := segstore.Open(dir, &segstore.Options{Merge: segstore.MergeOptions{Disable: true}})
	if err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	p := cliout.NewPrinter(e.stdout, f.json)
	if err := p.Print(metricRow{"created", dir}); err != nil {
		return err
	}
	return p.Flush()
}

type metricRow struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func (metricRow) Header() []string  { return []string{"item", "value"} }
func (r metricRow) Cells() []string { return []string{r.Name, r.Value} }

func runInfo(_ context.Context, e *env, args []string) error {
	f := newFlags("info", e, false)
	pos, err := f.parse(args, 1, false)
	if err != nil {
		return err
	}
	return withStore(e, pos[0], func(s *segstore.Store) error {
		p := cliout.NewPrinter(e.stdout, f.json)
		var rows []metricRow
		rep := s.RecoveryReport()
		// Opened read-only: the report says what a writable open (an
		// application's, or segctl compact) would repair.
		if !rep.Repaired() {
			rows = append(rows, metricRow{"recovery", "nothing to repair"})
		}
		for _, a := range rep.ManifestActions {
			rows = append(rows, metricRow{"recovery", "manifest: " + a})
		}
		for _, t := range rep.TornTails {
			rows = append(rows, metricRow{"recovery", fmt.Sprintf("would truncate the torn tail of %s at offset %d (%d bytes)", t.Path, t.Offset, t.Bytes)})
		}
		for _, r := range rep.RemovedFiles {
			rows = append(rows, metricRow{"recovery", "would remove " + r})
		}
		for _, r := range rep.RebuiltIndexes {
			rows = append(rows, metricRow{"recovery", "would rebuild index " + r})
		}
		for _, r := range rep.DroppedChain {
			rows = append(rows, metricRow{"recovery", "would drop live continuation " + r})
		}
		m := s.Metrics()
		rows = append(rows, []metricRow{
			{"manifest seq", strconv.FormatUint(s.ManifestSeq(), 10)},
			{"sealed segments", strconv.Itoa(m.Segments)},
			{"sealed bytes", strconv.FormatInt(m.SegmentBytes, 10)},
			{"garbage bytes (estimated)", strconv.FormatInt(m.GarbageBytes, 10)},
			{"live file bytes", strconv.FormatInt(m.LiveBytes, 10)},
			{"index rebuilds", strconv.FormatInt(m.IndexRebuilds, 10)},
		}...)
		for _, r := range rows {
			if err := p.Print(r); err != nil {
				return err
			}
		}
		return p.Flush()
	})
}

type segmentRow struct {
	ID       uint64 `json:"id"`
	File     string `json:"file"`
	Size     int64  `json:"size"`
	Records  uint64 `json:"records"`
	Keys     uint64 `json:"keys"`
	Order    uint64 `json:"order"`
	AddedSeq uint64 `json:"added_seq"`
	Digest   string `json:"digest"`
	MinKey   string `json:"min_key"`
	MaxKey   string `json:"max_key"`
}

func (segmentRow) Header() []string {
	return []string{"id", "file", "size", "records", "keys", "order", "added_seq", "digest", "min_key", "max_key"}
}

func (r segmentRow) Cells() []string {
	return []string{strconv.FormatUint(r.ID, 10), r.File, strconv.FormatInt(r.Size, 10),
		strconv.FormatUint(r.Records, 10), strconv.FormatUint(r.Keys, 10), strconv.FormatUint(r.Order, 10),
		strconv.FormatUint(r.AddedSeq, 10), r.Digest, r.MinKey, r.MaxKey}
}

func runSegments(_ context.Context, e *env, args []string) error {
	f := newFlags("segments", e, true)
	pos, err := f.parse(args, 1, false)
	if err != nil {
		return err
	}
	return withStore(e, pos[0], func(s *segstore.Store) error {
		p := cliout.NewPrinter(e.stdout, f.json)
		segs := s.Segments()
		for _, sg := range segs {
			row := segmentInfoRow(f, sg)
			row.File = dataFileName(pos[0], sg.ID)
			if err := p.Print(row); err != nil {
				return err
			}
		}
		if len(segs) == 0 {
			p.Note("no sealed segments")
		}
		return p.Flush()
	})
}

// dataFileName is the name of segment id's data file in dir: a sealed live
// file keeps its ".log" name, a merge or import output is a ".seg".
func dataFileName(dir string, id uint64) string {
	for _, kind := range []segment.FileKind{segment.KindSeg, segment.KindLog} {
		name := segment.DataName(id, kind)
		if _, err := vfs.NewOS().Stat(filepath.Join(dir, name)); err == nil {
			return name
		}
	}
	return ""
}

func segmentInfoRow(f *flags, sg segstore.SegmentInfo) segmentRow {
	return segmentRow{ID: sg.ID, Size: sg.Size, Records: sg.Records, Keys: sg.Keys,
		Order: sg.Order, AddedSeq: sg.AddedSeq, Digest: fmt.Sprintf("%016x", sg.Digest),
		MinKey: f.text(sg.MinKey), MaxKey: f.text(sg.MaxKey)}
}

// binaryFlag adds -binary to a command that writes raw bytes.
func binaryFlag(f *flags) *bool {
	return f.Bool("binary", false, "write bytes that are not printable text to a terminal anyway")
}

// refuseBinary refuses raw output that is not printable text to a
// terminal, where it would garble the screen (or be taken for escape
// sequences), unless -binary asked for it.
func refuseBinary(e *env, binary bool, b []byte, what string) error {
	if !e.stdoutTTY || binary || printable(b) == string(b) {
		return nil
	}
	return fmt.Errorf("%s is not printable text and standard output is a terminal: redirect it, use -hex, or give -binary", what)
}

func runGet(_ context.Context, e *env, args []string) error {
	f := newFlags("get", e, true)
	binary := binaryFlag(f)
	pos, err := f.parse(args, 2, false)
	if err != nil {
		return err
	}
	key, err := f.key(pos[1])
	if err != nil {
		return err
	}
	return withStore(e, pos[0], func(s *segstore.Store) error {
		v, err := s.Get(key)
		if errors.Is(err, segstore.ErrNotFound) {
			fmt.Fprintf(e.stderr, "segctl get: %s: not found\n", f.text(key))
			return errReported
		}
		if err != nil {
			return err
		}
		if f.hex {
			_, err = fmt.Fprintln(e.stdout, hex.EncodeToString(v))
		} else {
			if err := refuseBinary(e, *binary, v, "the value"); err != nil {
				return err
			}
			_, err = e.stdout.Write(v) // the value as stored, byte for byte
			if err == nil && e.stdoutTTY && !*binary && !bytes.HasSuffix(v, []byte("\n")) {
				// On a terminal, end the line so the prompt does not run
				// into the value; a pipe or file still gets the exact bytes.
				_, err = fmt.Fprintln(e.stdout)
			}
		}
		return err
	})
}

type scanRow struct {
	Key   string  `json:"key"`
	Value *string `json:"value,omitempty"`
}

func runScan(ctx context.Context, e *env, args []string) error {
	f := newFlags("scan", e, true)
	prefix := f.String("prefix", "", "only keys with this prefix")
	start := f.String("start", "", "first key (inclusive)")
	end := f.String("end", "", "stop before this key (exclusive)")
	reverse := f.Bool("reverse", false, "walk from the last key backward")
	limit := f.Int("limit", 0, "stop after this many keys (0: no limit)")
	values := f.Bool("values", false, "print values too")
	pos, err := f.parse(args, 1, false)
	if err != nil {
		return err
	}
	if *limit < 0 {
		return usagef("-limit must be >= 0")
	}
	var opts segstore.IterOptions
	for _, b := range []struct {
		arg string
		dst *[]byte
	}{{*prefix, &opts.Prefix}, {*start, &opts.LowerBound}, {*end, &opts.UpperBound}} {
		if b.arg == "" {
			continue
		}
		if *b.dst, err = f.key(b.arg); err != nil {
			return err
		}
	}
	return withStore(e, pos[0], func(s *segstore.Store) error {
		it, err := s.NewIterator(&opts)
		if err != nil {
			return err
		}
		defer it.Close()
		// Rows go out as they come: a scan can be larger than memory, so
		// no table alignment here. Buffered, so that a large scan is not a
		// system call per key; a write error (a closed pipe) surfaces at
		// the next flush and stops the scan.
		w := bufio.NewWriter(e.stdout)
		enc := cliout.NewPrinter(w, true)
		first, next := it.First, it.Next
		if *reverse {
			first, next = it.Last, it.Prev
		}
		n := 0
		for ok := first(); ok && (*limit == 0 || n < *limit); ok = next() {
			if n%4096 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			n++
			row := scanRow{Key: f.text(it.Key())}
			if *values {
				v, err := it.Value()
				if err != nil {
					return fmt.Errorf("value of %s: %w", row.Key, err)
				}
				t := f.text(v)
				row.Value = &t
			}
			if f.json {
				err = enc.Print(row)
			} else if row.Value != nil {
				_, err = fmt.Fprintf(w, "%s\t%s\n", row.Key, *row.Value)
			} else {
				_, err = fmt.Fprintln(w, row.Key)
			}
			if err != nil {
				return err
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		return w.Flush()
	})
}

func (scanRow) Header() []string { return []string{"key", "value"} }
func (r scanRow) Cells() []string {
	if r.Value == nil {
		return []string{r.Key, ""}
	}
	return []string{r.Key, *r.Value}
}

type damageRow struct {
	Damage string `json:"damage"`
}

func (damageRow) Header() []string  { return []string{"damage"} }
func (r damageRow) Cells() []string { return []string{r.Damage} }

// verifyResult is verify's whole answer with -json: one object, printed
// whatever happened (the store could not be opened, the scrub failed,
// damage was found, or all is well), so that a script always has a result
// to read. OK is true only when everything was read and nothing is wrong.
type verifyResult struct {
	OK       bool     `json:"ok"`
	Segments int      `json:"segments"`
	Bytes    int64    `json:"bytes"`
	Damaged  []string `json:"damaged"`
	Check    string   `json:"check,omitempty"` // why Check failed
	Error    string   `json:"error,omitempty"` // why verify could not finish
}

func (verifyResult) Header() []string { return nil }
func (verifyResult) Cells() []string  { return nil }

func runVerify(ctx context.Context, e *env, args []string) error {
	f := newFlags("verify", e, false)
	pos, err := f.parse(args, 1, false)
	if err != nil {
		return err
	}
	res := verifyResult{Damaged: []string{}}
	err = withStore(e, pos[0], func(s *segstore.Store) error {
		prog := e.progress()
		prog.Update("verify: reading %d sealed segments", len(s.Segments()))
		rep, err := s.Verify(ctx)
		prog.Done()
		res.Segments, res.Bytes = rep.Segments, rep.Bytes
		for _, d := range rep.Damaged {
			res.Damaged = append(res.Damaged, d.Error())
		}
		if err != nil {
			return err
		}
		if err := s.Check(); err != nil {
			res.Check = err.Error()
		}
		return nil
	})
	if err != nil {
		res.Error = err.Error()
	}
	res.OK = err == nil && len(res.Damaged) == 0 && res.Check == ""
	if f.json {
		if perr := cliout.NewPrinter(e.stdout, true).Print(res); perr != nil {
			return errors.Join(err, perr)
		}
		if err != nil {
			// The error is in the result; say it on stderr too.
			return err
		}
	} else {
		if err != nil {
			return err
		}
		p := cliout.NewPrinter(e.stdout, false)
		p.Note("verify: %d sealed segments, %d bytes read, %d damaged", res.Segments, res.Bytes, len(res.Damaged))
		for _, d := range res.Damaged {
			if err := p.Print(damageRow{d}); err != nil {
				return err
			}
		}
		if res.Check != "" {
			if err := p.Print(damageRow{"check: " + res.Check}); err != nil {
				return err
			}
		} else {
			p.Note("check: the store is consistent")
		}
		if err := p.Flush(); err != nil {
			return err
		}
	}
	if !res.OK {
		return errReported
	}
	return nil
}

func runCompact(ctx context.Context, e *env, args []string) error {
	f := newFlags("compact", e, false)
	pos, err := f.parse(args, 1, false)
	if err != nil {
		return err
	}
	s, err := openStore(e, pos[0], false, false)
	if err != nil {
		return err
	}
	before := s.Metrics()
	prog := e.progress()
	prog.Update("compact: merging %d segments", before.Segments)
	err = s.Compact(ctx)
	prog.Done()
	after := s.Metrics()
	if cerr := s.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close: %w", cerr))
	}
	if err != nil {
		return err
	}
	p := cliout.NewPrinter(e.stdout, f.json)
	for _, r := range []metricRow{
		{"segments before", strconv.Itoa(before.Segments)},
		{"segments after", strconv.Itoa(after.Segments)},
		{"sealed bytes before", strconv.FormatInt(before.SegmentBytes, 10)},
		{"sealed bytes after", strconv.FormatInt(after.SegmentBytes, 10)},
		{"garbage bytes before (estimated)", strconv.FormatInt(before.GarbageBytes, 10)},
		{"garbage bytes after (estimated)", strconv.FormatInt(after.GarbageBytes, 10)},
		{"merge steps", strconv.FormatInt(after.Merges-before.Merges, 10)},
	} {
		if err := p.Print(r); err != nil {
			return err
		}
	}
	return p.Flush()
}

func runExport(ctx context.Context, e *env, args []string) error {
	f := newFlags("export", e, false)
	binary := binaryFlag(f)
	pos, err := f.parse(args, 3, false)
	if err != nil {
		return err
	}
	id, err := strconv.ParseUint(pos[1], 10, 64)
	if err != nil {
		return usagef("segment id %q: want a decimal id, as segctl segments prints it: %v", pos[1], err)
	}
	return withStore(e, pos[0], func(s *segstore.Store) error {
		if pos[2] == "-" {
			if e.stdoutTTY && !*binary {
				return errors.New("a segment is binary and standard output is a terminal: redirect it, or give -binary")
			}
			_, err := s.Export(ctx, id, e.stdout)
			return err
		}
		n, err := exportToFile(ctx, s, id, pos[2])
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "segctl export: segment %d, %d bytes, to %s\n", id, n, pos[2])
		return nil
	})
}

// exportToFile writes segment id to a new file at path and syncs it, so
// that the file is whole on disk when export reports success. A failed
// export removes what it wrote.
func exportToFile(ctx context.Context, s *segstore.Store, id uint64, path string) (n int64, err error) {
	fsys := vfs.NewOS()
	if _, err := fsys.Stat(path); err == nil {
		return 0, fmt.Errorf("%s exists; export does not overwrite", path)
	}
	out, err := fsys.Create(path)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && err == nil {
			err = cerr
		}
		if err != nil {
			_ = fsys.Remove(path)
		}
	}()
	n, err = s.Export(ctx, id, vfs.NewWriter(out, 0))
	if err != nil {
		return n, err
	}
	if err := out.Sync(); err != nil {
		return n, fmt.Errorf("sync %s: %w", path, err)
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return n, fmt.Errorf("sync the directory of %s: %w", path, err)
	}
	return n, nil
}

func runImport(ctx context.Context, e *env, args []string) error {
	f := newFlags("import", e, true)
	pos, err := f.parse(args, 2, true)
	if err != nil {
		return err
	}
	fsys := vfs.NewOS()
	var readers []io.Reader
	for _, path := range pos[1:] {
		in, err := fsys.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		size, err := in.Size()
		if err != nil {
			return fmt.Errorf("size of %s: %w", path, err)
		}
		readers = append(readers, io.NewSectionReader(in, 0, size))
	}
	return withOpenStore(e, pos[0], false, func(s *segstore.Store) error {
		added, err := s.Import(ctx, readers...)
		if err != nil {
			return err
		}
		p := cliout.NewPrinter(e.stdout, f.json)
		p.Note("import: %d of %d streams adopted in one commit (the rest were already present)", len(added), len(readers))
		for _, sg := range added {
			if err := p.Print(segmentInfoRow(f, sg)); err != nil {
				return err
			}
		}
		return p.Flush()
	})
}

type recordRow struct {
	Generation uint64 `json:"generation"`
	manifestlog.RecordInfo
}

func (recordRow) Header() []string {
	return []string{"gen", "offset", "kind", "seq", "live", "next_id", "next_order", "segments", "removed", "group"}
}

func (r recordRow) Cells() []string {
	live := ""
	if r.Kind == "checkpoint" || r.SetsLive {
		live = strconv.FormatUint(r.LiveID, 10)
	}
	group := ""
	if r.Kind == "replica" {
		group = fmt.Sprintf("%d frames at %d", r.GroupFrames, r.GroupStart)
	}
	num := func(v uint64) string {
		if v == 0 && r.Kind != "checkpoint" && r.Kind != "edit" {
			return ""
		}
		return strconv.FormatUint(v, 10)
	}
	return []string{strconv.FormatUint(r.Generation, 10), strconv.FormatInt(r.Off, 10), r.Kind, num(r.Seq), live,
		num(r.NextID), num(r.NextOrder), ids(r.Segments), ids(r.Removed), group}
}

func ids(v []uint64) string {
	s := make([]string, len(v))
	for i, id := range v {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}

type generationRow struct {
	Generation       uint64  `json:"generation"`
	Path             string  `json:"path"`
	Size             int64   `json:"size"`
	Activated        bool    `json:"activated"`
	Seq              uint64  `json:"seq"`
	CheckpointSeq    uint64  `json:"checkpoint_seq"`
	Edits            int     `json:"edits"`
	Segments         int     `json:"segments"`
	LiveID           uint64  `json:"live_id"`
	End              int64   `json:"end"`
	TornBytes        int64   `json:"torn_bytes"`
	RestorableFrames []int64 `json:"restorable_frames,omitempty"`
	Error            string  `json:"error,omitempty"`
}

func (generationRow) Header() []string {
	return []string{"gen", "activated", "seq", "checkpoint_seq", "edits", "segments", "live", "size", "end", "torn_bytes", "error"}
}

func (r generationRow) Cells() []string {
	return []string{strconv.FormatUint(r.Generation, 10), strconv.FormatBool(r.Activated), strconv.FormatUint(r.Seq, 10),
		strconv.FormatUint(r.CheckpointSeq, 10), strconv.Itoa(r.Edits), strconv.Itoa(r.Segments),
		strconv.FormatUint(r.LiveID, 10), strconv.FormatInt(r.Size, 10), strconv.FormatInt(r.End, 10),
		strconv.FormatInt(r.TornBytes, 10), r.Error}
}

func runManifest(_ context.Context, e *env, args []string) error {
	f := newFlags("manifest", e, false)
	records := f.Bool("records", false, "list every record, not only each generation's summary")
	pos, err := f.parse(args, 1, false)
	if err != nil {
		return err
	}
	gens, err := manifestlog.Inspect(vfs.NewOS(), pos[0])
	if err != nil {
		return err
	}
	if len(gens) == 0 {
		return fmt.Errorf("%s holds no manifest (no MANIFEST-* file)", pos[0])
	}
	p := cliout.NewPrinter(e.stdout, f.json)
	damaged := false
	for _, g := range gens {
		row := generationRow{Generation: g.Generation, Path: g.Path, Size: g.Size, Activated: g.Activated,
			Seq: g.State.Seq, CheckpointSeq: g.CheckpointSeq, Edits: g.Edits, Segments: len(g.State.Segments),
			LiveID: g.State.LiveID, End: g.End, TornBytes: g.TornBytes, RestorableFrames: g.RestorableFrames}
		if g.Err != nil {
			row.Error = g.Err.Error()
			damaged = true
		}
		if err := p.Print(row); err != nil {
			return err
		}
		if len(g.RestorableFrames) > 0 {
			p.Note("generation %d: Open would restore the frames at %v from their replica", g.Generation, g.RestorableFrames)
		}
	}
	if *records {
		for _, g := range gens {
			for _, r := range g.Records {
				if err := p.Print(recordRow{Generation: g.Generation, RecordInfo: r}); err != nil {
					return err
				}
			}
		}
	}
	if err := p.Flush(); err != nil {
		return err
	}
	if damaged {
		return errReported
	}
	return nil
}
