package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// importRow is one way of importing the same N segments.
type importRow struct {
	Mode         string  `json:"mode"` // "batch": one Import of N; "single": N Imports of one
	Segments     int     `json:"segments"`
	Imports      int     `json:"imports"` // Import calls
	TotalMS      float64 `json:"total_ms"`
	USPerSegment float64 `json:"us_per_segment"`
	// From the store and the counting vfs, over the imports only.
	ManifestCommits      uint64 `json:"manifest_commits"`
	Fsyncs               int64  `json:"fsyncs"` // file and directory syncs
	Dirsyncs             int64  `json:"dirsyncs"`
	Renames              int64  `json:"renames"`
	ManifestBytesWritten int64  `json:"manifest_bytes_written"`
}

func (importRow) Header() []string {
	return []string{"mode", "segments", "imports", "total ms", "us/segment", "manifest commits", "fsyncs", "dirsyncs", "renames", "manifest B written"}
}

func (r importRow) Cells() []string {
	return []string{r.Mode, itoa(r.Segments), itoa(r.Imports), ftoa(r.TotalMS, 1), ftoa(r.USPerSegment, 0), itoa(r.ManifestCommits),
		itoa(r.Fsyncs), itoa(r.Dirsyncs), itoa(r.Renames), itoa(r.ManifestBytesWritten)}
}

// importRatioRow is single divided by batch.
type importRatioRow struct {
	Mode            string  `json:"mode"` // "ratio"
	Segments        int     `json:"segments"`
	TotalMS         float64 `json:"total_ms"`
	Fsyncs          float64 `json:"fsyncs"`
	ManifestCommits float64 `json:"manifest_commits"`
}

func (importRatioRow) Header() []string {
	return []string{"single/batch", "segments", "total ms", "fsyncs", "manifest commits"}
}

func (r importRatioRow) Cells() []string {
	return []string{r.Mode, itoa(r.Segments), ftoa(r.TotalMS, 2), ftoa(r.Fsyncs, 2), ftoa(r.ManifestCommits, 2)}
}

