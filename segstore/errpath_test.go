package segstore

// Regression tests for bugs on error and shutdown paths (issue 13; each
// failed on main before its fix, and the comments describe the mechanism as
// it was then): a Close racing
// writers, a seal whose re-read of the frozen file fails, recovery of a live
// continuation it cannot read, manifest commits (Import, Compact) that make
// durable something newer than unsynced writes, an iterator outliving its
// store, the zero Batch, and concurrent imports of one stream.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// epCatchPanic runs fn and turns a panic into an error, so that a panic
// fails the test that saw it instead of the whole test binary.
func epCatchPanic(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	fn()
	return nil
}

// epRequireModel requires every key of want to read back with its value.
func epRequireModel(t *testing.T, s *Store, want model, msgAndArgs ...any) {
	t.Helper()
	for _, k := range sortedKeys(want) {
		v, err := s.Get([]byte(k))
		if err != nil {
			require.Failf(t, "acknowledged key lost", "Get(%q): %v (want %q); %s", k, err, want[k], fmt.Sprint(msgAndArgs...))
		}
		require.Equalf(t, want[k], string(v), "Get(%q); %s", k, fmt.Sprint(msgAndArgs...))
	}
}

// TestCloseRacingWriters reproduces Close racing Puts: Close did not wait
// for writers that passed its closed check, so a Put can commit to a live
// file that Close has already truncated, synced and closed. Such a Put fails
// with ErrFailed (wrapping "file already closed") instead of ErrClosed, or is
// acknowledged while Close's truncate (to the offset it read before the
// write landed) cuts off its bytes: the reopen then misses acknowledged keys,
// or refuses the live file as corrupt (a zeroed frame followed by a frame
// whose watermark says it was synced).
//
// Contract: while Close runs, a Put returns nil or ErrClosed, and every Put
// that returned nil (SyncAlways: durable) is readable after a reopen; a Put
// after Close returns ErrClosed; Close returns nil (or ErrClosed).
func TestCloseRacingWriters(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		rounds := 300
		if testing.Short() {
			rounds = 50
		}
		epCloseRace(t, vfs.NewMem(), "/db", rounds)
	})
	t.Run("os", func(t *testing.T) {
		rounds := 50
		if testing.Short() {
			rounds = 10
		}
		epCloseRace(t, vfs.NewOS(), t.TempDir(), rounds)
	})
}

func epCloseRace(t *testing.T, fsys vfs.FS, dir string, rounds int) {
	const writers = 4
	o := &Options{FS: fsys, Sync: SyncAlways, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	all, last := model{}, model{}
	total := 0
	for r := range rounds {
		s, err := Open(dir, o)
		require.NoError(t, err, "round %d: reopen after the racing Close", r)
		// The writes acknowledged in the previous round (all of them are
		// checked once more at the end).
		epRequireModel(t, s, last, fmt.Sprintf("round %d: after reopen", r))

		var puts atomic.Int64
		start := make(chan struct{})
		acked := make([]model, writers)
		bad := make([]error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			acked[w] = model{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; ; i++ {
					k := fmt.Sprintf("r%03d-w%d-%05d", r, w, i)
					v := fmt.Sprintf("v-%d-%d-%d", r, w, i)
					err := s.Put([]byte(k), []byte(v))
					puts.Add(1)
					if err == nil {
						acked[w][k] = v
						continue
					}
					if !errors.Is(err, ErrClosed) {
						bad[w] = fmt.Errorf("Put(%q) racing Close: %w", k, err)
					}
					return
				}
			}()
		}
		var closeErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Let the writers get going; how far varies with the round.
			for puts.Load() < int64(r%16) {
				time.Sleep(10 * time.Microsecond)
			}
			closeErr = s.Close()
		}()
		close(start)
		wg.Wait()

		for _, err := range bad {
			require.NoError(t, err, "round %d: a Put racing Close must return nil or ErrClosed", r)
		}
		if closeErr != nil && !errors.Is(closeErr, ErrClosed) {
			require.NoError(t, closeErr, "round %d: Close racing writers", r)
		}
		require.ErrorIs(t, s.Put([]byte("after-close"), []byte("x")), ErrClosed, "round %d: Put after Close", r)
		last = model{}
		for _, m := range acked {
			for k, v := range m {
				all[k], last[k] = v, v
			}
		}
		total += len(last)
	}
	t.Logf("%d rounds, %d acknowledged writes", rounds, total)
	s, err := Open(dir, o)
	require.NoError(t, err, "final reopen")
	epRequireModel(t, s, all, "final reopen")
	require.NoError(t, s.Check())
	require.NoError(t, s.Close())
}

