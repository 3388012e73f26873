package peers

import (
	"context"
	"errors"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

func init() { register(pebbleEngine{}) }

type pebbleEngine struct{}

func (pebbleEngine) Name() string { return "pebble" }

func (pebbleEngine) Config(m Mode) string {
	const common = "pebble v2.1.7 defaults (8 MiB block cache, 4 MiB memtable, Snappy) + bloom.FilterPolicy(10) on every level"
	if m == Durable {
		return common + "; Set(k, v, pebble.Sync): one WAL fdatasync per commit group"
	}
	return common + "; Batch.Commit(pebble.NoSync), last batch pebble.Sync"
}

func (pebbleEngine) Open(dir string, _ Mode) (DB, error) {
	opts := &pebble.Options{Logger: quietLogger{name: "pebble"}}
	// Pebble has no filter by default; every serious deployment (CockroachDB
	// among them) sets a 10-bit bloom filter, and segkv has one, so a
	// missing-key comparison without it would be unfair to Pebble. Levels
	// below L0 inherit it (LevelOptions.EnsureL1PlusDefaults).
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return &pebbleDB{db: db}, nil
}

type pebbleDB struct{ db *pebble.DB }

func (p *pebbleDB) Put(k, v []byte) error { return p.db.Set(k, v, pebble.Sync) }

func (p *pebbleDB) Batch(keys, values [][]byte, sync bool) error {
	b := p.db.NewBatch()
	for i := range keys {
		if err := b.Set(keys[i], values[i], nil); err != nil {
			_ = b.Close() // the Set error is the one worth reporting
			return err
		}
	}
	wo := pebble.NoSync
	if sync {
		wo = pebble.Sync
	}
	if err := b.Commit(wo); err != nil {
		_ = b.Close()
		return err
	}
	return b.Close()
}

func (p *pebbleDB) DeleteBatch(keys [][]byte, sync bool) error {
	b := p.db.NewBatch()
	for _, k := range keys {
		if err := b.Delete(k, nil); err != nil {
			_ = b.Close() // the Delete error is the one worth reporting
			return err
		}
	}
	wo := pebble.NoSync
	if sync {
		wo = pebble.Sync
	}
	if err := b.Commit(wo); err != nil {
		_ = b.Close()
		return err
	}
	return b.Close()
}

func (p *pebbleDB) Get(k, dst []byte) ([]byte, bool, error) {
	v, closer, err := p.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	// v is only valid until closer.Close; copy it as any caller must.
	dst = append(dst[:0], v...)
	return dst, true, closer.Close()
}

func (p *pebbleDB) Scan(start []byte, n int, reverse bool, fn func(k, v []byte)) (int, error) {
	it, err := p.db.NewIter(nil)
	if err != nil {
		return 0, err
	}
	var ok bool
	// Pebble's invariants builds (-race) index key[0] in seeks, so the empty
	// key is answered without one: every key is >= it, none is < it.
	switch {
	case !reverse && len(start) == 0:
		ok = it.First()
	case !reverse:
		ok = it.SeekGE(start)
	case start == nil:
		ok = it.Last()
	case len(start) == 0:
		ok = false
	default:
		ok = it.SeekLT(start)
	}
	count := 0
	for ; ok && count < n; count++ {
		// Key and value are valid until the next move.
		v, err := it.ValueAndErr()
		if err != nil {
			return count, errors.Join(err, it.Close())
		}
		fn(it.Key(), v)
		if reverse {
			ok = it.Prev()
		} else {
			ok = it.Next()
		}
	}
	// Close returns the iterator's accumulated error.
	return count, it.Close()
}

func (p *pebbleDB) Close() error { return p.db.Close() }

// Settle flushes the memtable, so that every key is in a table, and waits
// until no flush or compaction has run for a second (ten polls of 100 ms).
// Pebble's EstimatedDebt is not the signal: it can stay above zero with no
// compaction ever picked (a 30-minute wait for it to reach zero timed out
// at 20M keys).
func (p *pebbleDB) Settle(ctx context.Context, poll time.Duration) error {
	if err := p.db.Flush(); err != nil {
		return err
	}
	quiet := 0
	return settle(ctx, poll, func() bool {
		m := p.db.Metrics()
		if m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0 {
			quiet++
		} else {
			quiet = 0
		}
		return quiet >= 10
	})
}