func runImport(ctx context.Context, e *env, args []string) error {
	var c common
	fs := newFlagSet("import", e)
	c.register(fs, true)
	segments := fs.Int("segments", 100, "segments to export and import")
	records := fs.Int("records", 10, "records per segment (32-byte keys, 100-byte values)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if *segments < 1 {
		return usagef("-segments must be at least 1, not %d", *segments)
	}
	if *records < 1 {
		return usagef("-records must be at least 1, not %d", *records)
	}
	ws, err := c.open()
	if err != nil {
		return err
	}
	defer ws.cleanup()
	stop, err := c.startProfiles()
	if err != nil {
		return err
	}
	rows, err := importBench(ctx, ws, *segments, *records, e.progress())
	if serr := stop(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	p := newPrinter(e.stdout, c.json)
	if err := p.Note("segbench import: %d segments of %d records, in %s", *segments, *records, ws.desc); err != nil {
		return err
	}
	for _, r := range rows {
		if err := p.Print(r); err != nil {
			return err
		}
	}
	if err := p.Flush(); err != nil {
		return err
	}
	return ws.cleanup()
}

// importBench seals n segments in a source store, exports them to memory
// (untimed), then imports them into two fresh stores: all in one Import
// call, and one call per segment.
func importBench(ctx context.Context, ws *workspace, n, records int, prog *progress) ([]row, error) {
	exports, err := exportSegments(ctx, ws.newFS(), filepath.Join(ws.root, "source"), n, records, prog)
	if err != nil {
		return nil, err
	}
	batch, err := importInto(ctx, ws.newFS(), filepath.Join(ws.root, "batch"), exports, true, prog)
	if err != nil {
		return nil, fmt.Errorf("batch import: %w", err)
	}
	single, err := importInto(ctx, ws.newFS(), filepath.Join(ws.root, "single"), exports, false, prog)
	if err != nil {
		return nil, fmt.Errorf("single imports: %w", err)
	}
	prog.Done()
	return []row{batch, single, importRatioRow{
		Mode:            "ratio",
		Segments:        n,
		TotalMS:         ratio(single.TotalMS, batch.TotalMS),
		Fsyncs:          ratio(float64(single.Fsyncs), float64(batch.Fsyncs)),
		ManifestCommits: ratio(float64(single.ManifestCommits), float64(batch.ManifestCommits)),
	}}, nil
}

func exportSegments(ctx context.Context, fs vfs.FS, dir string, n, records int, prog *progress) ([][]byte, error) {
	// SyncManual: building the source is not what is measured.
	src, err := segstore.Open(dir, &segstore.Options{FS: fs, Sync: segstore.SyncManual, Merge: segstore.MergeOptions{Disable: true}})
	if err != nil {
		return nil, fmt.Errorf("open source store: %w", err)
	}
	defer src.Close()
	key := make([]byte, 32)
	value := make([]byte, 100)
	for s := range n {
		for r := range records {
			putKey(key, s, r)
			if err := src.Put(key, value); err != nil {
				return nil, fmt.Errorf("source put: %w", err)
			}
		}
		if err := src.Seal(); err != nil {
			return nil, fmt.Errorf("source seal: %w", err)
		}
		prog.Update("import: sealing source %d/%d", s+1, n)
	}
	infos := src.Segments()
	if len(infos) != n {
		return nil, fmt.Errorf("source store has %d segments, want %d", len(infos), n)
	}
	out := make([][]byte, 0, n)
	for _, info := range infos {
		var buf bytes.Buffer
		if _, err := src.Export(ctx, info.ID, &buf); err != nil {
			return nil, fmt.Errorf("export segment %d: %w", info.ID, err)
		}
		out = append(out, buf.Bytes())
	}
	if err := src.Close(); err != nil {
		return nil, fmt.Errorf("close source store: %w", err)
	}
	return out, nil
}

func importInto(ctx context.Context, base vfs.FS, dir string, exports [][]byte, batch bool, prog *progress) (importRow, error) {
	cnt := vfs.NewCounting(base)
	st, err := segstore.Open(dir, &segstore.Options{FS: cnt, Merge: segstore.MergeOptions{Disable: true}})
	if err != nil {
		return importRow{}, fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	// Let the background spare file settle, so its barriers are not charged
	// to the import.
	waitSpare(ctx, st)
	cnt.Reset()
	seq0 := st.Metrics().ManifestSeq

	readers := make([]io.Reader, len(exports))
	for i, b := range exports {
		readers[i] = bytes.NewReader(b)
	}
	mode, calls := "single", len(exports)
	start := time.Now()
	if batch {
		mode, calls = "batch", 1
		if _, err := st.Import(ctx, readers...); err != nil {
			return importRow{}, err
		}
	} else {
		for i, r := range readers {
			if _, err := st.Import(ctx, r); err != nil {
				return importRow{}, fmt.Errorf("import %d: %w", i, err)
			}
			prog.Update("import: single %d/%d", i+1, len(readers))
		}
	}
	elapsed := time.Since(start)
	k := cnt.Counts()
	m := st.Metrics()
	if m.Segments != len(exports) {
		return importRow{}, fmt.Errorf("store has %d segments after import, want %d", m.Segments, len(exports))
	}
	var manifestW int64
	for name, b := range k.BytesWritten {
		if isManifest(name) {
			manifestW += b
		}
	}
	return importRow{
		Mode: mode, Segments: len(exports), Imports: calls,
		TotalMS:              round(float64(elapsed)/float64(time.Millisecond), 1),
		USPerSegment:         round(float64(elapsed)/float64(time.Microsecond)/float64(len(exports)), 0),
		ManifestCommits:      m.ManifestSeq - seq0,
		Fsyncs:               k.Syncs + k.DirSyncs,
		Dirsyncs:             k.DirSyncs,
		Renames:              k.Renames,
		ManifestBytesWritten: manifestW,
	}, st.Close()
}

// waitSpare waits up to a second for a fresh store's background spare live
// file (the store makes one at open).
func waitSpare(ctx context.Context, st *segstore.Store) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		m := st.Metrics()
		if m.SparesMade-m.Seals >= 2 {
			return
		}
		if sleepCtx(ctx, 200*time.Microsecond) != nil {
			return
		}
	}
}
