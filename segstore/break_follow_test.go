package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// Break tests of Follow, Import beneath live writes, the range drop's seal
// and ChangesSince (2026-12-07 changes).

func bfPut(t testing.TB, s *Store, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		require.NoError(t, s.Put([]byte(kv[i]), []byte(kv[i+1])))
	}
}

// bfDataFiles lists the data and index files of a store's directory.
func bfDataFiles(t testing.TB, fsys vfs.FS, dir string) []string {
	t.Helper()
	names, err := fsys.List(dir)
	require.NoError(t, err)
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".seg") || strings.HasSuffix(n, ".idx") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// bfExport returns the exported bytes of segment id of s.
func bfExport(t testing.TB, s *Store, id uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	_, err := s.Export(context.Background(), id, &buf)
	require.NoError(t, err)
	return buf.Bytes()
}

// bfSealedOnly returns what the sealed segments of s read alone (what a
// follower, a backup or a snapshot of s's manifest reads): a fresh store
// follows s's full listing.
func bfSealedOnly(t *testing.T, s *Store) map[string]string {
	t.Helper()
	f := mustOpen(t, "/sealed-only", unmergedOpts(vfs.NewMem()))
	defer f.Close()
	ch := s.ChangesSince(s.ManifestSeq() + 1)
	require.NoError(t, f.Follow(context.Background(), ch, leaderOpen(s, nil)))
	return dumpStore(t, f)
}

// TestBreakFollowResyncAfterReplaceAll: SYNC.md says a diverged follower
// starts over with ReplaceAll(ctx, nil) and then syncs as usual
// (ChangesSince(FollowedSeq())). ReplaceAll leaves FollowedSeq as it was,
// so the next sync applies only the leader's changes since the old seq to
// an empty store: Follow returns nil and the follower lacks every segment
// the leader held before.
func TestBreakFollowResyncAfterReplaceAll(t *testing.T) {
	leader := mustOpen(t, "/l", unmergedOpts(vfs.NewMem()))
	defer leader.Close()
	follower := mustOpen(t, "/f", unmergedOpts(vfs.NewMem()))
	defer follower.Close()

	bfPut(t, leader, "a", "1")
	require.NoError(t, leader.Seal())
	bfPut(t, leader, "b", "1")
	require.NoError(t, leader.Seal())
	syncFollower(t, leader, follower)

	bfPut(t, follower, "mine", "x")
	require.ErrorIs(t, follower.Follow(context.Background(), leader.ChangesSince(follower.FollowedSeq()), leaderOpen(leader, nil)), ErrDiverged)
	_, err := follower.ReplaceAll(context.Background(), nil)
	require.NoError(t, err)
	require.Empty(t, dumpStore(t, follower))

	bfPut(t, leader, "c", "1")
	require.NoError(t, leader.Seal())
	syncFollower(t, leader, follower)
	require.Equal(t, dumpStore(t, leader), dumpStore(t, follower), "after ReplaceAll(nil) and a sync from FollowedSeq %d", follower.FollowedSeq())
}

// TestBreakFollowAfterPartialReplaceAll: a follower's ReplaceAll with a
// subset of its mirrored segments (all local, kept with their Origin) is a
// state of its own; Follow must then refuse (ErrDiverged/ErrFollowGap) or
// end exact. It returned nil with the leader's segment b missing.
func TestBreakFollowAfterPartialReplaceAll(t *testing.T) {
	leader := mustOpen(t, "/l", unmergedOpts(vfs.NewMem()))
	defer leader.Close()
	follower := mustOpen(t, "/f", unmergedOpts(vfs.NewMem()))
	defer follower.Close()
	bfPut(t, leader, "a", "1")
	require.NoError(t, leader.Seal())
	bfPut(t, leader, "b", "1")
	require.NoError(t, leader.Seal())
	syncFollower(t, leader, follower)

	first := follower.Segments()[0]
	// Twice: the kept segment's restated order moves past the order the
	// leader gives its next segment (else the two collide, by chance).
	for range 2 {
		_, err := follower.ReplaceAll(context.Background(), []ReplaceSegment{{Digest: first.Digest, Size: first.Size}})
		require.NoError(t, err)
	}

	bfPut(t, leader, "c", "1")
	require.NoError(t, leader.Seal())
	err := follower.Follow(context.Background(), leader.ChangesSince(follower.FollowedSeq()), leaderOpen(leader, nil))
	if err != nil {
		t.Logf("Follow: %v", err)
		require.True(t, errors.Is(err, ErrDiverged) || errors.Is(err, ErrFollowGap), "%v", err)
		return
	}
	require.Equal(t, dumpStore(t, leader), dumpStore(t, follower), "Follow returned nil")
}

// TestBreakReimportAfterReplaceAllNil: the adopted-digest memory survives
// ReplaceAll(nil) ("replaces the store's whole state"), so importing the
// same data set again into the emptied store silently adopts nothing.
func TestBreakReimportAfterReplaceAllNil(t *testing.T) {
	peer := mustOpen(t, "/p", unmergedOpts(vfs.NewMem()))
	defer peer.Close()
	bfPut(t, peer, "k", "v")
	stream := exportNewest(t, peer)
	s := mustOpen(t, "/s", unmergedOpts(vfs.NewMem()))
	defer s.Close()
	_, err := s.Import(context.Background(), bytes.NewReader(stream))
	require.NoError(t, err)
	_, err = s.ReplaceAll(context.Background(), nil)
	require.NoError(t, err)
	infos, err := s.Import(context.Background(), bytes.NewReader(stream))
	require.NoError(t, err)
	require.Len(t, infos, 1, "the emptied store adopts the stream again")
	v, err := s.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
}

// bfReader is a reader over data that fails with failErr after failAt bytes
// (failAt < 0: never) and counts its Close calls.
type bfReader struct {
	r       io.Reader
	left    int
	failErr error
	closed  *atomic.Int32
}

func (r *bfReader) Read(p []byte) (int, error) {
	if r.left == 0 && r.failErr != nil {
		return 0, r.failErr
	}
	if r.left > 0 && len(p) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	if r.left > 0 {
		r.left -= n
	}
	return n, err
}

func (r *bfReader) Close() error { r.closed.Add(1); return nil }

var errMidway = errors.New("transport broke midway")

