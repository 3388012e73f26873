package segstore

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// TestBreakDeleteRangeWhileSealSwitching: a seal is held after its switch
// (the old live file frozen, not yet committed); meanwhile a DeleteRange
// covers keys in the new live file, the frozen file and sealed segments,
// a snapshot is taken, and an import with a range tombstone commits. Reads
// by Get, iterator and snapshot agree with the model during the window,
// after the seal commits, after a crash taken in the window, and after a
// reopen.
func TestBreakDeleteRangeWhileSealSwitching(t *testing.T) {
	for _, withImport := range []bool{false, true} {
		t.Run(fmt.Sprintf("import=%v", withImport), func(t *testing.T) {
			mem := vfs.NewMem()
			var hold sync.Mutex
			var gate chan struct{}
			entered := make(chan struct{}, 1)
			o := &Options{FS: mem, Merge: MergeOptions{Disable: true}}
			s, err := open("/db", o, testHooks{beforeBuild: func(p string) error {
				hold.Lock()
				g := gate
				hold.Unlock()
				if g != nil && strings.HasSuffix(p, ".log") {
					entered <- struct{}{}
					<-g
				}
				return nil
			}})
			require.NoError(t, err)
			m := model{}
			put := func(k, v string) {
				require.NoError(t, s.Put([]byte(k), []byte(v)))
				m[k] = v
			}
			for i := range 10 {
				put(fmt.Sprintf("k%02d", i), "sealed")
			}
			require.NoError(t, s.Seal())
			for i := 5; i < 15; i++ {
				put(fmt.Sprintf("k%02d", i), "frozen")
			}
			hold.Lock()
			gate = make(chan struct{})
			hold.Unlock()
			sealErr := make(chan error, 1)
			go func() { sealErr <- s.Seal() }()
			<-entered
			s.mu.RLock()
			require.NotNil(t, s.mu.frozen, "the seal is held after its switch")
			s.mu.RUnlock()
			for i := 12; i < 20; i++ {
				put(fmt.Sprintf("k%02d", i), "live")
			}
			keys := keyNames(0)
			for i := range 25 {
				keys = append(keys, fmt.Sprintf("k%02d", i))
			}
			snBefore, err := s.NewSnapshot()
			require.NoError(t, err)
			mBefore := m.clone()
			require.NoError(t, s.DeleteRange([]byte("k03"), []byte("k17")))
			m.deleteRange("k03", "k17")
			put("k08", "after")
			var importErr chan error
			if withImport {
				peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
				require.NoError(t, peer.DeleteRange([]byte("k00"), []byte("k05")))
				require.NoError(t, peer.Put([]byte("k01"), []byte("peer")))
				require.NoError(t, peer.Put([]byte("k10"), []byte("peer")))
				stream := exportNewest(t, peer)
				require.NoError(t, peer.Close())
				// An import's commit seals the live file above the imported
				// segment, so it waits for the seal in flight.
				importErr = make(chan error, 1)
				go func() {
					_, err := s.Import(context.Background(), bytes.NewReader(stream))
					importErr <- err
				}()
			}
			sn, err := s.NewSnapshot()
			require.NoError(t, err)
			mSnap := m.clone()
			require.NoError(t, fullDiff(s, m, keys), "in the window")
			crash := mem.CrashClone(vfs.CrashDropUnsynced, nil)
			mCrash := m.clone()
			select {
			case err := <-importErr:
				t.Fatalf("the import returned (%v) while a seal was in flight", err)
			default:
			}
			close(gate)
			require.NoError(t, <-sealErr)
			if withImport {
				require.NoError(t, <-importErr)
				// Older than the live file (sealed above it in the same
				// commit): k08 (live) and k10 (deleted by the live range)
				// are not affected; the import's range deletes the sealed
				// k00..k04 that the live file does not hold.
				m.deleteRange("k00", "k05")
				m["k01"] = "peer"
			}
			require.NoError(t, fullDiff(s, m, keys), "after the seal")
			require.NoError(t, snapDiff(sn, mSnap, keys), "snapshot after the seal")
			require.NoError(t, snapDiff(snBefore, mBefore, keys), "earlier snapshot after the seal")
			require.NoError(t, s.Compact(context.Background()))
			require.NoError(t, fullDiff(s, m, keys), "after compact")
			require.NoError(t, snapDiff(sn, mSnap, keys), "snapshot after compact")
			sn.Close()
			snBefore.Close()
			require.NoError(t, s.Check())
			require.NoError(t, s.Close())
			for name, c := range map[string]struct {
				fsys *vfs.Mem
				m    model
			}{"reopen": {mem, m}, "crash in the window": {crash, mCrash}} {
				s2, err := Open("/db", &Options{FS: c.fsys, Merge: MergeOptions{Disable: true}})
				require.NoError(t, err, name)
				require.NoError(t, fullDiff(s2, c.m, keys), name)
				require.NoError(t, s2.Check(), name)
				require.NoError(t, s2.Close())
			}
			_ = segment.KindLog
		})
	}
}

// snapDiff compares a snapshot with a model: Get of every key and a full
// scan both ways.
func snapDiff(sn *Snapshot, m model, keys []string) error {
	for _, k := range keys {
		v, err := sn.Get([]byte(k))
		want, ok := m[k]
		if ok && (err != nil || string(v) != want) || !ok && err != ErrNotFound {
			return fmt.Errorf("snapshot get %q = %q, %v; want %q (present %v)", k, v, err, want, ok)
		}
	}
	it, err := sn.NewIterator(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil || m[string(it.Key())] != string(v) {
			return fmt.Errorf("snapshot scan %q = %q, %v; want %q", it.Key(), v, err, m[string(it.Key())])
		}
		n++
	}
	if n != len(m) {
		return fmt.Errorf("snapshot scan: %d keys, want %d", n, len(m))
	}
	n = 0
	for ok := it.Last(); ok; ok = it.Prev() {
		n++
	}
	if n != len(m) {
		return fmt.Errorf("snapshot reverse scan: %d keys, want %d", n, len(m))
	}
	return it.Err()
}
