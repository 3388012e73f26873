package segstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/segkv/segkv/vfs"
)

// The model-based test of the raft snapshot path: a rapid state machine
// over two stores, A and B, each written with puts, deletes and range
// deletions, sealed and compacted at random. B also imports some of A's
// segments now and then (so that a later ReplaceAll finds them local and
// keeps them). The checked action takes a sealed snapshot of A, sometimes
// compacts A before exporting (the exports must not fail), exports every
// segment, and replaces B's whole state with them: B must then read exactly
// what A's snapshot reads, by full iteration and point reads, before and
// after a reopen, and only the segments B did not hold may have been read.
// A snapshot of B taken before the replace keeps the old state.

type raMachine struct {
	memA, memB *vfs.Mem
	a, b       *Store
	ma, mb     model
	n          int

	replaces, kept, copied, compactedBetween int
}

// opts: merges only when the machine asks (Compact), seals at 64 KiB or
// when asked, keys of up to rdMaxKey bytes.
func (rm *raMachine) opts(fsys vfs.FS) *Options { return rdOptions(fsys, false) }

func (rm *raMachine) value(k string) string {
	rm.n++
	return fmt.Sprintf("%q#%d%s", k, rm.n, bytes.Repeat([]byte("v"), rm.n*7919%200))
}

func (rm *raMachine) put(rt *rapid.T, s *Store, m model) {
	k := rapid.SampledFrom(rdKeys).Draw(rt, "key")
	v := rm.value(k)
	require.NoError(rt, s.Put([]byte(k), []byte(v)))
	m[k] = v
}

func (rm *raMachine) del(rt *rapid.T, s *Store, m model) {
	k := rapid.SampledFrom(rdKeys).Draw(rt, "key")
	require.NoError(rt, s.Delete([]byte(k)))
	delete(m, k)
}

func (rm *raMachine) deleteRange(rt *rapid.T, s *Store, m model) {
	lo := rapid.SampledFrom(rdBounds).Draw(rt, "lo")
	hi := rapid.SampledFrom(rdBounds).Draw(rt, "hi")
	if lo > hi {
		lo, hi = hi, lo
	}
	require.NoError(rt, s.DeleteRange([]byte(lo), []byte(hi)))
	m.deleteRange(lo, hi)
}

// Import exports some of A's sealed segments, oldest first, and imports
// them into B; B's model is then read back (Import has tests of its own).
func (rm *raMachine) Import(rt *rapid.T) {
	segs := rm.a.Segments()
	if len(segs) == 0 {
		rt.Skip("A has no sealed segment")
	}
	var rs []io.Reader
	for _, info := range segs {
		if !rapid.Bool().Draw(rt, "import it") {
			continue
		}
		var buf bytes.Buffer
		_, err := rm.a.Export(context.Background(), info.ID, &buf)
		require.NoError(rt, err)
		rs = append(rs, &buf)
	}
	_, err := rm.b.Import(context.Background(), rs...)
	require.NoError(rt, err)
	rm.mb = scanStore(rt, rm.b)
}

// Replace is the checked action.
func (rm *raMachine) Replace(rt *rapid.T) {
	sn, err := rm.a.NewSealedSnapshot()
	require.NoError(rt, err)
	defer sn.Close()
	require.True(rt, liveEmpty(rm.a), "the sealed snapshot sealed A's live file")
	require.Equal(rt, rm.ma, snapScan(rt, sn), "A's sealed snapshot")
	if rapid.Bool().Draw(rt, "compact A before the export") {
		require.NoError(rt, rm.a.Compact(context.Background()))
		rm.compactedBetween++
	}
	exp := exportSnap(rt, sn)

	local := map[[2]uint64]bool{}
	for _, info := range rm.b.Segments() {
		local[[2]uint64{info.Digest, uint64(info.Size)}] = true
	}
	var wantRead int64
	counted := map[[2]uint64]bool{}
	for _, e := range exp {
		k := [2]uint64{e.info.Digest, uint64(e.info.Size)}
		if !local[k] && !counted[k] {
			wantRead += e.info.Size
			counted[k] = true
			rm.copied++
		} else if local[k] {
			rm.kept++
		}
	}
	var old *Snapshot
	oldModel := rm.mb.clone()
	if rapid.Bool().Draw(rt, "keep a snapshot of B across the replace") {
		old, err = rm.b.NewSnapshot()
		require.NoError(rt, err)
		defer old.Close()
	}
	var read atomic.Int64
	infos, err := rm.b.ReplaceAll(context.Background(), replaceSegs(exp, &read))
	require.NoError(rt, err)
	require.Equal(rt, wantRead, read.Load(), "bytes read from the streams: only those of segments B lacked")
	require.Equal(rt, rm.b.Segments(), infos)
	rm.mb = rm.ma.clone()
	rm.replaces++
	rm.check(rt)
	for _, k := range rdKeys {
		rdCheckGet(rt, "B", rm.b.Get, rm.mb, k)
	}
	require.NoError(rt, rm.b.Check())
	if old != nil {
		require.Equal(rt, oldModel, snapScan(rt, old), "a snapshot taken before the replace")
	}
	if rapid.Bool().Draw(rt, "reopen B") {
		rm.ReopenB(rt)
	}
}