// TestBreakFollowGarbageChanges: every malformed Changes or bad stream is
// refused with a typed error, nothing changes (no commit, the same
// FollowedSeq, the same reads, no file left behind), every reader opened is
// closed, and a correct Follow afterwards ends exact.
func TestBreakFollowGarbageChanges(t *testing.T) {
	leader := mustOpen(t, "/l", unmergedOpts(vfs.NewMem()))
	defer leader.Close()
	fmem := vfs.NewMem()
	follower := mustOpen(t, "/f", &Options{FS: fmem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	defer follower.Close()
	for i := range 3 {
		bfPut(t, leader, fmt.Sprintf("k%d", i), "v1")
		require.NoError(t, leader.Seal())
	}
	syncFollower(t, leader, follower)
	bfPut(t, leader, "k0", "v2", "k9", "v2")
	require.NoError(t, leader.Seal())
	// A range drop removes the segment of k1 whole.
	require.NoError(t, leader.DeleteRange([]byte("k1"), []byte("k1\x00")))
	bfPut(t, leader, "k2", "v4")
	require.NoError(t, leader.Seal())
	good := leader.ChangesSince(follower.FollowedSeq())
	require.True(t, good.Complete)
	require.NotEmpty(t, good.Removed)
	require.GreaterOrEqual(t, len(good.Added), 2)
	data := map[uint64][]byte{}
	for _, in := range leader.Segments() {
		data[in.ID] = bfExport(t, leader, in.ID)
	}
	var opened, closed atomic.Int32
	openWith := func(mod func(in SegmentInfo, b []byte) io.Reader) func(SegmentInfo) (io.ReadCloser, error) {
		return func(in SegmentInfo) (io.ReadCloser, error) {
			b, ok := data[in.ID]
			if !ok {
				return nil, fmt.Errorf("no such segment %d: %w", in.ID, ErrNoSegment)
			}
			opened.Add(1)
			return &bfReader{r: mod(in, b), left: -1, closed: &closed}, nil
		}
	}
	plain := openWith(func(_ SegmentInfo, b []byte) io.Reader { return bytes.NewReader(b) })
	clone := func(ch Changes) Changes {
		ch.Added, ch.Removed = slices.Clone(ch.Added), slices.Clone(ch.Removed)
		return ch
	}
	last := len(good.Added) - 1
	cases := []struct {
		name string
		ch   func() Changes
		open func(SegmentInfo) (io.ReadCloser, error)
		is   []error
	}{
		{"duplicate id", func() Changes {
			c := clone(good)
			d := c.Added[0]
			d.Order += 1000
			c.Added = append(c.Added, d)
			return c
		}, plain, []error{ErrInvalidOption}},
		{"duplicate order", func() Changes {
			c := clone(good)
			d := c.Added[0]
			d.ID += 1000
			c.Added = append(c.Added, d)
			return c
		}, plain, []error{ErrInvalidOption}},
		{"order collides with a kept segment", func() Changes {
			c := clone(good)
			kept := follower.Segments()
			for _, sg := range kept {
				if !slices.Contains(c.Removed, sg.Origin) {
					c.Added[last].Order = sg.Order
					return c
				}
			}
			t.Fatal("no kept segment")
			return c
		}, plain, []error{ErrFollowGap}},
		{"removed id not mirrored", func() Changes {
			c := clone(good)
			c.Removed = append(c.Removed, 999999)
			return c
		}, plain, []error{ErrFollowGap}},
		{"removed twice", func() Changes {
			c := clone(good)
			c.Removed = append(c.Removed, c.Removed[0])
			return c
		}, plain, []error{ErrInvalidOption}},
		{"removed and added", func() Changes {
			c := clone(good)
			c.Removed = append(c.Removed, c.Added[0].ID)
			return c
		}, plain, []error{ErrInvalidOption}},
		{"full listing with removals", func() Changes {
			c := clone(good)
			c.Complete = false
			return c
		}, plain, []error{ErrInvalidOption}},
		{"seq before since", func() Changes {
			c := clone(good)
			c.Seq = c.Since - 1
			return c
		}, plain, []error{ErrInvalidOption}},
		{"since is not where the follower stands", func() Changes {
			c := clone(good)
			c.Since++
			return c
		}, plain, []error{ErrFollowGap}},
		{"id 0", func() Changes { c := clone(good); c.Added[0].ID = 0; return c }, plain, []error{ErrInvalidOption}},
		{"order 0", func() Changes { c := clone(good); c.Added[0].Order = 0; return c }, plain, []error{ErrInvalidOption}},
		{"negative size", func() Changes { c := clone(good); c.Added[last].Size = -1; return c }, plain, []error{ErrInvalidOption}},
		{"wrong digest", func() Changes { c := clone(good); c.Added[last].Digest ^= 1; return c }, plain, []error{ErrCorrupt}},
		{"size too small", func() Changes { c := clone(good); c.Added[last].Size -= 3; return c }, plain, []error{ErrCorrupt}},
		{"size too large", func() Changes { c := clone(good); c.Added[last].Size += 3; return c }, plain, []error{ErrCorrupt}},
		{"huge size", func() Changes { c := clone(good); c.Added[last].Size = 1 << 62; return c }, plain, []error{ErrCorrupt}},
		{"another segment's data", func() Changes { return clone(good) }, openWith(func(in SegmentInfo, b []byte) io.Reader {
			for id, o := range data {
				if id != in.ID {
					return bytes.NewReader(o)
				}
			}
			return nil
		}), []error{ErrCorrupt}},
		{"long stream", func() Changes { return clone(good) }, openWith(func(_ SegmentInfo, b []byte) io.Reader {
			return io.MultiReader(bytes.NewReader(b), bytes.NewReader(b))
		}), []error{ErrCorrupt}},
		{"short stream", func() Changes { return clone(good) }, openWith(func(_ SegmentInfo, b []byte) io.Reader {
			return bytes.NewReader(b[:len(b)-1])
		}), []error{ErrCorrupt}},
		{"flipped byte", func() Changes { return clone(good) }, openWith(func(_ SegmentInfo, b []byte) io.Reader {
			c := slices.Clone(b)
			c[len(c)/2] ^= 0x40
			return bytes.NewReader(c)
		}), []error{ErrCorrupt}},
		{"reader fails midway", func() Changes { return clone(good) }, func(in SegmentInfo) (io.ReadCloser, error) {
			opened.Add(1)
			b := data[in.ID]
			return &bfReader{r: bytes.NewReader(b), left: len(b) / 2, failErr: errMidway, closed: &closed}, nil
		}, []error{errMidway}},
		{"open fails", func() Changes { return clone(good) }, func(in SegmentInfo) (io.ReadCloser, error) {
			return nil, errMidway
		}, []error{errMidway}},
		{"nil reader", func() Changes { return clone(good) }, func(in SegmentInfo) (io.ReadCloser, error) {
			return nil, nil
		}, []error{ErrInvalidOption}},
		{"unknown segment", func() Changes {
			c := clone(good)
			c.Added = append(c.Added, SegmentInfo{ID: 888888, Order: c.Added[last].Order + 1, Size: 10, Digest: 1})
			return c
		}, plain, []error{ErrNoSegment}},
	}
	before := dumpStore(t, follower)
	seq, fseq := follower.ManifestSeq(), follower.FollowedSeq()
	files := bfDataFiles(t, fmem, "/f")
	for _, c := range cases {
		opened.Store(0)
		closed.Store(0)
		err := follower.Follow(context.Background(), c.ch(), c.open)
		require.Error(t, err, c.name)
		for _, want := range c.is {
			require.ErrorIs(t, err, want, c.name)
		}
		require.Equal(t, opened.Load(), closed.Load(), "%s: every reader opened is closed", c.name)
		require.Equal(t, seq, follower.ManifestSeq(), "%s: nothing committed", c.name)
		require.Equal(t, fseq, follower.FollowedSeq(), c.name)
		require.Equal(t, before, dumpStore(t, follower), c.name)
		require.Equal(t, files, bfDataFiles(t, fmem, "/f"), "%s: the files of a refused Follow are gone", c.name)
	}
	require.NoError(t, follower.Follow(context.Background(), good, plain))
	require.Equal(t, dumpStore(t, leader), dumpStore(t, follower))
	require.NoError(t, follower.Check())
}

// bfFaultScenario is an operation run on a store image, with the reads
// before it (old) and after it (new).
type bfFaultScenario struct {
	base *vfs.Mem // a cleanly closed store at dir
	dir  string
	opts func(vfs.FS) *Options
	run  func(s *Store) error
	// old and new: what the store reads before and after run.
	old, new map[string]string
	// isNew says which of the two a store shows (by FollowedSeq, ...), and
	// may check more; got is its contents.
	isNew func(t *testing.T, s *Store, got map[string]string) bool
	// sealedOld, if not nil, is what the sealed set alone read before run;
	// after a successful run the sealed set alone must read new.
	sealedOld map[string]string
	// again, if not nil, is another state run may end in when run again on
	// a reopened image (an import over writes that recovery sealed).
	again map[string]string
}

var bfFaultOps = []vfs.Op{vfs.OpWrite, vfs.OpFileSync, vfs.OpDirSync, vfs.OpCreate, vfs.OpRemove,
	vfs.OpRead, vfs.OpOpen, vfs.OpTruncate, vfs.OpPreallocate, vfs.OpRename}

// bfCountOps runs sc once without faults and returns how many operations
// of each kind run made.
func bfCountOps(t *testing.T, sc *bfFaultScenario) map[vfs.Op]int64 {
	img := sc.base.CrashClone(vfs.CrashDropUnsynced, rand.New(rand.NewPCG(1, 1)))
	fty := vfs.NewFaulty(img)
	s, err := openGated(sc.dir, sc.opts(fty))
	require.NoError(t, err)
	before := fty.Stats().Seen
	require.NoError(t, sc.run(s.Store))
	after := fty.Stats().Seen
	got := dumpStore(t, s.Store)
	require.Equal(t, sc.new, got)
	require.True(t, sc.isNew(t, s.Store, got))
	if sc.sealedOld != nil {
		require.Equal(t, sc.new, bfSealedOnly(t, s.Store), "the sealed set alone reads the new state")
	}
	require.NoError(t, s.closeAll())
	out := map[vfs.Op]int64{}
	for _, o := range bfFaultOps {
		out[o] = after[o] - before[o]
	}
	return out
}

// bfCheckImage opens img and requires the old or the new state, whole,
// with nothing left over; then it runs the operation again, which must end
// in the new state.
func bfCheckImage(t *testing.T, sc *bfFaultScenario, img *vfs.Mem, label string) {
	t.Helper()
	s, err := openGated(sc.dir, sc.opts(img))
	require.NoError(t, err, label)
	got := dumpStore(t, s.Store)
	if sc.isNew(t, s.Store, got) {
		require.Equal(t, sc.new, got, "%s: reopened as the new state", label)
	} else {
		require.Equal(t, sc.old, got, "%s: reopened as the old state", label)
	}
	orph, err := orphans(img, s.Store)
	require.NoError(t, err, label)
	require.Empty(t, orph, label)
	require.NoError(t, s.Check(), label)
	s.release()
	require.NoError(t, sc.run(s.Store), "%s: the operation again", label)
	if got := dumpStore(t, s.Store); sc.again == nil || !maps.Equal(got, sc.again) {
		require.Equal(t, sc.new, got, "%s: after the operation again", label)
	}
	require.NoError(t, s.Close(), label)
}

// bfRunFaults fails, one at a time, every operation of every kind that
// sc.run makes, and checks the outcome: an error with nothing changed, or
// ErrFailed, or success with the new state; and that a reopen (clean, and
// after a power cut right after the failure) shows the old or the new
// state whole.
func bfRunFaults(t *testing.T, sc *bfFaultScenario) {
	counts := bfCountOps(t, sc)
	t.Logf("operations of the run: %v", counts)
	rng := rand.New(rand.NewPCG(7, 7))
	modes := testutil.CrashModes()
	k := 0
	for _, o := range bfFaultOps {
		for n := int64(1); n <= counts[o]; n++ {
			k++
			label := fmt.Sprintf("%v #%d", o, n)
			img := sc.base.CrashClone(vfs.CrashDropUnsynced, rng)
			fty := vfs.NewFaulty(img)
			s, err := openGated(sc.dir, sc.opts(fty))
			require.NoError(t, err, label)
			require.NoError(t, fty.Inject(vfs.Fault{Op: o, Nth: n}), label)
			runErr := sc.run(s.Store)
			fty.Clear()
			got := dumpStore(t, s.Store)
			switch {
			case runErr == nil:
				require.Equal(t, sc.new, got, "%s: succeeded", label)
				require.True(t, sc.isNew(t, s.Store, got), label)
				if sc.sealedOld != nil {
					require.Equal(t, sc.new, bfSealedOnly(t, s.Store), "%s: the sealed set alone", label)
				}
			case errors.Is(runErr, ErrFailed):
				// The store stopped; the reopen below says what it holds.
			default:
				require.Equal(t, sc.old, got, "%s: refused (%v) with nothing changed", label, runErr)
				require.False(t, sc.isNew(t, s.Store, got), "%s: refused (%v)", label, runErr)
				require.NoError(t, s.Store.failed(), "%s: an error that is not ErrFailed leaves the store working", label)
				if sc.sealedOld != nil {
					require.Equal(t, sc.sealedOld, bfSealedOnly(t, s.Store), "%s: the sealed set alone", label)
				}
			}
			cut := img.CrashClone(modes[k%len(modes)], rng)
			s.closeAll()
			bfCheckImage(t, sc, img, label+" reopened")
			bfCheckImage(t, sc, cut, fmt.Sprintf("%s power cut (%v)", label, modes[k%len(modes)]))
		}
	}
	require.Greater(t, k, 10)
}

// bfCrashEverySync takes a power-cut image before and after every sync
// of one fault-free run of sc, in every crash mode; each opens to the old
// or the new state, whole, with nothing left over, and the operation run
// again from there ends in the new state.
func bfCrashEverySync(t *testing.T, sc *bfFaultScenario) {
	img := sc.base.CrashClone(vfs.CrashDropUnsynced, rand.New(rand.NewPCG(3, 3)))
	s, err := openGated(sc.dir, sc.opts(img))
	require.NoError(t, err)
	rec := testutil.NewCrashRecorder(img, rand.New(rand.NewPCG(4, 4)))
	img.SetSyncHook(rec.Hook)
	require.NoError(t, sc.run(s.Store))
	img.SetSyncHook(nil)
	require.Equal(t, sc.new, dumpStore(t, s.Store))
	require.NoError(t, s.closeAll())
	points := rec.Points()
	require.GreaterOrEqual(t, len(points), 4)
	for _, p := range points {
		bfCheckImage(t, sc, p.FS, p.Label)
	}
}

// bfFollowScenario: a follower that mirrors a leader of four segments
// follows it again after a range drop, new seals and a merge on the
// leader (additions, removals, a merge output).
func bfFollowScenario(t *testing.T) *bfFaultScenario {
	leader := mustOpen(t, "/l", unmergedOpts(vfs.NewMem()))
	t.Cleanup(func() { leader.Close() })
	for i := range 4 {
		bfPut(t, leader, fmt.Sprintf("k%d", i), "v1", fmt.Sprintf("k%d-b", i), "v1")
		require.NoError(t, leader.Seal())
	}
	fmem := vfs.NewMem()
	fopts := func(fsys vfs.FS) *Options {
		return &Options{FS: fsys, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	}
	follower := mustOpen(t, "/f", fopts(fmem))
	ch1 := syncFollower(t, leader, follower)
	old := dumpStore(t, follower)
	require.NoError(t, follower.Close())

	require.NoError(t, leader.DeleteRange([]byte("k1"), []byte("k1-c"))) // drops k1's segment
	bfPut(t, leader, "k0", "v2", "k5", "v2")
	require.NoError(t, leader.Seal())
	bfPut(t, leader, "k6", "v3")
	require.NoError(t, leader.Seal())
	require.NoError(t, leader.Compact(context.Background()))
	bfPut(t, leader, "k7", "v4")
	require.NoError(t, leader.Seal())
	ch2 := leader.ChangesSince(ch1.Seq)
	require.True(t, ch2.Complete)
	require.NotEmpty(t, ch2.Removed)
	return &bfFaultScenario{
		base: fmem, dir: "/f", opts: fopts,
		run: func(s *Store) error {
			if s.FollowedSeq() == ch2.Seq {
				return nil
			}
			return s.Follow(context.Background(), ch2, leaderOpen(leader, nil))
		},
		old: old, new: dumpStore(t, leader),
		isNew: func(t *testing.T, s *Store, got map[string]string) bool {
			switch s.FollowedSeq() {
			case ch1.Seq:
				return false
			case ch2.Seq:
				return true
			}
			t.Fatalf("FollowedSeq %d is neither %d nor %d", s.FollowedSeq(), ch1.Seq, ch2.Seq)
			return false
		},
	}
}

// bfImportScenario: an import beneath unsealed writes (a put that shadows
// an imported key, a delete of one), which its commit seals above it.
func bfImportScenario(t *testing.T, mode SyncMode) *bfFaultScenario {
	peer := mustOpen(t, "/p", unmergedOpts(vfs.NewMem()))
	defer peer.Close()
	bfPut(t, peer, "a", "peer", "b", "peer", "c", "peer")
	stream := exportNewest(t, peer)
	mem := vfs.NewMem()
	opts := func(fsys vfs.FS) *Options {
		return &Options{FS: fsys, SegmentSize: 64 << 10, Sync: mode, Merge: MergeOptions{Disable: true}}
	}
	s := mustOpen(t, "/s", opts(mem))
	bfPut(t, s, "a", "old", "b", "old", "d", "old")
	require.NoError(t, s.Seal())
	bfPut(t, s, "a", "live", "e", "live") // shadows the peer's a
	require.NoError(t, s.Delete([]byte("c")))
	old := dumpStore(t, s)
	sealedOld := bfSealedOnly(t, s)
	require.NoError(t, s.Close())
	return &bfFaultScenario{
		base: mem, dir: "/s", opts: opts,
		run: func(s *Store) error {
			_, err := s.Import(context.Background(), bytes.NewReader(stream))
			return err
		},
		old: old, new: map[string]string{"a": "live", "b": "peer", "d": "old", "e": "live"}, sealedOld: sealedOld,
		// After a failure at or after the seal's switch, the next Open
		// seals the live file; an import run again then lands above those
		// writes (imports shadow sealed data, not live writes).
		again: map[string]string{"a": "peer", "b": "peer", "c": "peer", "d": "old", "e": "live"},
		isNew: func(t *testing.T, s *Store, got map[string]string) bool { return got["b"] == "peer" },
	}
}

// TestBreakFollowFaultEveryOp: one I/O error at every operation of a
// Follow that adds, reorders and removes segments.
func TestBreakFollowFaultEveryOp(t *testing.T) {
	bfRunFaults(t, bfFollowScenario(t))
}

// TestBreakFollowCrashEverySync: a power cut at every sync of that Follow.
func TestBreakFollowCrashEverySync(t *testing.T) {
	bfCrashEverySync(t, bfFollowScenario(t))
}

// TestBreakImportLiveFaultEveryOp: one I/O error at every operation of an
// Import beneath unsealed writes, under SyncAlways and SyncManual.
func TestBreakImportLiveFaultEveryOp(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncManual} {
		t.Run(mode.String(), func(t *testing.T) { bfRunFaults(t, bfImportScenario(t, mode)) })
	}
}

// TestBreakImportLiveCrashEverySync: a power cut at every sync of that
// Import.
func TestBreakImportLiveCrashEverySync(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncManual} {
		t.Run(mode.String(), func(t *testing.T) { bfCrashEverySync(t, bfImportScenario(t, mode)) })
	}
}

// bfWatchdog fails the test with every goroutine's stack if done is not
// closed within d: a hang is a bug.
func bfWatchdog(t *testing.T, d time.Duration, done <-chan struct{}) {
	go func() {
		select {
		case <-done:
		case <-time.After(d):
			buf := make([]byte, 8<<20)
			n := runtime.Stack(buf, true)
			fmt.Fprintf(os.Stderr, "HANG after %v; goroutines:\n%s\n", d, buf[:n])
			panic("break_follow: hang")
		}
	}()
}

// bfAllowed reports whether err is an outcome a racing call may have.
func bfAllowed(err error, also ...error) bool {
	if err == nil {
		return true
	}
	for _, e := range append([]error{ErrDiverged, ErrNoSegment, ErrClosed, context.Canceled}, also...) {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// TestBreakFollowEverythingAtOnce: on one store, from many goroutines,
// Put, DeleteRange (dropping whole segments under SyncAlways), Seal,
// Compact, Import, ReplaceAll, NewSealedSnapshot and Follow (refused:
// ErrDiverged); meanwhile a follower follows it (ChangesSince racing its
// merges) and a second follower follows the follower. Then Close races
// all of it. No deadlock (a watchdog dumps the goroutines), no error but
// the allowed ones, and afterwards both followers read exactly what the
// store reads, and the store reopens and checks clean.
func TestBreakFollowEverythingAtOnce(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprint(round), func(t *testing.T) { bfEverythingAtOnce(t, uint64(round), round == 2) })
	}
}

// bfEverythingAtOnce: with closeEarly, Close races the workers.
func bfEverythingAtOnce(t *testing.T, seed uint64, closeEarly bool) {
	peer := mustOpen(t, "/p", unmergedOpts(vfs.NewMem()))
	var streams [][]byte
	for i := range 4 {
		bfPut(t, peer, fmt.Sprintf("key-%03d", i*7), fmt.Sprintf("peer%d", i), fmt.Sprintf("key-%03d", i*7+1), "peer")
		if i == 2 {
			require.NoError(t, peer.DeleteRange([]byte("key-010"), []byte("key-020")))
		}
		streams = append(streams, exportNewest(t, peer))
	}
	require.NoError(t, peer.Close())

	mem := vfs.NewMem()
	opts := &Options{FS: mem, SegmentSize: 4 << 10, Merge: MergeOptions{MaxStepBytes: 8192}}
	s := mustOpen(t, "/s", opts)
	f1 := mustOpen(t, "/f1", &Options{FS: vfs.NewMem(), SegmentSize: 4 << 10})
	defer f1.Close()
	f2 := mustOpen(t, "/f2", &Options{FS: vfs.NewMem(), SegmentSize: 4 << 10})
	defer f2.Close()

	done := make(chan struct{})
	bfWatchdog(t, 60*time.Second, done)
	defer close(done)

	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	report := func(what string, err error, also ...error) {
		if !bfAllowed(err, also...) {
			select {
			case errs <- fmt.Errorf("%s: %w", what, err):
			default:
			}
		}
	}
	round := seed
	worker := func(seed uint64, fn func(rng *rand.Rand)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 9+round))
			for i := 0; i < 60 && !stop.Load(); i++ {
				fn(rng)
			}
		}()
	}
	for w := range 3 {
		worker(uint64(w), func(rng *rand.Rand) {
			report("apply", applyOps(s, randomOps(rng, 1+rng.IntN(5), 40)))
		})
	}
	worker(10, func(rng *rand.Rand) {
		lo := rng.IntN(40)
		report("delete range", s.DeleteRange(fmt.Appendf(nil, "key-%03d", lo), fmt.Appendf(nil, "key-%03d", lo+rng.IntN(8))))
	})
	worker(11, func(rng *rand.Rand) { report("seal", s.Seal()) })
	worker(12, func(rng *rand.Rand) { report("compact", s.Compact(context.Background())) })
	worker(13, func(rng *rand.Rand) {
		_, err := s.Import(context.Background(), bytes.NewReader(streams[rng.IntN(len(streams))]), bytes.NewReader(streams[rng.IntN(len(streams))]))
		report("import", err)
	})
	worker(14, func(rng *rand.Rand) {
		if rng.IntN(4) != 0 {
			return
		}
		sn, err := s.NewSealedSnapshot()
		if err != nil {
			report("snapshot", err)
			return
		}
		defer sn.Close()
		var segs []ReplaceSegment
		for _, in := range sn.Segments() {
			var buf bytes.Buffer
			if _, err := sn.Export(context.Background(), in.ID, &buf); err != nil {
				report("snapshot export", err)
				return
			}
			segs = append(segs, ReplaceSegment{Digest: in.Digest, Size: in.Size, Data: &buf})
		}
		_, err = s.ReplaceAll(context.Background(), segs)
		report("replace all", err)
	})
	worker(15, func(rng *rand.Rand) {
		err := s.Follow(context.Background(), f1.ChangesSince(s.FollowedSeq()), leaderOpen(f1, nil))
		report("follow on a store of its own", err, ErrFollowGap)
	})
	var follows atomic.Int64
	// f1 changes only by its Follows (its merges leave mirrored segments
	// alone), one at a time: what it reads at each of its seqs.
	var histMu sync.Mutex
	hist := map[uint64]map[string]string{f1.ManifestSeq(): {}}
	follow := func(from, to *Store) {
		ch := from.ChangesSince(to.FollowedSeq())
		err := to.Follow(context.Background(), ch, leaderOpen(from, nil))
		report("follow", err)
		if err != nil {
			return
		}
		follows.Add(1)
		got := dumpStore(t, to)
		histMu.Lock()
		defer histMu.Unlock()
		if to == f1 {
			hist[f1.ManifestSeq()] = got
		} else if want, ok := hist[ch.Seq]; ok && !maps.Equal(want, got) {
			report("chain", fmt.Errorf("f2 at f1's seq %d reads %v, f1 read %v", ch.Seq, got, want))
		}
	}
	worker(16, func(rng *rand.Rand) { follow(s, f1) })
	worker(17, func(rng *rand.Rand) { follow(f1, f2) })
	if closeEarly {
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, s.Close())
		stop.Store(true)
	}
	worker(18, func(rng *rand.Rand) { report("compact follower", f1.Compact(context.Background())) })

	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Positive(t, follows.Load())
	if closeEarly {
		s = mustOpen(t, "/s", opts)
	}

	require.NoError(t, s.Seal())
	syncFollower(t, s, f1)
	syncFollower(t, f1, f2)
	want := dumpStore(t, s)
	require.Equal(t, want, dumpStore(t, f1))
	require.Equal(t, want, dumpStore(t, f2))
	require.NoError(t, f1.Check())
	require.NoError(t, f2.Check())
	checkAndClose(t, s)
	s = mustOpen(t, "/s", opts)
	require.Equal(t, want, dumpStore(t, s))
	checkAndClose(t, s)
}