// TestSealReadErrorDoesNotLoseLiveFile reproduces a seal whose digest
// re-read of the frozen live file (segment.Digest in finishSeal) fails after
// the switch: the seal returned the error without failing the store, writers
// keep going into the new live file, and the next seal overwrites s.mu.frozen
// and names the new file's segment and a newer live file in the manifest,
// so the first frozen file is named by nothing: its keys vanish from reads
// at once and the file is deleted by the next Open as an orphan.
//
// Contract: after the switch a seal either completes (retrying a transient
// read) or fails the store (every later write returns ErrFailed); either
// way no acknowledged key is lost, before or after a reopen.
func TestSealReadErrorDoesNotLoseLiveFile(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		name := "transient"
		if persistent {
			name = "persistent"
		}
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewMem()
			fty := vfs.NewFaulty(mem)
			o := &Options{FS: fty, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, "/db", o)
			defer func() { s.Close() }()
			acked := model{}
			put := func(k, v string) error {
				err := s.Put([]byte(k), []byte(v))
				if err == nil {
					acked[k] = v
				}
				return err
			}
			for i := range 20 {
				require.NoError(t, put(fmt.Sprintf("a-%02d", i), fmt.Sprintf("va-%d", i)))
			}
			live := rlTailPath(s)
			require.NoError(t, fty.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: persistent,
				Match: func(p string) bool { return p == live }}))
			sealErr := s.Seal()
			t.Logf("first seal (read of %s fails): %v", live, sealErr)
			if persistent {
				require.Error(t, sealErr, "a seal that cannot read its frozen file cannot succeed")
			}
			require.NotZero(t, fty.Stats().Injected[vfs.OpRead], "the fault never fired: the test no longer hits the seal's re-read")

			// Writes after the failed seal: acknowledged ones must survive;
			// refused ones must be refused with ErrFailed.
			storeFailed := false
			for i := range 20 {
				err := put(fmt.Sprintf("b-%02d", i), fmt.Sprintf("vb-%d", i))
				if err != nil {
					require.ErrorIs(t, err, ErrFailed, "a write after a failed seal")
					storeFailed = true
				}
			}
			if err := s.Seal(); err != nil {
				require.ErrorIs(t, err, ErrFailed, "second seal")
			}
			for i := range 5 {
				err := put(fmt.Sprintf("c-%02d", i), fmt.Sprintf("vc-%d", i))
				if err != nil {
					require.ErrorIs(t, err, ErrFailed, "a write after a failed seal")
				}
			}
			// A read of the frozen file may still meet the armed fault; what
			// must not happen is a key gone or changed.
			for _, k := range sortedKeys(acked) {
				v, err := s.Get([]byte(k))
				if err != nil && errors.Is(err, vfs.ErrInjected) {
					continue
				}
				require.NoErrorf(t, err, "acknowledged key %q lost in the running store, after the failed seal and another seal", k)
				require.Equalf(t, acked[k], string(v), "Get(%q) in the running store", k)
			}

			fty.Clear()
			s.Close()
			s = mustOpen(t, "/db", o)
			epRequireModel(t, s, acked, fmt.Sprintf("after reopen; recovery %+v", s.RecoveryReport()))
			require.NoError(t, s.Check())
			if sealErr != nil {
				// Checked last, so that a lost key above is reported first.
				require.True(t, storeFailed, "the seal failed after the switch (%v): the store must refuse later writes with ErrFailed", sealErr)
			}
		})
	}
}

