package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/recovery"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// buildSegment encodes the index of a complete data file (entries sorted,
// one per key, and the union of its range tombstones), decodes it for readers and fills in the manifest entry. It
// writes nothing: the caller decides when the index file is written (it is
// never synced) and commits the entry. Order 0 means "assign at commit".
func (s *Store) buildSegment(df *dataFile, length int64, digest uint64, entries []index.Entry, ranges *rangedel.Set, records uint64, order uint64) (*sealed, []byte, error) {
	if s.hooks.beforeBuild != nil {
		if err := s.hooks.beforeBuild(df.path); err != nil {
			return nil, nil, fmt.Errorf("segkv: build index of %s: %w", df.path, err)
		}
	}
	ident := index.Identity{DataLength: length, DataDigest: digest}
	encode := index.EncodeWithRanges
	if df.format.Load() == formatBlocks {
		// An imported block file (an import knows its format): an index
		// entry per block. (A dense index of a block file would read
		// correctly too, and a file whose format is not known yet is a
		// sealed live file, whose records are not in blocks.)
		encode = index.EncodeBlockFile
	}
	ixData, ixSum, err := encode(entries, ranges, ident)
	if err != nil {
		return nil, nil, fmt.Errorf("segkv: encode index of %s: %w", df.path, err)
	}
	ix, err := index.Decode(filepath.Join(s.dir, segment.IndexName(df.id)), ixData, ixSum, ident)
	if err != nil {
		return nil, nil, fmt.Errorf("segkv: decode fresh index of %s: %w", df.path, err)
	}
	meta := manifestlog.SegmentMeta{
		ID: df.id, FileKind: df.kind, Order: order,
		DataLength: length, DataDigest: digest, IndexChecksum: ixSum,
		Records: records, Keys: uint64(len(entries)),
	}
	if len(entries) > 0 {
		meta.MinKey = bytes.Clone(entries[0].Key)
		meta.MaxKey = bytes.Clone(entries[len(entries)-1].Key)
	}
	return newSealed(meta, df, ix), ixData, nil
}

// buildOrderedSegment writes the index file of a complete data file whose
// point records are in key order (see index.WriteOrdered), loads it and
// fills in the manifest entry. keys, first and last are the point records'
// count and first and last keys, which the file's writer knows. On an error
// no index file is left behind; the data file is the caller's.
func (s *Store) buildOrderedSegment(ctx context.Context, df *dataFile, length int64, digest uint64, keys int, first, last []byte, records uint64, order uint64) (*sealed, error) {
	if s.hooks.beforeBuild != nil {
		if err := s.hooks.beforeBuild(df.path); err != nil {
			return nil, fmt.Errorf("segkv: build index of %s: %w", df.path, err)
		}
	}
	ident := index.Identity{DataLength: length, DataDigest: digest}
	p := filepath.Join(s.dir, segment.IndexName(df.id))
	sum, err := index.WriteOrdered(ctx, s.fs, df.path, p, index.WriterParams{
		Count: keys, FirstKey: first, LastKey: last, ID: ident,
	})
	if err != nil {
		return nil, fmt.Errorf("segkv: write index of %s: %w", df.path, err)
	}
	meta := manifestlog.SegmentMeta{
		ID: df.id, FileKind: df.kind, Order: order,
		DataLength: length, DataDigest: digest, IndexChecksum: sum,
		Records: records, Keys: uint64(keys),
	}
	if keys > 0 {
		meta.MinKey = bytes.Clone(first)
		meta.MaxKey = bytes.Clone(last)
	}
	ix, err := index.Load(s.fs, p, sum, ident, s.indexLoadOptions(meta))
	if err != nil {
		if rerr := s.fs.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			s.log.Warn("segkv: removing an unreadable new index failed", slog.String("path", p), slog.Any("err", rerr))
		}
		return nil, fmt.Errorf("segkv: read back index of %s: %w", df.path, err)
	}
	if !df.holdIndex(ix) {
		return nil, fmt.Errorf("segkv: index of %s: %w", df.path, ErrClosed)
	}
	return newSealed(meta, df, ix), nil
}

// writeIndexFile writes a segment's index file without syncing it (a lost or
// torn index is rebuilt from the data file, so a failure is only logged),
// then makes the segment read its index through the file's mapping instead
// of the heap copy its build decoded: sealed segments then cost the heap
// only their index's per-block words, however many there are.
func (s *Store) writeIndexFile(sg *sealed, data []byte) {
	p := filepath.Join(s.dir, segment.IndexName(sg.df.id))
	if err := index.Write(s.fs, p, data); err != nil {
		// A cache: the next Open rebuilds it.
		s.backgroundError("index-write", fmt.Errorf("segkv: write index %s: %w", p, err))
		return
	}
	if s.opts.DisableMmap {
		return // the heap copy is what a load would make
	}
	id := index.Identity{DataLength: sg.meta.DataLength, DataDigest: sg.meta.DataDigest}
	ix, err := index.Load(s.fs, p, sg.meta.IndexChecksum, id, s.indexLoadOptions(sg.meta))
	if err != nil {
		// Written but not readable back: keep the heap copy; the next Open
		// rebuilds the file.
		s.log.Warn("segkv: reading back a new index failed; keeping it in memory", slog.String("path", p), slog.Any("err", err))
		return
	}
	if sg.df.holdIndex(ix) {
		sg.ix.Store(ix)
	}
}