// TestBreakFollowerFilesTamperedBetweenFollows: between two Follows, a
// follower's directory loses a mirrored segment's index, has an index
// garbled, gains stray files; each reopen reads exactly the mirror and the
// next Follow ends exact. A lost or renamed data file is refused at Open
// (or reads fail): never a silent wrong answer.
func TestBreakFollowerFilesTamperedBetweenFollows(t *testing.T) {
	leader := mustOpen(t, "/l", unmergedOpts(vfs.NewMem()))
	defer leader.Close()
	fmem := vfs.NewMem()
	fopts := &Options{FS: fmem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	follower := mustOpen(t, "/f", fopts)
	step := 0
	grow := func() {
		step++
		bfPut(t, leader, fmt.Sprintf("k%d", step), fmt.Sprintf("v%d", step), "shared", fmt.Sprintf("v%d", step))
		require.NoError(t, leader.Seal())
	}
	for range 3 {
		grow()
	}
	syncFollower(t, leader, follower)
	segs := follower.Segments()
	require.Len(t, segs, 3)
	require.NoError(t, follower.Close())

	idxOf := func(id uint64) string { return "/f/" + segment.IndexName(id) }
	reopen := func(what string) {
		follower = mustOpen(t, "/f", fopts)
		require.Equal(t, dumpStore(t, leader), dumpStore(t, follower), what)
		grow()
		syncFollower(t, leader, follower)
		require.Equal(t, dumpStore(t, leader), dumpStore(t, follower), what+", then a Follow")
		require.NoError(t, follower.Check(), what)
		require.NoError(t, follower.Close())
	}
	// A lost index.
	require.NoError(t, fmem.Remove(idxOf(segs[1].ID)))
	reopen("an index removed")
	// A garbled index.
	b, err := fmem.ReadFile(idxOf(segs[0].ID))
	require.NoError(t, err)
	b[len(b)/2] ^= 0xff
	require.NoError(t, fmem.WriteFile(idxOf(segs[0].ID), b))
	reopen("an index garbled")
	// An index swapped for another segment's.
	b, err = fmem.ReadFile(idxOf(segs[2].ID))
	require.NoError(t, err)
	require.NoError(t, fmem.WriteFile(idxOf(segs[1].ID), b))
	reopen("an index of another segment")
	// Stray files: a copy of a segment under a fresh id, an index of no
	// segment.
	data, err := fmem.ReadFile(bfDataName(t, fmem, "/f", segs[0].ID))
	require.NoError(t, err)
	require.NoError(t, fmem.WriteFile("/f/"+segment.DataName(900, segment.KindSeg), data))
	require.NoError(t, fmem.WriteFile(idxOf(901), []byte("junk")))
	reopen("stray files")

	// A mirrored data file removed: refused, or reads fail; never a
	// silently missing key.
	follower = mustOpen(t, "/f", fopts)
	segs = follower.Segments()
	require.NoError(t, follower.Close())
	require.NoError(t, fmem.Remove(bfDataName(t, fmem, "/f", segs[1].ID)))
	s, err := Open("/f", fopts)
	if err == nil {
		defer s.Close()
		_, gerr := s.Get([]byte("shared"))
		if gerr == nil {
			it, ierr := s.NewIterator(nil)
			require.NoError(t, ierr)
			for ok := it.First(); ok; ok = it.Next() {
			}
			gerr = it.Err()
			it.Close()
		}
		require.Error(t, gerr, "a store missing a mirrored data file reads on as if nothing were missing")
		return
	}
	t.Logf("open refused: %v", err)
	require.ErrorIs(t, err, ErrCorrupt)
}

// bfDataName finds the data file of segment id in dir.
func bfDataName(t *testing.T, fsys vfs.FS, dir string, id uint64) string {
	t.Helper()
	names, err := fsys.List(dir)
	require.NoError(t, err)
	for _, n := range names {
		if strings.HasPrefix(n, fmt.Sprintf("%016x.", id)) && n != segment.IndexName(id) {
			return dir + "/" + n
		}
	}
	t.Fatalf("no data file of %d in %s", id, dir)
	return ""
}

// TestBreakEveryCommitIsARealState: a follower follows a store after every
// step of a random workload, at any point (unsealed writes included):
// range deletes that drop whole segments under SyncAlways, imports beneath
// unsealed writes, seals, merges, manifest checkpoints, ReplaceAll. The
// follower reads the store's sealed set alone, which must always be a
// state the store showed, never older than the last one it showed (so its
// history only moves forward), and exactly the store's state right after a
// seal, an import beneath writes or a range drop that dropped segments.
func TestBreakEveryCommitIsARealState(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 77))
			peer := mustOpen(t, "/p", unmergedOpts(vfs.NewMem()))
			defer peer.Close()
			s := mustOpen(t, "/s", &Options{FS: vfs.NewMem(), SegmentSize: 4 << 10, Merge: []MergeOptions{{}, {MaxStepBytes: 4096, KeepWriteOrder: true}, {Disable: true}}[seed]})
			defer s.Close()
			f := mustOpen(t, "/f", &Options{FS: vfs.NewMem(), SegmentSize: 4 << 10})
			defer f.Close()
			const keySpace = 40
			var history []map[string]string
			last := 0
			history = append(history, map[string]string{})
			for step := range 150 {
				exact := false
				switch r := rng.IntN(100); {
				case r < 50:
					require.NoError(t, applyOps(s, randomOps(rng, 1+rng.IntN(4), keySpace)))
				case r < 62:
					lo := rng.IntN(keySpace)
					segs := len(s.Segments())
					rem := s.Metrics().RangeDropped
					require.NoError(t, s.DeleteRange(fmt.Appendf(nil, "key-%03d", lo), fmt.Appendf(nil, "key-%03d", lo+rng.IntN(15))))
					// A drop names the store's state when this range delete
					// sealed its tombstone with it (sealForRangeDrop). A
					// background merge's commit also drops segments, under
					// tombstones sealed before, so RangeDropped can rise
					// while this one is still only in the live file: then
					// the sealed set is not the store's state, and only the
					// history check below applies.
					exact = s.Metrics().RangeDropped > rem && len(s.Segments()) <= segs && maps.Equal(sealedSnapshotState(t, s), dumpStore(t, s))
				case r < 72:
					require.NoError(t, s.Seal())
					exact = true
				case r < 78:
					require.NoError(t, s.Compact(context.Background()))
				case r < 88:
					require.NoError(t, applyOps(peer, randomOps(rng, 1+rng.IntN(6), keySpace)))
					if rng.IntN(3) == 0 {
						lo := rng.IntN(keySpace)
						require.NoError(t, peer.DeleteRange(fmt.Appendf(nil, "key-%03d", lo), fmt.Appendf(nil, "key-%03d", lo+5)))
					}
					_, err := s.Import(context.Background(), bytes.NewReader(exportNewest(t, peer)))
					require.NoError(t, err)
					exact = true
				case r < 92:
					require.NoError(t, s.mlog.Checkpoint())
				case r < 94:
					sn, err := peer.NewSealedSnapshot()
					require.NoError(t, err)
					var segs []ReplaceSegment
					for _, in := range sn.Segments() {
						var buf bytes.Buffer
						_, err := sn.Export(context.Background(), in.ID, &buf)
						require.NoError(t, err)
						segs = append(segs, ReplaceSegment{Digest: in.Digest, Size: in.Size, Data: &buf})
					}
					_, err = s.ReplaceAll(context.Background(), segs)
					require.NoError(t, err)
					require.NoError(t, sn.Close())
					exact = true
				}
				now := dumpStore(t, s)
				history = append(history, now)
				syncFollower(t, s, f)
				got := dumpStore(t, f)
				if exact {
					require.Equal(t, now, got, "step %d: the commit just made names the store's state", step)
				}
				found := -1
				for i := last; i < len(history); i++ {
					if maps.Equal(history[i], got) {
						found = i
						break
					}
				}
				require.GreaterOrEqual(t, found, 0, "step %d: the follower reads a state the store never showed (or an older one than before): %v", step, got)
				last = found
			}
			require.NoError(t, f.Check())
		})
	}
}

