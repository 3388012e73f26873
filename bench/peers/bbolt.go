package peers

import (
	"errors"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

func init() { register(bboltEngine{}) }

var bboltBucket = []byte("kv")

type bboltEngine struct{}

func (bboltEngine) Name() string { return "bbolt" }

func (bboltEngine) Config(m Mode) string {
	const common = "bbolt v1.5.0 defaults (mmap, array freelist, freelist synced), one bucket"
	if m == Durable {
		return common + "; NoSync=false, one Update txn per put (bbolt serialises writers: no group commit)"
	}
	return common + "; NoSync=true, one Update txn per batch, DB.Sync after the last"
}

func (bboltEngine) Open(dir string, m Mode) (DB, error) {
	db, err := bolt.Open(filepath.Join(dir, "bolt.db"), 0o600, &bolt.Options{NoSync: m == Bulk})
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bboltBucket)
		return err
	}); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return &bboltDB{db: db}, nil
}

type bboltDB struct{ db *bolt.DB }

func (b *bboltDB) Put(k, v []byte) error {
	return b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bboltBucket).Put(k, v) })
}

func (b *bboltDB) Batch(keys, values [][]byte, sync bool) error {
	if err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bboltBucket)
		for i := range keys {
			if err := bk.Put(keys[i], values[i]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if sync {
		return b.db.Sync()
	}
	return nil
}

func (b *bboltDB) DeleteBatch(keys [][]byte, sync bool) error {
	if err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bboltBucket)
		for _, k := range keys {
			if err := bk.Delete(k); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if sync {
		return b.db.Sync()
	}
	return nil
}

func (b *bboltDB) Get(k, dst []byte) ([]byte, bool, error) {
	found := false
	err := b.db.View(func(tx *bolt.Tx) error {
		// The value points into the mmap and is valid only inside the txn.
		if v := tx.Bucket(bboltBucket).Get(k); v != nil {
			found = true
			dst = append(dst[:0], v...)
		}
		return nil
	})
	if !found {
		dst = nil
	}
	return dst, found, err
}

func (b *bboltDB) Scan(start []byte, n int, reverse bool, fn func(k, v []byte)) (int, error) {
	count := 0
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bboltBucket).Cursor()
		var k, v []byte
		switch {
		case !reverse:
			k, v = c.Seek(start)
		case start == nil:
			k, v = c.Last()
		default:
			if k, _ = c.Seek(start); k != nil {
				k, v = c.Prev() // the last key < start
			} else {
				k, v = c.Last() // every key is < start
			}
		}
		for ; k != nil && count < n; count++ {
			// Key and value point into the mmap, valid inside the txn.
			fn(k, v)
			if reverse {
				k, v = c.Prev()
			} else {
				k, v = c.Next()
			}
		}
		return nil
	})
	return count, err
}

func (b *bboltDB) Close() error { return b.db.Close() }