func (rm *raMachine) ReopenB(rt *rapid.T) {
	require.NoError(rt, rm.b.Close())
	b, err := Open("/b", rm.opts(rm.memB))
	require.NoError(rt, err)
	rm.b = b
	require.Equal(rt, rm.mb, scanStore(rt, rm.b), "B after reopen")
}

// check compares both stores with their models by full iteration (after
// every action).
func (rm *raMachine) check(rt *rapid.T) {
	require.Equal(rt, rm.ma, scanStore(rt, rm.a), "A")
	require.Equal(rt, rm.mb, scanStore(rt, rm.b), "B")
}

func TestReplaceAllMatchesModel(t *testing.T) {
	var total raMachine
	rapid.Check(t, func(rt *rapid.T) {
		rm := &raMachine{memA: vfs.NewMem(), memB: vfs.NewMem(), ma: model{}, mb: model{}}
		var err error
		rm.a, err = Open("/a", rm.opts(rm.memA))
		require.NoError(rt, err)
		defer func() { rm.a.Close() }()
		rm.b, err = Open("/b", rm.opts(rm.memB))
		require.NoError(rt, err)
		defer func() { rm.b.Close() }()
		rt.Repeat(map[string]func(*rapid.T){
			"PutA":         func(rt *rapid.T) { rm.put(rt, rm.a, rm.ma) },
			"PutA2":        func(rt *rapid.T) { rm.put(rt, rm.a, rm.ma) },
			"DeleteA":      func(rt *rapid.T) { rm.del(rt, rm.a, rm.ma) },
			"DeleteRangeA": func(rt *rapid.T) { rm.deleteRange(rt, rm.a, rm.ma) },
			"SealA":        func(rt *rapid.T) { require.NoError(rt, rm.a.Seal()) },
			"SealA2":       func(rt *rapid.T) { require.NoError(rt, rm.a.Seal()) },
			"CompactA":     func(rt *rapid.T) { require.NoError(rt, rm.a.Compact(context.Background())) },
			"PutB":         func(rt *rapid.T) { rm.put(rt, rm.b, rm.mb) },
			"DeleteB":      func(rt *rapid.T) { rm.del(rt, rm.b, rm.mb) },
			"DeleteRangeB": func(rt *rapid.T) { rm.deleteRange(rt, rm.b, rm.mb) },
			"SealB":        func(rt *rapid.T) { require.NoError(rt, rm.b.Seal()) },
			"CompactB":     func(rt *rapid.T) { require.NoError(rt, rm.b.Compact(context.Background())) },
			"Import":       rm.Import,
			"Replace":      rm.Replace,
			"Replace2":     rm.Replace,
			"ReopenB":      rm.ReopenB,
			"":             rm.check,
		})
		total.replaces += rm.replaces
		total.kept += rm.kept
		total.copied += rm.copied
		total.compactedBetween += rm.compactedBetween
	})
	t.Logf("replaces: %d; segments kept: %d, copied: %d; A compacted between snapshot and export: %d",
		total.replaces, total.kept, total.copied, total.compactedBetween)
}
