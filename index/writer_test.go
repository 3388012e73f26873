package index

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// chunkWriter accepts at most max bytes per Write call and fails once it
// has taken failAt bytes (if failAt > 0).
type chunkWriter struct {
	buf    bytes.Buffer
	failAt int
	calls  int
}

var errDiskFull = errors.New("disk full")

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.calls++
	if w.failAt > 0 && w.buf.Len()+len(p) > w.failAt {
		n := w.failAt - w.buf.Len()
		w.buf.Write(p[:n])
		return n, errDiskFull
	}
	return w.buf.Write(p)
}

func paramsOf(entries []Entry, id Identity) WriterParams {
	p := WriterParams{Count: len(entries), ID: id}
	if len(entries) > 0 {
		p.FirstKey, p.LastKey = entries[0].Key, entries[len(entries)-1].Key
	}
	return p
}

// TestWriterStreams: the Writer writes block by block (many writes, not one
// at Finish), and the stream decodes to the entries it was given, with the
// checksum Finish returned and the size it reported.
func TestWriterStreams(t *testing.T) {
	entries := genSequential(5000)
	var w chunkWriter
	iw, err := NewWriter(&w, paramsOf(entries, testID))
	require.NoError(t, err)
	for i, e := range entries {
		require.NoError(t, iw.Add(e))
		if i == 3*BlockEntries {
			// Three full blocks are out already.
			require.Greater(t, w.buf.Len(), 3*BlockEntries*(8+4+recordMeta+32))
		}
	}
	sum, size, err := iw.Finish()
	require.NoError(t, err)
	require.Equal(t, int64(w.buf.Len()), size)
	require.Greater(t, w.calls, len(entries)/BlockEntries)
	ix := mustDecode(t, "w.idx", w.buf.Bytes(), sum, testID)
	checkIndex(t, ix, entries)
	require.NoError(t, ix.Verify())

	// Add and Finish after Finish are refused.
	require.Error(t, iw.Add(entries[0]))
	_, _, err = iw.Finish()
	require.Error(t, err)
}

// TestWriterKeysAreCopied: a caller reusing its key buffer between Adds
// (as a merge reading keys from a scratch buffer does) gets the same file.
func TestWriterKeysAreCopied(t *testing.T) {
	entries := genSequential(1000)
	want, wantSum := mustEncode(t, entries, testID)
	var out bytes.Buffer
	iw, err := NewWriter(&out, paramsOf(entries, testID))
	require.NoError(t, err)
	scratch := make([]byte, 64)
	for _, e := range entries {
		k := scratch[:len(e.Key)]
		copy(k, e.Key)
		e.Key = k
		require.NoError(t, iw.Add(e))
		copy(scratch, "garbage garbage garbage garbage garbage")
	}
	sum, _, err := iw.Finish()
	require.NoError(t, err)
	require.Equal(t, wantSum, sum)
	require.Equal(t, want, out.Bytes())
}

func TestWriterRejects(t *testing.T) {
	entries := genSequential(300)
	cases := map[string]func(t *testing.T) error{
		"more than announced": func(t *testing.T) error {
			iw, err := NewWriter(io.Discard, paramsOf(entries[:2], testID))
			require.NoError(t, err)
			require.NoError(t, iw.Add(entries[0]))
			require.NoError(t, iw.Add(entries[1]))
			return iw.Add(entries[2])
		},
		"fewer than announced": func(t *testing.T) error {
			iw, err := NewWriter(io.Discard, paramsOf(entries, testID))
			require.NoError(t, err)
			for _, e := range entries[:len(entries)-1] {
				require.NoError(t, iw.Add(e))
			}
			_, _, err = iw.Finish()
			return err
		},
		"first key not announced": func(t *testing.T) error {
			iw, err := NewWriter(io.Discard, paramsOf(entries, testID))
			require.NoError(t, err)
			return iw.Add(entries[1])
		},
		"key after the last": func(t *testing.T) error {
			p := paramsOf(entries, testID)
			p.LastKey = entries[10].Key
			iw, err := NewWriter(io.Discard, p)
			require.NoError(t, err)
			for _, e := range entries[:11] {
				require.NoError(t, iw.Add(e))
			}
			return iw.Add(entries[11])
		},
		"last key not announced": func(t *testing.T) error {
			p := paramsOf(entries[:5], testID)
			p.LastKey = entries[7].Key
			iw, err := NewWriter(io.Discard, p)
			require.NoError(t, err)
			for _, e := range entries[:5] {
				require.NoError(t, iw.Add(e))
			}
			_, _, err = iw.Finish()
			return err
		},
		"first after last": func(t *testing.T) error {
			p := paramsOf(entries, testID)
			p.FirstKey, p.LastKey = p.LastKey, p.FirstKey
			_, err := NewWriter(io.Discard, p)
			return err
		},
		"negative count": func(t *testing.T) error {
			_, err := NewWriter(io.Discard, WriterParams{Count: -1})
			return err
		},
		"out of order": func(t *testing.T) error {
			iw, err := NewWriter(io.Discard, paramsOf(entries, testID))
			require.NoError(t, err)
			require.NoError(t, iw.Add(entries[0]))
			require.NoError(t, iw.Add(entries[2]))
			return iw.Add(entries[1])
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, c(t), ErrInvalidEntries)
		})
	}
}

// TestWriterWriteError: a failing write at any point surfaces from Add or
// Finish, wrapped, and every later call returns it.
func TestWriterWriteError(t *testing.T) {
	entries := genSequential(1000)
	full, _ := mustEncode(t, entries, testID)
	for failAt := 1; failAt < len(full); failAt += 97 {
		w := &chunkWriter{failAt: failAt}
		iw, err := NewWriter(w, paramsOf(entries, testID))
		if err == nil {
			for _, e := range entries {
				if err = iw.Add(e); err != nil {
					break
				}
			}
			if err == nil {
				_, _, err = iw.Finish()
			}
		}
		require.ErrorIs(t, err, errDiskFull, "fail at %d", failAt)
		if iw != nil {
			require.ErrorIs(t, iw.Add(entries[0]), errDiskFull)
			_, _, err = iw.Finish()
			require.ErrorIs(t, err, errDiskFull)
		}
	}
}

// TestWriterHoldsNoEntries: the Writer's heap is its bloom filter, block
// table and first keys, not the entries: writing 400k entries of 32-byte
// keys (about 29 MB as entries) leaves it holding about 1.5 bytes per key.
func TestWriterHoldsNoEntries(t *testing.T) {
	const n = 400_000
	key := func(i int) []byte { return fmt.Appendf(nil, "user:%027d", i) }
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	iw, err := NewWriter(io.Discard, WriterParams{Count: n, FirstKey: key(0), LastKey: key(n - 1), ID: testID})
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, iw.Add(Entry{Key: key(i), Kind: KindPut, Offset: int64(i) * 100, Length: 100}))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	require.Less(t, held, int64(4*n), "the writer holds %d bytes for %d keys", held, n)
	_, _, err = iw.Finish()
	require.NoError(t, err)
	runtime.KeepAlive(iw)
}