// sealedSnapshotState returns what s's sealed segments hold, read alone
// through a sealed snapshot (sealedState reads them through a follower,
// which is what a follower test checks).
func sealedSnapshotState(t *testing.T, s *Store) map[string]string {
	t.Helper()
	sn, err := s.NewSealedSnapshot()
	require.NoError(t, err)
	defer sn.Close()
	it, err := sn.NewIterator(nil)
	require.NoError(t, err)
	return dumpIter(t, it)
}

// bfStallReader returns half of data, then waits until the store has begun
// to close, then returns the rest slowly.
type bfStallReader struct {
	data []byte
	off  int
	s    *Store
	hit  chan struct{}
	once sync.Once
}

func (r *bfStallReader) Read(p []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	if r.off >= len(r.data)/2 {
		r.once.Do(func() { close(r.hit) })
		for !r.s.closed.Load() {
			time.Sleep(time.Millisecond)
		}
	}
	n := copy(p[:min(len(p), 64)], r.data[r.off:])
	r.off += n
	return n, nil
}

func (r *bfStallReader) Close() error { return nil }

// TestBreakCloseMidFollowAndImport: Close while a Follow, or an Import
// beneath unsealed writes, is reading its stream. The call ends with
// ErrClosed, Close returns, and the reopened store shows the state before
// the call, with no file of the call left behind.
func TestBreakCloseMidFollowAndImport(t *testing.T) {
	leader := mustOpen(t, "/l", unmergedOpts(vfs.NewMem()))
	defer leader.Close()
	bfPut(t, leader, "a", "1")
	require.NoError(t, leader.Seal())
	big := bytes.Repeat([]byte("x"), 1000)
	for i := range 40 {
		require.NoError(t, leader.Put(fmt.Appendf(nil, "big%02d", i), big))
	}
	require.NoError(t, leader.Seal())

	for _, kind := range []string{"follow", "import"} {
		t.Run(kind, func(t *testing.T) {
			mem := vfs.NewMem()
			opts := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, "/s", opts)
			if kind == "follow" {
				require.NoError(t, s.Follow(context.Background(), leader.ChangesSince(leader.ManifestSeq()+1), leaderOpen(leader, nil)))
				require.NoError(t, leader.Put([]byte("b"), big))
				require.NoError(t, leader.Seal())
			} else {
				bfPut(t, s, "mine", "1")
				require.NoError(t, s.Seal())
				bfPut(t, s, "big00", "live")
			}
			before := dumpStore(t, s)
			fseq := s.FollowedSeq()
			hit := make(chan struct{})
			res := make(chan error, 1)
			go func() {
				if kind == "follow" {
					ch := leader.ChangesSince(s.FollowedSeq())
					res <- s.Follow(context.Background(), ch, func(in SegmentInfo) (io.ReadCloser, error) {
						return &bfStallReader{data: bfExport(t, leader, in.ID), s: s, hit: hit}, nil
					})
					return
				}
				segs := leader.Segments()
				_, err := s.Import(context.Background(), &bfStallReader{data: bfExport(t, leader, segs[len(segs)-1].ID), s: s, hit: hit})
				res <- err
			}()
			<-hit
			require.NoError(t, s.Close())
			err := <-res
			require.ErrorIs(t, err, ErrClosed)

			g, err := openGated("/s", opts)
			require.NoError(t, err)
			require.Equal(t, before, dumpStore(t, g.Store))
			require.Equal(t, fseq, g.FollowedSeq())
			orph, err := orphans(mem, g.Store)
			require.NoError(t, err)
			require.Empty(t, orph)
			require.NoError(t, g.closeAll())
		})
	}
}

