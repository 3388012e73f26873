package peers

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// TestEngines checks every adapter's contract on a small store: durable puts,
// batches, hits with the right value, misses, and that a reopened store still
// has everything. A wrong adapter would make every figure meaningless.
func TestEngines(t *testing.T) {
	const n = 3000
	for _, name := range append(Names(), variants...) {
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

// TestScan checks every adapter's Scan against the sorted list of the keys
// written, on fresh (unflushed) data and again after a reopen: the start
// positions, the order, the counts and the values, forward and reverse.
func TestScan(t *testing.T) {
	const n = 2000
	sorted := make([][]byte, n)
	for i := range sorted {
		sorted[i] = Key(make([]byte, KeySize), uint64(i))
	}
	slices.SortFunc(sorted, bytes.Compare)
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
			}
			if err := db.Batch(keys, vals, false); err != nil {
				t.Fatal(err)
			}
			checkScans(t, db, sorted)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if db, err = e.Open(dir, Durable); err != nil {
				t.Fatal(err)
			}
			checkScans(t, db, sorted)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func checkScans(t *testing.T, db DB, sorted [][]byte) {
	t.Helper()
	n := len(sorted)
	between := func(r int) []byte { // a key just after sorted[r], before sorted[r+1]
		return append(bytes.Clone(sorted[r]), 0)
	}
	starts := [][]byte{nil, {}, []byte("!"), {0xff}, sorted[0], sorted[1], sorted[n/2], sorted[n-1], between(0), between(n / 3), between(n - 1)}
	for _, start := range starts {
		rank, _ := slices.BinarySearchFunc(sorted, start, bytes.Compare) // first key >= start
		for _, limit := range []int{0, 1, 100, n + 5} {
			for _, reverse := range []bool{false, true} {
				var want [][]byte
				switch {
				case !reverse:
					want = sorted[rank:min(n, rank+limit)]
				case start == nil:
					want = slices.Clone(sorted[max(0, n-limit):])
					slices.Reverse(want)
				default:
					want = slices.Clone(sorted[max(0, rank-limit):rank])
					slices.Reverse(want)
				}
				var got [][]byte
				wrongValue := ""
				count, err := db.Scan(start, limit, reverse, func(k, v []byte) {
					got = append(got, bytes.Clone(k))
					i, err := strconv.ParseUint(string(k[16:]), 16, 64)
					if err == nil && !bytes.Equal(v, Value(make([]byte, ValueSize), i)) && wrongValue == "" {
						wrongValue = string(k)
					}
				})
				if err != nil {
					t.Fatalf("Scan(%q, %d, reverse=%v): %v", start, limit, reverse, err)
				}
				if count != len(got) || !slices.EqualFunc(got, want, bytes.Equal) {
					t.Fatalf("Scan(%q, %d, reverse=%v): returned %d, visited %d keys, want %d (first got %q, want %q)",
						start, limit, reverse, count, len(got), len(want), first(got), first(want))
				}
				if wrongValue != "" {
					t.Fatalf("Scan(%q, %d, reverse=%v): wrong value for key %q", start, limit, reverse, wrongValue)
				}
			}
		}
	}
}

func first(keys [][]byte) []byte {
	if len(keys) == 0 {
		return nil
	}
	return keys[0]
}

// TestKeyOrder checks KeyOrder against sorting the keys themselves, and
// that unmix inverts mix on values far from the small key numbers.
func TestKeyOrder(t *testing.T) {
	const n = 20000
	got := KeyOrder(n)
	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i)
	}
	key := func(i uint64) []byte { return Key(make([]byte, KeySize), i) }
	slices.SortFunc(want, func(a, b uint64) int { return bytes.Compare(key(a), key(b)) })
	if !slices.Equal(got, want) {
		t.Fatalf("KeyOrder(%d) differs from the keys' byte order", n)
	}
	for _, x := range []uint64{0, 1, 1 << 63, ^uint64(0), 0x0123456789abcdef} {
		if y := unmix(mix(x)); y != x {
			t.Errorf("unmix(mix(%#x)) = %#x", x, y)
		}
	}
}

// TestDeleteBatch checks every adapter's DeleteBatch: the deleted keys are
// gone at once and after a reopen, their neighbours stay, a scan skips them,
// and deleting a key that does not exist is no error.
func TestDeleteBatch(t *testing.T) {
	const n = 2000
	deleted := func(i uint64) bool { return i%4 == 3 }
	var live [][]byte
	for i := uint64(0); i < n; i++ {
		if !deleted(i) {
			live = append(live, Key(make([]byte, KeySize), i))
		}
	}
	slices.SortFunc(live, bytes.Compare)
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
			var keys, vals, dels [][]byte
			for i := uint64(0); i < n; i++ {
				keys = append(keys, Key(make([]byte, KeySize), i))
				vals = append(vals, Value(make([]byte, ValueSize), i))
				if deleted(i) {
					dels = append(dels, keys[len(keys)-1])
				}
			}
			if err := db.Batch(keys, vals, false); err != nil {
				t.Fatal(err)
			}
			// Two batches, the second with a key never written; the last synced.
			half := len(dels) / 2
			if err := db.DeleteBatch(dels[:half], false); err != nil {
				t.Fatal(err)
			}
			if err := db.DeleteBatch(append(slices.Clone(dels[half:]), Key(make([]byte, KeySize), 2*n)), true); err != nil {
				t.Fatal(err)
			}
			check := func(when string) {
				t.Helper()
				kb, vb := make([]byte, KeySize), make([]byte, ValueSize)
				for i := uint64(0); i < n; i++ {
					v, found, err := db.Get(Key(kb, i), nil)
					if err != nil || found == deleted(i) || found && !bytes.Equal(v, Value(vb, i)) {
						t.Fatalf("%s: key %d: found=%v err=%v (deleted: %v)", when, i, found, err, deleted(i))
					}
				}
				var got [][]byte
				count, err := db.Scan(nil, n, false, func(k, _ []byte) { got = append(got, bytes.Clone(k)) })
				if err != nil || count != len(live) || !slices.EqualFunc(got, live, bytes.Equal) {
					t.Fatalf("%s: full scan: %d keys, err %v; want the %d live keys in order", when, count, err, len(live))
				}
			}
			check("before reopen")
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if db, err = e.Open(dir, Bulk); err != nil {
				t.Fatal(err)
			}
			check("after reopen")
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestShortKey checks that ShortKey's keys are 16 bytes, distinct, and in
// the order KeyOrder gives.
func TestShortKey(t *testing.T) {
	const n = 5000
	order := KeyOrder(n)
	seen := map[string]bool{}
	var prev []byte
	for _, i := range order {
		k := ShortKey(make([]byte, ShortKeySize), i)
		if len(k) != ShortKeySize || seen[string(k)] || prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("key %d: %q (duplicate %v, previous %q)", i, k, seen[string(k)], prev)
		}
		seen[string(k)] = true
		prev = k
	}
}
