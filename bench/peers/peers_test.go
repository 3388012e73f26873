package peers

import (
	"fmt"
	"testing"
)

// TestEngines checks every adapter's contract on a small store: durable puts,
// batches, hits with the right value, misses, and that a reopened store still
// has everything. A wrong adapter would make every figure meaningless.
func TestEngines(t *testing.T) {
	const n = 3000
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			e, err := Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			db, err := e.Open(dir, Bulk)
			if err != nil {
				t.Fatal(err)
			}
			var keys, vals [][]byte
			for i := uint64(0); i < n; i++ {
				keys = append(keys, Key(make([]byte, KeySize), i))
				vals = append(vals, Value(make([]byte, ValueSize), i))
				if len(keys) == 1000 || i == n-1 {
					if err := db.Batch(keys, vals, i == n-1); err != nil {
						t.Fatal(err)
					}
					keys, vals = keys[:0], vals[:0]
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if db, err = e.Open(dir, Durable); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := db.Close(); err != nil {
					t.Error(err)
				}
			}()
			kb, vb := make([]byte, KeySize), make([]byte, ValueSize)
			if err := db.Put(Key(kb, 2*n), Value(vb, 2*n)); err != nil {
				t.Fatal(err)
			}
			check := func(i uint64, want bool) {
				t.Helper()
				v, found, err := db.Get(Key(kb, i), nil)
				if err != nil || found != want {
					t.Fatalf("key %d: found=%v err=%v, want found=%v", i, found, err, want)
				}
				if want && string(v) != string(Value(vb, i)) {
					t.Fatalf("key %d: wrong value", i)
				}
			}
			for i := uint64(0); i < n; i += 7 {
				check(i, true)
				check(n+i, false)
			}
			check(2*n, true)
		})
	}
}

func TestKeys(t *testing.T) {
	seen := map[string]bool{}
	for i := uint64(0); i < 10000; i++ {
		k := string(Key(make([]byte, KeySize), i))
		if len(k) != KeySize || seen[k] {
			t.Fatalf("key %d: %q (len %d, duplicate %v)", i, k, len(k), seen[k])
		}
		seen[k] = true
	}
	if a, b := Value(make([]byte, ValueSize), 1), Value(make([]byte, ValueSize), 2); string(a) == string(b) {
		t.Fatal("values of different keys are equal")
	}
}

// BenchmarkGet measures random hits on a small (10k-key) store per engine: a
// cheap smoke benchmark for `go test -bench`. The real comparison is
// cmd/peerbench, which loads 1M keys and runs every workload side by side.
func BenchmarkGet(b *testing.B) {
	const n = 10000
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			db := loaded(b, name, n)
			kb, dst := make([]byte, KeySize), make([]byte, 0, ValueSize)
			i := uint64(0)
			for b.Loop() {
				i = (i + 7919) % n
				if _, found, err := db.Get(Key(kb, i), dst); err != nil || !found {
					b.Fatalf("key %d: found=%v err=%v", i, found, err)
				}
			}
		})
	}
}

// BenchmarkPutDurable measures one writer's durable puts per engine (one
// fdatasync or more per op: expect hundreds of microseconds).
func BenchmarkPutDurable(b *testing.B) {
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			e, err := Lookup(name)
			if err != nil {
				b.Fatal(err)
			}
			db, err := e.Open(b.TempDir(), Durable)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if err := db.Close(); err != nil {
					b.Error(err)
				}
			})
			kb, vb := make([]byte, KeySize), make([]byte, ValueSize)
			i := uint64(0)
			for b.Loop() {
				if err := db.Put(Key(kb, i), Value(vb, i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func loaded(b *testing.B, name string, n uint64) DB {
	b.Helper()
	e, err := Lookup(name)
	if err != nil {
		b.Fatal(err)
	}
	db, err := e.Open(b.TempDir(), Bulk)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := db.Close(); err != nil {
			b.Error(err)
		}
	})
	var keys, vals [][]byte
	for i := uint64(0); i < n; i++ {
		keys = append(keys, Key(make([]byte, KeySize), i))
		vals = append(vals, Value(make([]byte, ValueSize), i))
	}
	if err := db.Batch(keys, vals, true); err != nil {
		b.Fatal(fmt.Errorf("load: %w", err))
	}
	return db
}