// TestBreakDeleteRangeRacingClose: a DeleteRange under SyncAlways that
// covers sealed segments whole, racing Close: if it was acknowledged, the
// reopened store has the range deleted and nothing else lost, whether or
// not its seal ran.
func TestBreakDeleteRangeRacingClose(t *testing.T) {
	for round := range 30 {
		mem := vfs.NewMem()
		opts := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
		s := mustOpen(t, "/s", opts)
		want := map[string]string{}
		for i := range 6 {
			k := fmt.Sprintf("k%d", i)
			bfPut(t, s, k, "v")
			want[k] = "v"
			require.NoError(t, s.Seal())
		}
		bfPut(t, s, "k9", "live")
		want["k9"] = "live"
		res := make(chan error, 1)
		go func() { res <- s.DeleteRange([]byte("k1"), []byte("k4")) }()
		if round%2 == 1 {
			runtime.Gosched()
		}
		cerr := s.Close()
		err := <-res
		if err == nil {
			delete(want, "k1")
			delete(want, "k2")
			delete(want, "k3")
		} else {
			require.ErrorIs(t, err, ErrClosed)
		}
		require.NoError(t, cerr)
		s = mustOpen(t, "/s", opts)
		require.Equal(t, want, dumpStore(t, s), "round %d (delete range: %v)", round, err)
		require.Equal(t, want, bfSealedOnlyOrLive(t, s, want), "round %d", round)
		checkAndClose(t, s)
	}
}

