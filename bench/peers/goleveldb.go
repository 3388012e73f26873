package peers

import (
	"errors"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/filter"
	"github.com/syndtr/goleveldb/leveldb/opt"
)

func init() { register(goleveldbEngine{}) }

type goleveldbEngine struct{}

func (goleveldbEngine) Name() string { return "goleveldb" }

func (goleveldbEngine) Config(m Mode) string {
	const common = "goleveldb 2022-07 (126854af) defaults (8 MiB block cache, 4 MiB write buffer, Snappy) + bloom filter 10 bits/key"
	if m == Durable {
		return common + "; Put with WriteOptions{Sync: true} (write merging = group commit)"
	}
	return common + "; Write(batch) without sync, last batch Sync: true"
}

func (goleveldbEngine) Open(dir string, _ Mode) (DB, error) {
	// Like Pebble, goleveldb has no filter unless asked; the brief's reference
	// figures were taken with one.
	db, err := leveldb.OpenFile(dir, &opt.Options{Filter: filter.NewBloomFilter(10)})
	if err != nil {
		return nil, err
	}
	return &goleveldbDB{db: db}, nil
}

type goleveldbDB struct{ db *leveldb.DB }

var syncWrite = &opt.WriteOptions{Sync: true}

func (g *goleveldbDB) Put(k, v []byte) error { return g.db.Put(k, v, syncWrite) }

func (g *goleveldbDB) Batch(keys, values [][]byte, sync bool) error {
	var b leveldb.Batch
	for i := range keys {
		b.Put(keys[i], values[i])
	}
	wo := (*opt.WriteOptions)(nil)
	if sync {
		// goleveldb has no Sync call; a synced write syncs the journal,
		// and with it everything written before.
		wo = syncWrite
	}
	return g.db.Write(&b, wo)
}

func (g *goleveldbDB) DeleteBatch(keys [][]byte, sync bool) error {
	var b leveldb.Batch
	for _, k := range keys {
		b.Delete(k)
	}
	wo := (*opt.WriteOptions)(nil)
	if sync {
		wo = syncWrite // syncs the journal, and with it everything before
	}
	return g.db.Write(&b, wo)
}

func (g *goleveldbDB) Get(k, _ []byte) ([]byte, bool, error) {
	// goleveldb already returns a copy.
	v, err := g.db.Get(k, nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (g *goleveldbDB) Scan(start []byte, n int, reverse bool, fn func(k, v []byte)) (int, error) {
	it := g.db.NewIterator(nil, nil)
	var ok bool
	switch {
	case !reverse:
		ok = it.Seek(start)
	case start == nil:
		ok = it.Last()
	case it.Seek(start):
		ok = it.Prev() // the last key < start
	default:
		ok = it.Last() // every key is < start
	}
	count := 0
	for ; ok && count < n; count++ {
		// Key and value are valid until the next move.
		fn(it.Key(), it.Value())
		if reverse {
			ok = it.Prev()
		} else {
			ok = it.Next()
		}
	}
	it.Release()
	return count, it.Error()
}

func (g *goleveldbDB) Close() error { return g.db.Close() }