// epContinuation builds the state a crash leaves between a seal's switch
// and its manifest commit: the manifest names live file A, and acknowledged
// (synced) writes sit in continuation B, which starts with its link record
// to A. It returns the crash image, B's path, and every acknowledged key.
// B holds three single-record frames after its link, each synced, so each
// later frame's watermark proves the earlier ones were durable.
func epContinuation(t *testing.T) (*vfs.Mem, string, model) {
	t.Helper()
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	waitSpare(t, s, 1)
	want := model{}
	for i := range 5 {
		k, v := fmt.Sprintf("old-%d", i), fmt.Sprintf("v-old-%d", i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		want[k] = v
	}

	var mu sync.Mutex
	var hold chan struct{}
	held := make(chan struct{}, 1)
	mem.SetSyncHook(func(ev vfs.SyncEvent) {
		if !ev.Before || !strings.Contains(ev.Name, "MANIFEST-") {
			return
		}
		mu.Lock()
		h := hold
		hold = nil
		mu.Unlock()
		if h != nil {
			held <- struct{}{}
			<-h
		}
	})
	defer mem.SetSyncHook(nil)
	h := make(chan struct{})
	mu.Lock()
	hold = h
	mu.Unlock()
	sealErr := make(chan error, 1)
	go func() { sealErr <- s.Seal() }()
	<-held // writers are in the new live file; the manifest commit is not durable
	for i := range 3 {
		k, v := fmt.Sprintf("cont-%d", i), fmt.Sprintf("v-cont-%d", i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		want[k] = v
	}
	cont := rlTailPath(s)
	img := mem.CrashClone(vfs.CrashDropUnsynced, nil)
	close(h)
	require.NoError(t, <-sealErr)
	require.NoError(t, s.Close())

	// The image is what this test needs: the manifest does not name cont,
	// and cont holds the acknowledged writes.
	data, err := img.ReadFile(cont)
	require.NoError(t, err, "the continuation must be in the crash image")
	frames := epFrames(t, data, cont)
	require.Len(t, frames, 4, "continuation frames: link + 3 puts")
	return img, cont, want
}

// epFrames returns the offsets of the valid frames of a live file's bytes.
func epFrames(t *testing.T, data []byte, path string) []int64 {
	t.Helper()
	var offs []int64
	for _, fr := range testutil.Frames(t, data, path, segment.HeaderSize) {
		offs = append(offs, fr.Off)
	}
	return offs
}

// TestRecoveryKeepsUnreadableContinuation reproduces recovery dropping a live
// continuation it fails to read: a read error (or a short read) in
// unusedSpare makes it call the file an unused spare, an open or read error
// in replayLive makes it "unreadable", and damage in the continuation's
// synced frames makes it "dropped" too; in every case the file, which holds
// acknowledged writes, is then removed as an orphan and Open succeeds
// without them.
//
// Contract: Open fails when it cannot read a continuation (the error
// matches vfs.ErrInjected), leaves the file as it was, and a later Open
// without faults recovers every acknowledged write. (For a one-shot fault an
// Open that retries and succeeds with every acknowledged write is accepted
// too.) Damage a crash cannot produce in a continuation's synced frames fails
// Open with a *corruption.Error naming the file, and the file is kept.
func TestRecoveryKeepsUnreadableContinuation(t *testing.T) {
	cases := []struct {
		name  string
		fault vfs.Fault
		must  bool // Open must fail (the fault outlives any retry)
	}{
		{"read-once", vfs.Fault{Op: vfs.OpRead, Nth: 1}, false},
		{"read-persistent", vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: true}, true},
		{"short-read-once", vfs.Fault{Op: vfs.OpRead, Nth: 1, Short: true}, false},
		{"short-read-persistent", vfs.Fault{Op: vfs.OpRead, Nth: 1, Short: true, Persistent: true}, true},
		{"open-once", vfs.Fault{Op: vfs.OpOpen, Nth: 1}, false},
		{"open-second-once", vfs.Fault{Op: vfs.OpOpen, Nth: 2}, false},
		{"open-persistent", vfs.Fault{Op: vfs.OpOpen, Nth: 1, Persistent: true}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img, cont, want := epContinuation(t)
			before, err := img.ReadFile(cont)
			require.NoError(t, err)
			o := &Options{FS: img, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}

			fty := vfs.NewFaulty(img)
			f := tc.fault
			f.Match = func(p string) bool { return p == cont }
			require.NoError(t, fty.Inject(f))
			fo := *o
			fo.FS = fty
			s, err := Open("/db", &fo)
			if tc.fault.Nth == 1 {
				require.NotZero(t, fty.Stats().Injected[tc.fault.Op], "the fault never fired: Open no longer reads %s", cont)
			}
			if err == nil {
				// Only acceptable if the fault was transient and Open lost nothing.
				got := model{}
				for k := range want {
					if v, gerr := s.Get([]byte(k)); gerr == nil {
						got[k] = string(v)
					}
				}
				rep := s.RecoveryReport()
				s.Close()
				require.Falsef(t, tc.must, "Open succeeded although %s could not be read (fault %v persistent); recovery %+v", cont, tc.fault.Op, rep)
				require.Equalf(t, want, got, "Open succeeded after a transient fault on %s but lost acknowledged writes; recovery %+v", cont, rep)
			} else {
				t.Logf("Open with the fault: %v", err)
				require.ErrorIs(t, err, vfs.ErrInjected)
			}
			after, rerr := img.ReadFile(cont)
			require.NoError(t, rerr, "the continuation %s must not be removed", cont)
			if err != nil {
				require.Equal(t, before, after, "a failed Open must leave the continuation as it was")
			}

			s, err = Open("/db", o)
			require.NoError(t, err, "Open without faults")
			defer s.Close()
			require.NoError(t, fullDiff(s, want, nil), "recovery %+v", s.RecoveryReport())
			require.NoError(t, s.Check())
		})
	}

	t.Run("damaged-synced-frame", func(t *testing.T) {
		img, cont, _ := epContinuation(t)
		data, err := img.ReadFile(cont)
		require.NoError(t, err)
		frames := epFrames(t, data, cont)
		// Flip a payload byte of the first put's frame: the two frames after
		// it were written after it was synced (their watermarks say so), so
		// a crash cannot explain this.
		data[frames[1]+wal.HeaderSize+1] ^= 0x40
		require.NoError(t, img.WriteFile(cont, data))

		s, err := Open("/db", &Options{FS: img, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
		if err == nil {
			rep := s.RecoveryReport()
			s.Close()
			_, serr := img.Stat(cont)
			require.Failf(t, "Open accepted a damaged continuation",
				"%s has damage in a synced frame; Open succeeded (file still present: %v); recovery %+v", cont, serr == nil, rep)
		}
		t.Logf("Open: %v", err)
		ce := testutil.RequireCorrupt(t, err)
		require.Equal(t, cont, ce.Path, "the corruption error must name the continuation")
		after, err := img.ReadFile(cont)
		require.NoError(t, err, "the damaged continuation must not be removed")
		require.Equal(t, data, after, "the damaged continuation must be left as it was")
	})
}

// epSourceStream exports one segment holding k=v0 and imp=w from a store of
// its own.
func epSourceStream(t *testing.T) []byte {
	t.Helper()
	src := mustOpen(t, "/src", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	defer src.Close()
	require.NoError(t, src.Put([]byte("k"), []byte("v0")))
	require.NoError(t, src.Put([]byte("imp"), []byte("w")))
	return exportNewest(t, src)
}

// epGet reads key from s: its value and whether it is present.
func epGet(t *testing.T, s *Store, key string) (string, bool) {
	t.Helper()
	v, err := s.Get([]byte(key))
	if errors.Is(err, ErrNotFound) {
		return "", false
	}
	require.NoError(t, err, "Get(%q)", key)
	return string(v), true
}

// TestImportAfterUnsyncedPutKeepsPrefix reproduces Import making a segment
// durable (manifest commit) while earlier acknowledged writes in the live
// file are still unsynced (SyncManual, SyncInterval): a crash then keeps the
// import and loses the earlier Put, a state history never had. Here the
// target does Put(k=v1), then Imports a segment holding k=v0 and imp=w; the
// live file shadows imports, so in every state of history k is v1 once it is
// present at all.
//
// Contract: after a crash the store holds a prefix of history: {} or {k=v1}
// or {k=v1, imp=w}; never k=v0, never imp without k.
func TestImportAfterUnsyncedPutKeepsPrefix(t *testing.T) {
	stream := epSourceStream(t)
	for _, mode := range []SyncMode{SyncManual, SyncInterval} {
		t.Run(mode.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			o := &Options{FS: mem, Sync: mode, SyncInterval: time.Hour, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, "/db", o)
			defer s.Close()
			require.NoError(t, s.Put([]byte("k"), []byte("v1")))
			infos, err := s.Import(t.Context(), bytes.NewReader(stream))
			require.NoError(t, err)
			require.Len(t, infos, 1)
			v, ok := epGet(t, s, "k")
			require.True(t, ok)
			require.Equal(t, "v1", v, "the live file shadows the import")

			img := mem.CrashClone(vfs.CrashDropUnsynced, nil)
			o.FS = img
			r, err := Open("/db", o)
			require.NoError(t, err)
			defer r.Close()
			k, hasK := epGet(t, r, "k")
			_, hasImp := epGet(t, r, "imp")
			t.Logf("after crash: k present=%v value=%q, imp present=%v", hasK, k, hasImp)
			require.False(t, hasK && k == "v0", "k=v0 after the crash: the import survived and the Put before it did not; no prefix of history has k=v0")
			require.False(t, hasImp && !hasK, "the import survived the crash but the Put before it did not")
			if hasK {
				require.Equal(t, "v1", k)
			}
		})
	}

	// Compact commits to the manifest too, after unsynced writes to the
	// live file. What it makes durable is a rewrite of sealed data, all of
	// which precedes the live file's unsynced suffix, so the crash image
	// must still be a prefix of history.
	t.Run("compact", func(t *testing.T) {
		mem := vfs.NewMem()
		o := &Options{FS: mem, Sync: SyncManual, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
		s := mustOpen(t, "/db", o)
		defer s.Close()
		var history []model // history[i]: the state after i operations
		cur := model{}
		history = append(history, cur.clone())
		do := func(k, v string) {
			if v == "" {
				require.NoError(t, s.Delete([]byte(k)))
				delete(cur, k)
			} else {
				require.NoError(t, s.Put([]byte(k), []byte(v)))
				cur[k] = v
			}
			history = append(history, cur.clone())
		}
		do("a", "1")
		do("b", "1")
		do("c", "1")
		require.NoError(t, s.Seal())
		do("a", "2")
		do("b", "")
		require.NoError(t, s.Seal())
		do("c", "3")
		do("a", "")
		do("d", "4")
		require.NoError(t, s.Compact(t.Context()))
		require.Len(t, s.Segments(), 1, "Compact merged the two segments")

		img := mem.CrashClone(vfs.CrashDropUnsynced, nil)
		o.FS = img
		r, err := Open("/db", o)
		require.NoError(t, err)
		defer r.Close()
		got := model{}
		for _, k := range []string{"a", "b", "c", "d"} {
			if v, ok := epGet(t, r, k); ok {
				got[k] = v
			}
		}
		for _, h := range history {
			if fmt.Sprint(h) == fmt.Sprint(got) {
				return
			}
		}
		require.Failf(t, "not a prefix of history", "after the crash: %v; history: %v", got, history)
	})
}

// TestIteratorAfterStoreClose reproduces an iterator that keeps serving
// after its store is closed: First, Next and Seek walk the key directory
// and indexes held in memory, and Value reads through the closed store's
// file cache, which opens a handle nothing will close.
//
// Contract: once the store is closed, an iterator's moves return false and
// Value fails, and Err reports ErrClosed; the store opens no file for it.
func TestIteratorAfterStoreClose(t *testing.T) {
	setup := func(t *testing.T) *Store {
		s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}, DisableMmap: true})
		for i := range 10 {
			require.NoError(t, s.Put([]byte(fmt.Sprintf("s-%02d", i)), []byte("sealed")))
		}
		require.NoError(t, s.Seal())
		for i := range 10 {
			require.NoError(t, s.Put([]byte(fmt.Sprintf("t-%02d", i)), []byte("live")))
		}
		return s
	}
	t.Run("unpositioned", func(t *testing.T) {
		s := setup(t)
		it, err := s.NewIterator(nil)
		require.NoError(t, err)
		defer it.Close()
		require.NoError(t, s.Close())
		require.False(t, it.First(), "First after the store closed")
		require.ErrorIs(t, it.Err(), ErrClosed, "Err after the store closed")
		_, err = it.Value()
		require.Error(t, err, "Value after the store closed")
		require.False(t, it.Seek([]byte("t-")), "Seek after the store closed")
		require.False(t, it.Last(), "Last after the store closed")
		require.Zero(t, s.files.openCount(), "files opened through the closed store")
	})
	t.Run("positioned", func(t *testing.T) {
		s := setup(t)
		it, err := s.NewIterator(nil)
		require.NoError(t, err)
		defer it.Close()
		require.True(t, it.First())
		require.NoError(t, s.Close())
		v, err := it.Value()
		require.ErrorIs(t, err, ErrClosed, "Value after the store closed returned %q", v)
		require.False(t, it.Next(), "Next after the store closed")
		require.ErrorIs(t, it.Err(), ErrClosed, "Err after the store closed")
		require.Zero(t, s.files.openCount(), "files opened through the closed store")
	})
}

