package peers

import (
	"bytes"
	"errors"

	"github.com/dgraph-io/badger/v4"
)

func init() { register(badgerEngine{}) }

type badgerEngine struct{}

func (badgerEngine) Name() string { return "badger" }

func (badgerEngine) Config(m Mode) string {
	const common = "badger v4.9.6 DefaultOptions (256 MiB block cache, no index cache, 64 MiB memtables x5, bloom fp 0.01, Snappy; ValueThreshold 1 MiB so 100 B values stay in the LSM)"
	if m == Durable {
		return common + "; SyncWrites=true, one Update txn per put"
	}
	return common + "; SyncWrites=false, one WriteBatch+Flush per batch, DB.Sync after the last"
}

func (badgerEngine) Open(dir string, m Mode) (DB, error) {
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(m == Durable).
		WithLogger(quietLogger{name: "badger"})
	db, err := badger.Open(opts)
	if err != nil {
		return nil, err
	}
	return &badgerDB{db: db}, nil
}

type badgerDB struct{ db *badger.DB }

func (b *badgerDB) Put(k, v []byte) error {
	return b.db.Update(func(txn *badger.Txn) error { return txn.Set(k, v) })
}

func (b *badgerDB) Batch(keys, values [][]byte, sync bool) error {
	wb := b.db.NewWriteBatch()
	for i := range keys {
		if err := wb.Set(keys[i], values[i]); err != nil {
			wb.Cancel()
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if sync {
		// Badger's WriteBatch has no per-commit sync switch; DB.Sync syncs the
		// value log and the memtable WAL.
		return b.db.Sync()
	}
	return nil
}

func (b *badgerDB) DeleteBatch(keys [][]byte, sync bool) error {
	wb := b.db.NewWriteBatch()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			wb.Cancel()
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if sync {
		return b.db.Sync()
	}
	return nil
}

func (b *badgerDB) Get(k, dst []byte) ([]byte, bool, error) {
	found := false
	err := b.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if err != nil {
			return err
		}
		found = true
		// The item's value is valid only inside the transaction.
		dst, err = item.ValueCopy(dst[:0])
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	return dst, found, err
}

func (b *badgerDB) Scan(start []byte, n int, reverse bool, fn func(k, v []byte)) (int, error) {
	if reverse && start != nil && len(start) == 0 {
		return 0, nil // no key is < "" (and Seek would take it for nil)
	}
	count := 0
	err := b.db.View(func(txn *badger.Txn) error {
		// DefaultIteratorOptions prefetch the values of the next 100 items,
		// which Badger's docs recommend when the values will be read.
		opts := badger.DefaultIteratorOptions
		opts.Reverse = reverse
		it := txn.NewIterator(opts)
		defer it.Close()
		// Seek(nil) rewinds: the first key, or the last one in reverse.
		// In reverse Seek lands on the last key <= start; step past start.
		it.Seek(start)
		if reverse && start != nil && it.Valid() && bytes.Equal(it.Item().Key(), start) {
			it.Next()
		}
		for ; it.Valid() && count < n; it.Next() {
			item := it.Item()
			// Key and value are valid only until the next move (and the
			// value only inside the callback).
			if err := item.Value(func(v []byte) error {
				fn(item.Key(), v)
				return nil
			}); err != nil {
				return err
			}
			count++
		}
		return nil
	})
	return count, err
}

func (b *badgerDB) Close() error { return b.db.Close() }
