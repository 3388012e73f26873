package segstore

import (
	"bytes"
	"fmt"
	"path/filepath"

	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/rangedel"
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
	ixData, ixSum, err := index.EncodeWithRanges(entries, ranges, ident)
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
	return &sealed{meta: meta, df: df, ix: ix}, ixData, nil
}

// writeIndexFile writes a segment's index file without syncing it: a lost or
// torn index is rebuilt from the data file, so a failure is only logged.
func (s *Store) writeIndexFile(id uint64, data []byte) {
	p := filepath.Join(s.dir, segment.IndexName(id))
	if err := index.Write(s.fs, p, data); err != nil {
		s.log.Warn("segkv: index write failed; it will be rebuilt on open", "path", p, "err", err)
	}
}

// digestWriter writes a data file front to back (merge and import outputs),
// hashing what it writes: the content digest without a second read.
type digestWriter struct {
	f    vfs.File
	path string
	off  int64
	h    *xxhash.Digest
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

// finish makes the file durable and closes it. The directory entry is the
// caller's: one directory sync can cover several new files.
func (w *digestWriter) finish() (length int64, digest uint64, err error) {
	if err := w.f.Sync(); err != nil {
		return 0, 0, fmt.Errorf("segkv: sync %s: %w", w.path, err)
	}
	if err := w.f.Close(); err != nil {
		return 0, 0, fmt.Errorf("segkv: close %s: %w", w.path, err)
	}
	return w.off, w.h.Sum64(), nil
}