// TestZeroBatchNoPanic reproduces the zero Batch (var b Batch, new(Batch))
// panicking with a nil pointer dereference in Put and Delete (it has no
// store to validate against).
//
// Contract: every method of a Batch not made by NewBatch, and Apply of it,
// returns an error (ErrInvalidBatch) instead of panicking.
func TestZeroBatchNoPanic(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem()})
	defer s.Close()
	for _, name := range []string{"var", "new"} {
		t.Run(name, func(t *testing.T) {
			var b *Batch
			if name == "var" {
				var zero Batch
				b = &zero
			} else {
				b = new(Batch)
			}
			var err error
			require.NoError(t, epCatchPanic(func() { err = b.Put([]byte("k"), []byte("v")) }), "Batch.Put on a zero Batch")
			require.Error(t, err, "Batch.Put on a zero Batch")
			require.NoError(t, epCatchPanic(func() { err = b.Delete([]byte("k")) }), "Batch.Delete on a zero Batch")
			require.Error(t, err, "Batch.Delete on a zero Batch")
			require.NoError(t, epCatchPanic(func() { _ = b.Len() }), "Batch.Len on a zero Batch")
			require.NoError(t, epCatchPanic(func() { b.Reset() }), "Batch.Reset on a zero Batch")
			require.NoError(t, epCatchPanic(func() { err = s.Apply(b) }), "Apply of a zero Batch")
			require.ErrorIs(t, err, ErrInvalidBatch, "Apply of a zero Batch")
			_, gerr := s.Get([]byte("k"))
			require.ErrorIs(t, gerr, ErrNotFound, "nothing of a zero Batch is written")
		})
	}
}

// TestConcurrentImportsOfSameStreamAdoptOnce reproduces two Imports of the
// same stream racing: each collects the digests present before either
// commits, so both adopt the stream and the store ends with two segments of
// one digest (Import promises a stream already present is skipped).
//
// Contract: however Imports interleave, a digest is adopted once.
func TestConcurrentImportsOfSameStreamAdoptOnce(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 50
	}
	stream := epSourceStream(t)
	digest := digestOf(stream)
	for r := range rounds {
		s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = s.Import(context.Background(), io.Reader(bytes.NewReader(stream)))
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err, "round %d", r)
		}
		n := 0
		for _, si := range s.Segments() {
			if si.Digest == digest {
				n++
			}
		}
		require.NoError(t, s.Close())
		require.Equal(t, 1, n, "round %d: segments with the imported stream's digest", r)
	}
}
