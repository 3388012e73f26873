package peers

import (
	"context"
	"errors"
	"time"

	"github.com/segkv/segkv/segstore"
)

func init() {
	register(segkvEngine{})
	register(segkvEngine{raw: true})
}

// segkvEngine is segkv with its defaults, or (raw) with merged blocks
// stored uncompressed (Options.DisableCompression).
type segkvEngine struct{ raw bool }

func (e segkvEngine) Name() string {
	if e.raw {
		return "segkv-raw"
	}
	return "segkv"
}

func (e segkvEngine) Config(m Mode) string {
	common := "segkv (this tree) defaults: 64 MiB segments (preallocated live file), MaxOpenFiles 256, background merge on"
	if e.raw {
		common += ", DisableCompression (merged blocks stored raw)"
	}
	if m == Durable {
		return common + "; Sync=SyncAlways (group commit: one write + fdatasync per group)"
	}
	return common + "; Sync=SyncManual, one Apply per batch, Store.Sync after the last"
}

func (e segkvEngine) Open(dir string, m Mode) (DB, error) {
	opts := &segstore.Options{Sync: segstore.SyncAlways, DisableCompression: e.raw}
	if m == Bulk {
		opts.Sync = segstore.SyncManual
	}
	s, err := segstore.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return &segkvDB{s: s}, nil
}

type segkvDB struct{ s *segstore.Store }

// Settle seals the live file, so that every key is in a sealed segment, and
// waits until the background merge has nothing left to take.
func (d *segkvDB) Settle(ctx context.Context, poll time.Duration) error {
	if err := d.s.Seal(); err != nil {
		return err
	}
	return settle(ctx, poll, func() bool { return d.s.Metrics().MergeBacklog == 0 })
}

func (d *segkvDB) Put(k, v []byte) error { return d.s.Put(k, v) }

func (d *segkvDB) Batch(keys, values [][]byte, sync bool) error {
	b := d.s.NewBatch()
	for i := range keys {
		if err := b.Put(keys[i], values[i]); err != nil {
			return err
		}
	}
	if err := d.s.Apply(b); err != nil {
		return err
	}
	if sync {
		return d.s.Sync()
	}
	return nil
}

func (d *segkvDB) DeleteBatch(keys [][]byte, sync bool) error {
	b := d.s.NewBatch()
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	if err := d.s.Apply(b); err != nil {
		return err
	}
	if sync {
		return d.s.Sync()
	}
	return nil
}

func (d *segkvDB) Get(k, _ []byte) ([]byte, bool, error) {
	// Store.Get returns a value the caller owns; no copy needed.
	v, err := d.s.Get(k)
	if errors.Is(err, segstore.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (d *segkvDB) Scan(start []byte, n int, reverse bool, fn func(k, v []byte)) (int, error) {
	it, err := d.s.NewIterator(nil)
	if err != nil {
		return 0, err
	}
	var ok bool
	switch {
	case !reverse:
		ok = it.Seek(start)
	case start == nil:
		ok = it.Last()
	default:
		ok = it.SeekLT(start)
	}
	count := 0
	var v []byte
	for ; ok && count < n; count++ {
		// AppendValue reads and verifies the record and copies the value
		// into one buffer reused for the scan, as Pebble's adapter does.
		if v, err = it.AppendValue(v[:0]); err != nil {
			return count, errors.Join(err, it.Close())
		}
		fn(it.Key(), v)
		if reverse {
			ok = it.Prev()
		} else {
			ok = it.Next()
		}
	}
	return count, errors.Join(it.Err(), it.Close())
}

func (d *segkvDB) Close() error { return d.s.Close() }