// indexLoadOptions are the load options of segment m's index: its repair
// and the report of each repair.
func (s *Store) indexLoadOptions(m manifestlog.SegmentMeta) index.LoadOptions {
	return index.LoadOptions{NoMap: s.opts.DisableMmap, Repair: s.indexRepair(m), Repaired: s.indexRepaired(m)}
}

// indexRepaired returns the function that reports each repair of segment
// m's index to the IndexRebuilt listener. The index calls it once its
// repair lock is released, so the listener may read the store, the
// repaired index included.
func (s *Store) indexRepaired(m manifestlog.SegmentMeta) func(cause, err error, took time.Duration) {
	p := filepath.Join(s.dir, segment.IndexName(m.ID))
	return func(cause, err error, took time.Duration) {
		s.indexRebuilt(IndexRebuildInfo{SegmentID: m.ID, Path: p, Reason: cause.Error(), Duration: took, Err: err})
	}
}

// indexRepair returns the function with which segment m's index heals
// damage found after it was loaded: it rebuilds the index file from the
// data file, checked against the manifest like a rebuild at Open, puts it in
// place of the damaged one (whose mapping stays valid meanwhile) and loads
// it, from where the damaged index answers from then on. If the file cannot
// be written, the rebuilt index is decoded in the heap instead and the
// damaged file removed, so that the next Open rebuilds it. An index holds no
// data, so nothing is lost either way.
func (s *Store) indexRepair(m manifestlog.SegmentMeta) func(cause error) (*index.Index, error) {
	return func(cause error) (ix *index.Index, err error) {
		s.stats.indexRebuilds.Add(1)
		p := filepath.Join(s.dir, segment.IndexName(m.ID))
		s.log.Warn("segkv: index damaged; rebuilding it from the data file", slog.String("index", p), slog.Any("err", cause))
		if s.opts.ReadOnly {
			// Nothing is written: the rebuilt index lives in the heap.
			return recovery.RebuildIndexInMemory(s.fs, s.dir, m)
		}
		id := index.Identity{DataLength: m.DataLength, DataDigest: m.DataDigest}
		err = recovery.RebuildIndexFile(s.fs, s.dir, m)
		if err == nil {
			if ix, err = index.Load(s.fs, p, m.IndexChecksum, id, index.LoadOptions{NoMap: s.opts.DisableMmap}); err == nil {
				return ix, nil
			}
		}
		s.log.Warn("segkv: writing a rebuilt index failed; keeping it in memory", slog.String("index", p), slog.Any("err", err))
		data, err := recovery.RebuildIndex(s.fs, s.dir, m)
		if err != nil {
			s.log.Error("segkv: rebuilding a damaged index failed", slog.String("index", p), slog.Any("err", err))
			return nil, err
		}
		ix, err = index.Decode(p, data, m.IndexChecksum, id)
		if err != nil {
			return nil, err
		}
		if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("segkv: removing a damaged index failed", slog.String("index", p), slog.Any("err", err))
		}
		return ix, nil
	}
}

// digestWriter writes a data file front to back (merge and import outputs),
// hashing what it writes: the content digest without a second read.
type digestWriter struct {
	f      vfs.File
	path   string
	off    int64
	h      *xxhash.Digest
	closed bool // finish closed f (even if it failed): discard must not close it again
}

func newDigestWriter(f vfs.File, path string) *digestWriter {
	return &digestWriter{f: f, path: path, h: xxhash.New()}
}

func (w *digestWriter) write(b []byte) error {
	if _, err := w.f.WriteAt(b, w.off); err != nil {
		return fmt.Errorf("segkv: write %s at %d: %w", w.path, w.off, err)
	}
	w.h.Write(b)
	w.off += int64(len(b))
	return nil
}

// startWriteback asks the file system to start writing [off, off+n) to
// the device, where it can (vfs.WritebackStarter): a hint, so a failure is
// ignored.
func (w *digestWriter) startWriteback(off, n int64) {
	if ws, ok := w.f.(vfs.WritebackStarter); ok {
		_ = ws.StartWriteback(off, n)
	}
}

// finish makes the file durable and closes it. The directory entry is the
// caller's: one directory sync can cover several new files.
func (w *digestWriter) finish() (length int64, digest uint64, err error) {
	if err := w.f.Sync(); err != nil {
		return 0, 0, fmt.Errorf("segkv: sync %s: %w", w.path, err)
	}
	w.closed = true
	if err := w.f.Close(); err != nil {
		return 0, 0, fmt.Errorf("segkv: close %s: %w", w.path, err)
	}
	return w.off, w.h.Sum64(), nil
}

// discard abandons the file after a failure, before or after finish: it is
// closed if finish has not closed it, and removed. Nothing names it yet, so
// it holds no acknowledged data (and the next Open would remove it anyway).
func (w *digestWriter) discard(fsys vfs.FS) {
	if !w.closed {
		w.closed = true
		w.f.Close()
	}
	fsys.Remove(w.path)
}