// bfSealedOnlyOrLive: the sealed set alone must be a state the store held:
// here, want or want before the range delete; it returns want when the
// sealed set reads want, or what it reads.
func bfSealedOnlyOrLive(t *testing.T, s *Store, want map[string]string) map[string]string {
	got := bfSealedOnly(t, s)
	// The live file (k9, perhaps the tombstone) may be unsealed: compare
	// what the sealed set holds of the sealed keys.
	delete(got, "k9")
	w := maps.Clone(want)
	delete(w, "k9")
	for _, k := range []string{"k1", "k2", "k3"} {
		if _, ok := w[k]; !ok {
			if _, ok := got[k]; ok {
				// The tombstone is not sealed: then nothing it covers was
				// dropped either (the sealed set is the state before it).
				for _, k2 := range []string{"k1", "k2", "k3"} {
					if _, ok := got[k2]; !ok {
						t.Fatalf("the sealed set drops %s but keeps %s: a state the store never held: %v", k2, k, got)
					}
				}
				return want
			}
		}
	}
	if !maps.Equal(got, w) {
		t.Fatalf("sealed set %v, want %v", got, w)
	}
	return want
}

// TestBreakChangesSinceRacingMerges: one writer writes and seals (and
// range-deletes) a leader whose background merges and a Compact loop fold
// its segments, while two followers follow it as fast as they can. Every
// state a follower reaches is a sealed state of the leader, in order; at
// the end both read the leader exactly.
func TestBreakChangesSinceRacingMerges(t *testing.T) {
	leader := mustOpen(t, "/l", &Options{FS: vfs.NewMem(), SegmentSize: 4 << 10, Merge: MergeOptions{MaxStepBytes: 4096, KeepWriteOrder: true}})
	defer leader.Close()
	var followers [2]*Store
	for i := range followers {
		followers[i] = mustOpen(t, fmt.Sprintf("/f%d", i), &Options{FS: vfs.NewMem(), SegmentSize: 4 << 10})
		defer followers[i].Close()
	}
	done := make(chan struct{})
	bfWatchdog(t, 60*time.Second, done)
	defer close(done)

	var mu sync.Mutex
	sealed := []model{{}} // the leader's states at its seals, in order
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		defer stop.Store(true)
		rng := rand.New(rand.NewPCG(1, 2))
		m := model{}
		for range 120 {
			// The state after the step is recorded before the step: a seal
			// (the range drop's own, a background one) may make it visible
			// before the step returns.
			if rng.IntN(6) == 0 {
				lo := rng.IntN(40)
				a, b := fmt.Sprintf("key-%03d", lo), fmt.Sprintf("key-%03d", lo+1+rng.IntN(10))
				m.deleteRange(a, b)
				mu.Lock()
				sealed = append(sealed, m.clone())
				mu.Unlock()
				if err := leader.DeleteRange([]byte(a), []byte(b)); err != nil {
					t.Error(err)
					return
				}
			} else {
				ops := randomOps(rng, 1+rng.IntN(5), 40)
				m.apply(ops)
				mu.Lock()
				sealed = append(sealed, m.clone())
				mu.Unlock()
				if err := applyOps(leader, ops); err != nil {
					t.Error(err)
					return
				}
			}
			if err := leader.Seal(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if err := leader.Compact(context.Background()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for _, f := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := 0
			for n := 0; !stop.Load() || n < 2; n++ {
				ch := leader.ChangesSince(f.FollowedSeq())
				err := f.Follow(context.Background(), ch, leaderOpen(leader, nil))
				if errors.Is(err, ErrNoSegment) {
					continue // merged away between ChangesSince and Export
				}
				if err != nil {
					t.Error(err)
					return
				}
				got := model(dumpStore(t, f))
				mu.Lock()
				found := -1
				for i := last; i < len(sealed); i++ {
					if maps.Equal(sealed[i], got) {
						found = i
						break
					}
				}
				mu.Unlock()
				if found < 0 {
					t.Errorf("after Follow to seq %d the follower reads a state the leader never sealed (or one older than %d): %v", ch.Seq, last, got)
					return
				}
				last = found
			}
		}()
	}
	wg.Wait()
	for _, f := range followers {
		syncFollower(t, leader, f)
		require.Equal(t, dumpStore(t, leader), dumpStore(t, f))
		require.NoError(t, f.Check())
	}
}
