package segstore

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

var update = flag.Bool("update", false, "rewrite golden files")

// jobGate holds the store's background jobs (after the first spare, which
// Open needs) until the test releases them one at a time, or opens the gate.
type jobGate struct {
	mu      sync.Mutex
	passes  map[string]chan struct{}
	spares  int
	opened  chan struct{}
	started chan string // each held job, as it starts waiting
}

func newJobGate() *jobGate {
	return &jobGate{
		passes:  map[string]chan struct{}{"tidy": make(chan struct{}, 1024), "spare": make(chan struct{}, 1024)},
		opened:  make(chan struct{}),
		started: make(chan string, 1024),
	}
}

func (g *jobGate) wait(job string) {
	g.mu.Lock()
	if job == "spare" {
		g.spares++
		if g.spares == 1 {
			g.mu.Unlock()
			return
		}
	}
	ch, gated := g.passes[job]
	g.mu.Unlock()
	if !gated {
		return // merges run free here
	}
	g.started <- job
	select {
	case <-ch:
	case <-g.opened:
	}
}

func (g *jobGate) release(job string) { g.passes[job] <- struct{}{} }

func (g *jobGate) open() {
	select {
	case <-g.opened:
	default:
		close(g.opened)
	}
}

// waitSpare waits until the background has made n spares in total.
func waitSpare(t testing.TB, s *Store, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return s.Metrics().SparesMade >= n }, timeout, tick)
}

// TestSealGolden records every file-system call of a steady-state seal, and
// of the background work it triggers, in a reviewed text file: a new fsync
// or a reordering shows up as a diff.
func TestSealGolden(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncManual} {
		t.Run(mode.String(), func(t *testing.T) {
			cfs := vfs.NewCounting(vfs.NewMem())
			cfs.SetLogBase("/db")
			gate := newJobGate()
			s, err := open("/db", &Options{FS: cfs, Sync: mode, SegmentSize: 64 << 10}, testHooks{beforeJob: gate.wait})
			require.NoError(t, err)
			waitSpare(t, s, 1)
			require.NoError(t, s.Put([]byte("key"), []byte("value")))

			cfs.StartLog()
			require.NoError(t, s.Seal())
			sealOps := cfs.StopLog()

			// The two background jobs may start in either order; each is
			// recorded on its own while the other waits.
			jobOps := map[string][]string{}
			for range 2 {
				job := <-gate.started
				cfs.StartLog()
				gate.release(job)
				if job == "tidy" {
					// Tidy writes the index, then truncates the data file to
					// its sealed size: wait for both, or the log may stop
					// between them.
					seg := s.Segments()[0]
					require.Eventually(t, func() bool {
						if _, err := cfs.Stat("/db/" + segment.IndexName(seg.ID)); err != nil {
							return false
						}
						size, err := cfs.Stat("/db/" + segment.DataName(seg.ID, segment.KindLog))
						return err == nil && size == seg.Size
					}, timeout, tick)
				} else {
					waitSpare(t, s, 2)
				}
				jobOps[job] = cfs.StopLog()
			}
			tidyOps, spareOps := jobOps["tidy"], jobOps["spare"]

			got := "# seal of a one-record live file, sync mode " + mode.String() + ": the critical path\n" +
				strings.Join(sealOps, "\n") + "\n" +
				"# then, in the background: the index file (never synced) and the release of unused preallocation\n" +
				strings.Join(tidyOps, "\n") + "\n" +
				"# and the next spare live file\n" +
				strings.Join(spareOps, "\n") + "\n"
			golden := filepath.Join("testdata", "seal-"+mode.String()+".golden")
			if *update {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run go test -run TestSealGolden -update to create it")
			require.Equal(t, string(want), got)
			gate.open()
			checkAndClose(t, s)
		})
	}
}

// TestSealBarrierBudget asserts the headline: in steady state a seal's
// critical path has at most two file syncs and no directory sync, an empty
// seal costs nothing, and index files are never synced.
func TestSealBarrierBudget(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncManual} {
		t.Run(mode.String(), func(t *testing.T) {
			cfs := vfs.NewCounting(vfs.NewMem())
			// Background work waits for the test, so that its barriers (which
			// are off the seal's path) do not land inside the measurement.
			gate := newJobGate()
			s, err := open("/db", &Options{FS: cfs, Sync: mode, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}, testHooks{beforeJob: gate.wait})
			require.NoError(t, err)
			defer gate.open()
			for i := 0; i < 50; i++ {
				require.NoError(t, s.Put([]byte(fmt.Sprintf("key-%d", i)), []byte("v")))
				waitSpare(t, s, int64(i+1))
				cfs.Reset()
				require.NoError(t, s.Seal())
				c := cfs.Counts()
				gate.release("tidy")
				gate.release("spare")
				require.LessOrEqual(t, c.Syncs, int64(2), "seal %d: file syncs %v", i, c.SyncsByFile)
				require.Zero(t, c.DirSyncs, "seal %d: directory syncs", i)
				require.Zero(t, c.Renames, "seal %d: renames", i)
				if mode == SyncAlways {
					require.EqualValues(t, 1, c.Syncs, "seal %d: the write path synced the data: only the manifest commit remains", i)
				}
			}
			require.Zero(t, s.Metrics().SpareMisses)

			// An empty seal: nothing at all. The last seal's background work
			// (spare; index file, then truncating the sealed file, its last
			// step) must be done first, or it lands in the window.
			waitSpare(t, s, 50)
			segs := s.Segments()
			last := segs[len(segs)-1]
			lastData := "/db/" + segment.DataName(last.ID, segment.KindLog)
			require.Eventually(t, func() bool { n, err := cfs.Stat(lastData); return err == nil && n == last.Size }, timeout, tick)
			cfs.Reset()
			require.NoError(t, s.Seal())
			c := cfs.Counts()
			require.Zero(t, c.Syncs+c.DirSyncs+c.Renames+c.Creates+c.Removes+c.Writes, "empty seal: %+v", c)

			for name, n := range cfs.Counts().SyncsByFile {
				require.False(t, strings.HasSuffix(name, ".idx"), "index %s synced %d times", name, n)
			}
			checkAndClose(t, s)
		})
	}
}

