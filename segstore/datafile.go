package segstore

import (
	"errors"
	"io/fs"
	"path/filepath"
	"sync/atomic"

	"github.com/segkv/segkv/segment"
)

// dataFile is the lifetime of one data file, live or sealed. The store's
// current segment list holds one pin on every file in it; snapshots,
// iterators and exports pin the files they can see. A file that a merge
// retired is removed (with its index) when its last pin is released, so no
// reader ever finds its file gone.
type dataFile struct {
	s       *Store
	id      uint64
	kind    uint8
	path    string
	pins    atomic.Int64
	retired atomic.Bool
}

func (s *Store) newDataFile(id uint64, kind uint8) *dataFile {
	d := &dataFile{s: s, id: id, kind: kind, path: filepath.Join(s.dir, segment.DataName(id, kind))}
	d.pins.Store(1) // the store's own pin
	return d
}

func (d *dataFile) pin() { d.pins.Add(1) }

func (d *dataFile) unpin() {
	if d.pins.Add(-1) == 0 && d.retired.Load() {
		d.remove()
	}
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
	d.s.files.forget(d.id)
	for _, p := range []string{d.path, filepath.Join(d.s.dir, segment.IndexName(d.id))} {
		if err := d.s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.s.log.Warn("segkv: removing retired file failed; the next open removes it", "path", p, "err", err)
		}
	}
	d.s.stats.filesRemoved.Add(1)
}
