package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/segkv/segkv/internal/cliout"
	"github.com/segkv/segkv/manifestlog"
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
	pos := f.Args()
	for _, a := range pos {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			return nil, usagef("flag %s after the arguments: flags go first", a)
		}
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

// openStore opens an existing store: never creates one. Repairs that
// recovery makes go to stderr as they happen (the store logs them at WARN).
func openStore(e *env, dir string, mergeOff bool) (*segstore.Store, error) {
	names, err := vfs.NewOS().List(dir)
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
		return nil, fmt.Errorf("%s holds no segkv store (no MANIFEST-* file)", dir)
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := segstore.Open(dir, &segstore.Options{Logger: logger, Merge: segstore.MergeOptions{Disable: mergeOff}})
	if errors.Is(err, segstore.ErrLocked) {
		return nil, fmt.Errorf("%w (another process has the store open; segctl manifest can still read it)", err)
	}
	return s, err
}

// withStore runs fn on the store in dir and closes it, joining the errors.
func withStore(e *env, dir string, fn func(*segstore.Store) error) (err error) {
	s, err := openStore(e, dir, true)
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
		if !rep.Repaired() {
			rows = append(rows, metricRow{"recovery", "nothing to repair"})
		}
		for _, t := range rep.TornTails {
			rows = append(rows, metricRow{"recovery", fmt.Sprintf("torn tail of %s truncated at offset %d (%d bytes dropped)", t.Path, t.Offset, t.Bytes)})
		}
		for _, r := range rep.RemovedFiles {
			rows = append(rows, metricRow{"recovery", "removed " + r})
		}
		for _, r := range rep.RebuiltIndexes {
			rows = append(rows, metricRow{"recovery", "rebuilt index " + r})
		}
		for _, r := range rep.DroppedChain {
			rows = append(rows, metricRow{"recovery", "dropped live continuation " + r})
		}
		m := s.Metrics()
		rows = append(rows, []metricRow{
			{"manifest seq", strconv.FormatUint(s.ManifestSeq(), 10)},
			{"sealed segments", strconv.Itoa(m.Segments)},
			{"sealed bytes", strconv.FormatInt(m.SegmentBytes, 10)},
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
	return []string{"id", "size", "records", "keys", "order", "added_seq", "digest", "min_key", "max_key"}
}

func (r segmentRow) Cells() []string {
	return []string{strconv.FormatUint(r.ID, 10), strconv.FormatInt(r.Size, 10),
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
			if err := p.Print(segmentInfoRow(f, sg)); err != nil {
				return err
			}
		}
		if len(segs) == 0 {
			p.Note("no sealed segments")
		}
		return p.Flush()
	})
}

func segmentInfoRow(f *flags, sg segstore.SegmentInfo) segmentRow {
	return segmentRow{ID: sg.ID, Size: sg.Size, Records: sg.Records, Keys: sg.Keys,
		Order: sg.Order, AddedSeq: sg.AddedSeq, Digest: fmt.Sprintf("%016x", sg.Digest),
		MinKey: f.text(sg.MinKey), MaxKey: f.text(sg.MaxKey)}
}

func runGet(_ context.Context, e *env, args []string) error {
	f := newFlags("get", e, true)
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
			_, err = e.stdout.Write(v) // the value as stored, byte for byte
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
		// no table alignment here.
		w := e.stdout
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
		return it.Err()
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

func runVerify(ctx context.Context, e *env, args []string) error {
	f := newFlags("verify", e, false)
	pos, err := f.parse(args, 1, false)
	if err != nil {
		return err
	}
	return withStore(e, pos[0], func(s *segstore.Store) error {
		prog := e.progress()
		prog.Update("verify: reading %d sealed segments", len(s.Segments()))
		rep, err := s.Verify(ctx)
		prog.Done()
		if err != nil {
			return err
		}
		p := cliout.NewPrinter(e.stdout, f.json)
		p.Note("verify: %d sealed segments, %d bytes read, %d damaged", rep.Segments, rep.Bytes, len(rep.Damaged))
		for _, d := range rep.Damaged {
			if err := p.Print(damageRow{d.Error()}); err != nil {
				return err
			}
		}
		checkErr := s.Check()
		if checkErr != nil {
			if err := p.Print(damageRow{"check: " + checkErr.Error()}); err != nil {
				return err
			}
		} else {
			p.Note("check: the store is consistent")
		}
		if err := p.Flush(); err != nil {
			return err
		}
		if len(rep.Damaged) > 0 || checkErr != nil {
			return errReported
		}
		return nil
	})
}

func runCompact(ctx context.Context, e *env, args []string) error {
	f := newFlags("compact", e, false)
	pos, err := f.parse(args, 1, false)
	if err != nil {
		return err
	}
	s, err := openStore(e, pos[0], false)
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
	pos, err := f.parse(args, 3, false)
	if err != nil {
		return err
	}
	id, err := strconv.ParseUint(pos[1], 10, 64)
	if err != nil {
		return usagef("segment id %q: %v", pos[1], err)
	}
	return withStore(e, pos[0], func(s *segstore.Store) error {
		if pos[2] == "-" {
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
	return withStore(e, pos[0], func(s *segstore.Store) error {
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