// TestIndexDamageIsRebuilt damages a sealed segment's index in every way the
// issue lists; every key still reads back and the rebuild is counted: at
// Open (the report names it) when the top block is damaged, missing or
// stale, or at the first read of a damaged key block ("flipped byte" in the
// middle of the file), after which the damaged file is gone and the next
// Open rebuilds it.
func TestIndexDamageIsRebuilt(t *testing.T) {
	damage := map[string]func(t *testing.T, mem *vfs.Mem, ix, other string, si SegmentInfo){
		"flipped byte": func(t *testing.T, mem *vfs.Mem, ix, _ string, si SegmentInfo) {
			b, err := mem.ReadFile(ix)
			require.NoError(t, err)
			b[len(b)/2] ^= 0x01
			require.NoError(t, mem.WriteFile(ix, b))
		},
		"truncated": func(t *testing.T, mem *vfs.Mem, ix, _ string, si SegmentInfo) {
			b, err := mem.ReadFile(ix)
			require.NoError(t, err)
			require.NoError(t, mem.WriteFile(ix, b[:len(b)-7]))
		},
		"deleted": func(t *testing.T, mem *vfs.Mem, ix, _ string, si SegmentInfo) {
			require.NoError(t, mem.Remove(ix))
		},
		"another segment's index": func(t *testing.T, mem *vfs.Mem, ix, other string, si SegmentInfo) {
			b, err := mem.ReadFile(other)
			require.NoError(t, err)
			require.NoError(t, mem.WriteFile(ix, b))
		},
		"stale index of the same segment": func(t *testing.T, mem *vfs.Mem, ix, _ string, si SegmentInfo) {
			// Same identity (length, digest), older content: one entry fewer.
			id := index.Identity{DataLength: si.Size, DataDigest: si.Digest}
			built, err := index.Build(mem, filepath.Join("/db", segment.DataName(si.ID, segment.KindLog)), si.Size)
			require.NoError(t, err)
			loaded, err := index.Decode(ix, built.Data, built.Checksum, id)
			require.NoError(t, err)
			var entries []index.Entry
			for i := 1; i < loaded.Len(); i++ {
				e, err := loaded.At(i)
				require.NoError(t, err)
				entries = append(entries, e)
			}
			stale, _, err := index.Encode(entries, id)
			require.NoError(t, err)
			require.NoError(t, mem.WriteFile(ix, stale))
		},
	}
	for name, fn := range damage {
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewMem()
			o := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, "/db", o)
			m := model{}
			for seg := 0; seg < 2; seg++ {
				for i := 0; i < 50; i++ {
					k, v := fmt.Sprintf("key-%03d", seg*50+i), fmt.Sprintf("v%d", i)
					require.NoError(t, s.Put([]byte(k), []byte(v)))
					m[k] = v
				}
				require.NoError(t, s.Seal())
			}
			segs := s.Segments()
			require.NoError(t, s.Close())
			ix := filepath.Join("/db", segment.IndexName(segs[0].ID))
			other := filepath.Join("/db", segment.IndexName(segs[1].ID))
			intact, err := mem.ReadFile(ix)
			require.NoError(t, err)
			fn(t, mem, ix, other, segs[0])

			s = mustOpen(t, "/db", o)
			require.NoError(t, diff(s, m, 100))
			rep := s.RecoveryReport()
			require.EqualValues(t, 1, s.Metrics().IndexRebuilds, "report: %+v", rep)
			if name == "flipped byte" {
				require.Empty(t, rep.RebuiltIndexes, "the top block is intact: Open found nothing")
				checkAndClose(t, s)
				// The read that found the damage healed the file in place.
				healed, err := mem.ReadFile(ix)
				require.NoError(t, err)
				require.Equal(t, intact, healed)
			} else {
				require.Len(t, rep.RebuiltIndexes, 1, "report: %+v", rep)
				require.Contains(t, rep.RebuiltIndexes[0], segment.IndexName(segs[0].ID))
				checkAndClose(t, s)
			}
			// The rebuilt index was written back: the next open is clean.
			s = mustOpen(t, "/db", o)
			require.Empty(t, s.RecoveryReport().RebuiltIndexes)
			require.NoError(t, diff(s, m, 100))
			checkAndClose(t, s)
		})
	}
}
