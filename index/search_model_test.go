package index

import (
	"bytes"
	"errors"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

func genAdversarialKeys(t *rapid.T) [][]byte {
	prefix := rapid.SliceOfN(rapid.ByteRange(0, 3), 0, 12).Draw(t, "prefix")
	alpha := rapid.SliceOfN(rapid.Byte(), 1, 4).Draw(t, "alpha")
	n := rapid.IntRange(0, 700).Draw(t, "n")
	set := map[string]bool{}
	for i := 0; i < n; i++ {
		mode := rapid.IntRange(0, 4).Draw(t, "mode")
		var k []byte
		switch mode {
		case 0: // short, from alphabet, may be prefix of others
			k = append(bytes.Clone(prefix), rapid.SliceOfN(rapid.SampledFrom(alpha), 0, 10).Draw(t, "s")...)
		case 1: // ties on 8-byte word: fixed first 8 after prefix
			k = append(bytes.Clone(prefix), 1, 2, 3, 4, 5, 6, 7, 8)
			k = append(k, rapid.SliceOfN(rapid.SampledFrom(alpha), 0, 6).Draw(t, "t")...)
		case 2: // zero-padded ties
			k = append(bytes.Clone(prefix), 'a')
			k = append(k, make([]byte, rapid.IntRange(0, 10).Draw(t, "z"))...)
		case 3: // skewed: huge first byte
			k = append(bytes.Clone(prefix), 0xff, 0xff, 0xff)
			k = append(k, rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(t, "u")...)
		default:
			k = append(bytes.Clone(prefix), rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, "r")...)
		}
		set[string(k)] = true
	}
	if rapid.Bool().Draw(t, "empty") {
		set[""] = true
	}
	keys := make([][]byte, 0, len(set))
	for k := range set {
		keys = append(keys, []byte(k))
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys
}

func TestIndexSearchModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := genAdversarialKeys(t)
		entries := make([]Entry, len(keys))
		for i, k := range keys {
			entries[i] = Entry{Key: k, Kind: KindPut, Offset: int64(i), Length: 1}
		}
		id := Identity{DataLength: int64(len(keys) + 1), DataDigest: 7}
		data, sum, err := Encode(entries, id)
		if err != nil {
			t.Fatal(err)
		}
		ix, err := Decode("x", data, sum, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Verify(); err != nil {
			t.Fatal(err)
		}
		probes := [][]byte{nil, {}, {0}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
		for _, k := range keys {
			probes = append(probes, k, append(bytes.Clone(k), 0), append(bytes.Clone(k), 0xff))
			if len(k) > 0 {
				p := bytes.Clone(k[:len(k)-1])
				probes = append(probes, p)
				q := bytes.Clone(k)
				q[len(q)-1]++
				probes = append(probes, q)
				if q[len(q)-1] > 1 {
					r := bytes.Clone(k)
					r[len(r)-1]--
					probes = append(probes, r)
				}
			}
		}
		for i := 0; i < 50; i++ {
			probes = append(probes, rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, "probe"))
		}
		for _, p := range probes {
			want := sort.Search(len(keys), func(i int) bool { return bytes.Compare(keys[i], p) >= 0 })
			got, err := ix.Search(p)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("Search(%q) = %d, want %d (n=%d)", p, got, want, len(keys))
			}
			pr := NewProbe(p)
			e, ok, err := ix.Get(&pr)
			if err != nil {
				t.Fatal(err)
			}
			wantOK := want < len(keys) && bytes.Equal(keys[want], p)
			if ok != wantOK || (ok && (e.Offset != int64(want) || !bytes.Equal(e.Key, p))) {
				t.Fatalf("Get(%q) = %v %v, want ok=%v at %d", p, e, ok, wantOK, want)
			}
		}
	})
}

// Writer misuse.
func TestWriterMisuse(t *testing.T) {
	id := Identity{DataLength: 100}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriterParams{Count: 2, FirstKey: []byte("a"), LastKey: []byte("b"), ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(Entry{Key: []byte("a"), Kind: KindPut, Offset: 0, Length: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(Entry{Key: []byte("a"), Kind: KindPut, Offset: 1, Length: 1}); !errors.Is(err, ErrInvalidEntries) {
		t.Fatalf("dup: %v", err)
	}
	if err := w.Add(Entry{Key: []byte("b"), Kind: KindPut, Offset: 1, Length: 1}); err == nil {
		t.Fatalf("add after error accepted")
	}
	if _, _, err := w.Finish(); err == nil {
		t.Fatalf("finish after error accepted")
	}
	// zero count with keys given
	buf.Reset()
	w, err = NewWriter(&buf, WriterParams{Count: 0, FirstKey: []byte("z"), LastKey: []byte("a"), ID: id})
	if err != nil {
		t.Fatal(err)
	}
	sum, _, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	ix, err := Decode("x", buf.Bytes(), sum, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	// count 1, last key differs from first key
	buf.Reset()
	w, err = NewWriter(&buf, WriterParams{Count: 1, FirstKey: []byte("a"), LastKey: []byte("b"), ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(Entry{Key: []byte("a"), Kind: KindPut, Offset: 0, Length: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Finish(); err == nil {
		t.Fatalf("finish with wrong last key accepted")
	}
	// Finish twice
	buf.Reset()
	w, _ = NewWriter(&buf, WriterParams{Count: 1, FirstKey: []byte("a"), LastKey: []byte("a"), ID: id})
	_ = w.Add(Entry{Key: []byte("a"), Kind: KindPut, Offset: 0, Length: 1})
	if _, _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Finish(); err == nil {
		t.Fatalf("second finish accepted")
	}
	// caller mutates its key buffer after Add (key should be copied)
	buf.Reset()
	keys := [][]byte{}
	for i := 0; i < 300; i++ {
		keys = append(keys, []byte{byte(i >> 8), byte(i)})
	}
	w, _ = NewWriter(&buf, WriterParams{Count: 300, FirstKey: keys[0], LastKey: keys[299], ID: Identity{DataLength: 1000}})
	scratch := make([]byte, 2)
	for i, k := range keys {
		copy(scratch, k)
		if err := w.Add(Entry{Key: scratch, Kind: KindPut, Offset: int64(i), Length: 1}); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	sum, _, err = w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	ix, err = Decode("x", buf.Bytes(), sum, Identity{DataLength: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
}
