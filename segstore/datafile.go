package segstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// dataFile is the lifetime of one data file, live or sealed. The store's
// current segment list holds one pin on every file in it; snapshots,
// iterators and exports pin the files they can see. A file that a merge
// retired is removed (with its index) when its last pin is released, so no
// reader ever finds its file gone.
type dataFile struct {
	s       *Store
	id      uint64
	kind    segment.FileKind
	path    string
	pins    atomic.Int64
	retired atomic.Bool
	// filesMu orders the creation of the file's index by a seal's tidy job
	// and the removal of its files after it was retired.
	filesMu sync.Mutex

	// sealedLen is the file's length once it is part of a sealed segment
	// (0 while it is live): from then on [0, sealedLen) never changes.
	// Reads use a read-only mapping of the file, made on the first read
	// (see reader).
	sealedLen atomic.Int64
	mapped    atomic.Pointer[fileMap]
	mapMu     sync.Mutex
	// format is formatRecords or formatBlocks once known (blockread.go).
	format atomic.Uint32
	noMap  bool // mapMu held: mapping failed, is unsupported, or is over
	// indexes are the loaded indexes of the file's segment (mapMu held),
	// closed with the mapping when the last pin goes: a seal's heap index
	// is replaced by its file's mapping while readers may still use it, so
	// there can be more than one; released is set then.
	indexes  []*index.Index
	released bool
}

// fileMap is a read-only mapping of a data file.
type fileMap struct {
	data  []byte
	unmap func() error
}

// ReadAt reads from the mapping as a file read would.
func (m *fileMap) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("segkv: read at negative offset %d", off)
	}
	if off >= int64(len(m.data)) {
		return 0, io.EOF
	}
	n := copy(b, m.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (s *Store) newDataFile(id uint64, kind segment.FileKind) *dataFile {
	d := &dataFile{s: s, id: id, kind: kind, path: filepath.Join(s.dir, segment.DataName(id, kind))}
	d.pins.Store(1) // the store's own pin
	return d
}

func (d *dataFile) pin() { d.pins.Add(1) }

// unpin drops a pin. The count reaches zero only once the store's own pin
// is gone: the file was retired (it is removed), or the store closed (its
// mapping is released).
func (d *dataFile) unpin() {
	if d.pins.Add(-1) == 0 {
		d.unmap()
		if d.retired.Load() {
			d.remove()
		}
	}
}

// setSealed records that [0, length) of the file is final. Called when the
// segment is installed in the store's list (or loaded by Open).
func (d *dataFile) setSealed(length int64) { d.sealedLen.Store(length) }

// reader returns what reads of the file go through: its mapping (made now
// if this is the first read), else nil and the caller uses the file cache.
// A sealed file is mapped over its final length. A live file is mapped with
// a shared mapping (vfs.SharedMapper) over its current size, its
// preallocated segment size in the common case: the mapping shows records
// as they are written, and a record past its end (a file that could not be
// preallocated) is read with pread. Reads through either stay below the
// file's data length, so releasing a sealed file's preallocation, which
// shrinks the file under the mapping, never makes a read fault. The caller
// keeps d pinned or holds the store's mu, so the mapping cannot be released
// under it.
func (d *dataFile) reader() *fileMap {
	if m := d.mapped.Load(); m != nil {
		return m
	}
	return d.mapFile()
}

// mapFile is reader's slow path: the file is not mapped yet, or cannot be.
func (d *dataFile) mapFile() *fileMap {
	if d.s.opts.DisableMmap {
		return nil
	}
	d.mapMu.Lock()
	defer d.mapMu.Unlock()
	if m := d.mapped.Load(); m != nil || d.noMap {
		return m
	}
	// Whatever happens now, one attempt is enough: a file that cannot be
	// mapped is read with pread, as before.
	d.noMap = true
	f, err := d.s.fs.Open(d.path)
	if err != nil {
		d.s.log.Debug("segkv: cannot open data file to map it; reading with pread", slog.String("path", d.path), slog.Any("err", err))
		return nil
	}
	defer f.Close() // a mapping outlives its descriptor
	var data []byte
	var unmap func() error
	if size := d.sealedLen.Load(); size > 0 {
		mp, ok := f.(vfs.Mapper)
		if !ok {
			return nil
		}
		data, unmap, err = mp.Map(size)
	} else {
		mp, ok := f.(vfs.SharedMapper)
		if !ok {
			return nil
		}
		if size, err = f.Size(); err == nil && size > 0 {
			data, unmap, err = mp.MapShared(size)
		}
	}
	if err != nil || data == nil {
		d.s.log.Debug("segkv: cannot map data file; reading with pread", slog.String("path", d.path), slog.Any("err", err))
		return nil
	}
	m := &fileMap{data: data, unmap: unmap}
	d.mapped.Store(m)
	d.noMap = false
	return m
}

// unmap releases the mapping for good. Only when no reader can be using it:
// the last pin is gone.
func (d *dataFile) unmap() {
	d.mapMu.Lock()
	defer d.mapMu.Unlock()
	d.noMap = true
	d.released = true
	if m := d.mapped.Swap(nil); m != nil {
		if err := m.unmap(); err != nil {
			d.s.log.Warn("segkv: unmapping a data file failed", slog.String("path", d.path), slog.Any("err", err))
		}
	}
	for _, ix := range d.indexes {
		if err := ix.Close(); err != nil {
			d.s.log.Warn("segkv: unmapping an index failed", slog.String("path", d.path), slog.Any("err", err))
		}
	}
	d.indexes = nil
}

// holdIndex makes ix, an index of the file's segment, close when the file
// is released. If it already was, ix is closed now and holdIndex reports
// false: the caller must not use it.
func (d *dataFile) holdIndex(ix *index.Index) bool {
	d.mapMu.Lock()
	defer d.mapMu.Unlock()
	if d.released {
		_ = ix.Close() // read-only: nothing to lose
		return false
	}
	d.indexes = append(d.indexes, ix)
	return true
}

// retire marks the file as no longer part of the store and drops the
// store's pin: it goes when the last reader that can see it is done.
func (d *dataFile) retire() {
	d.retired.Store(true)
	d.unpin()
}

// remove deletes the data file and its index. A failure only leaves files
// that the next Open removes (the manifest no longer names them), so it is
// logged, not returned.
func (d *dataFile) remove() {
	d.filesMu.Lock()
	defer d.filesMu.Unlock()
	d.s.files.forget(d.id)
	for _, p := range []string{d.path, filepath.Join(d.s.dir, segment.IndexName(d.id))} {
		if err := d.s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.s.log.Warn("segkv: removing retired file failed; the next open removes it", slog.String("path", p), slog.Any("err", err))
		}
	}
	d.s.stats.filesRemoved.Add(1)
}

// pinSegments returns the installed segments, newest first, and the
// manifest seq of that list, each segment's file pinned until release is
// called: work outside mu can then read them even if a commit retires them
// meanwhile.
func (s *Store) pinSegments() (newestFirst []*sealed, seq uint64, release func()) {
	s.mu.RLock()
	newestFirst = slices.Clone(s.mu.segs)
	seq = s.mu.segsSeq
	for _, sg := range newestFirst {
		sg.df.pin()
	}
	s.mu.RUnlock()
	return newestFirst, seq, func() {
		for _, sg := range newestFirst {
			sg.df.unpin()
		}
	}
}
