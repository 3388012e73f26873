package segstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/vfs"
)

// Corruption that no crash can produce: random bit flips in a sealed data
// file, an index file or the manifest generation of a small store. Every
// trial must end, for every key, in the right answer or in a typed
// corruption error (*CorruptionError) that names the damaged file: never a
// wrong value, never a panic, and never an error (or a loss) for data that
// lives outside the damaged file. Verify must list a sealed segment whose
// data file was damaged, and nothing else.

// corruptFixture is a closed store's files and the state they hold.
type corruptFixture struct {
	files  map[string][]byte
	want   model
	keys   []string
	data   []string          // sealed data files
	idx    []string          // their index files
	mani   []string          // manifest generations
	owner  map[string]string // key -> the data file holding its newest version
	frames []frameSpan       // frames of the manifest generation
}

func buildCorruptFixture(t *testing.T) *corruptFixture {
	t.Helper()
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	want := model{}
	rng := rand.New(rand.NewPCG(8, 8))
	put := func(n int) {
		for range n {
			k := fmt.Sprintf("key-%03d", rng.IntN(120))
			if rng.IntN(6) == 0 {
				require.NoError(t, s.Delete([]byte(k)))
				delete(want, k)
				continue
			}
			v := fmt.Sprintf("%s=%d", k, rng.Uint32())
			require.NoError(t, s.Put([]byte(k), []byte(v)))
			want[k] = v
		}
	}
	// Two segments merged into one ".seg", two more sealed ".log" segments,
	// an imported ".seg", a checkpoint in between, a final seal as the last
	// manifest commit, and a live file with unsealed writes.
	put(60)
	require.NoError(t, s.Seal())
	put(60)
	require.NoError(t, s.Seal())
	require.NoError(t, s.Compact(t.Context()))
	require.NoError(t, s.mlog.Checkpoint())
	put(60)
	require.NoError(t, s.Seal())
	peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	for i := range 30 {
		k, v := fmt.Sprintf("key-%03d", 90+i), fmt.Sprintf("peer-%d", i)
		require.NoError(t, peer.Put([]byte(k), []byte(v)))
		want[k] = v
	}
	stream := exportNewest(t, peer)
	require.NoError(t, peer.Close())
	_, err := s.Import(t.Context(), readers([][]byte{stream})...)
	require.NoError(t, err)
	put(60)
	require.NoError(t, s.Seal())
	put(20)
	fx := &corruptFixture{files: map[string][]byte{}, want: want, keys: keyNames(120)}
	fx.data, fx.idx = dataPaths(s)
	require.Len(t, fx.data, 4)
	fx.owner = keyOwners(s, fx.keys)
	require.NoError(t, s.Close())
	for _, p := range mem.FileNames() {
		if !strings.HasPrefix(p, "/db/") || strings.HasSuffix(p, "/LOCK") {
			continue
		}
		b, err := mem.ReadFile(p)
		require.NoError(t, err)
		fx.files[p] = b
		if strings.HasPrefix(filepath.Base(p), "MANIFEST-") {
			fx.mani = append(fx.mani, p)
		}
	}
	slices.Sort(fx.mani)
	require.Len(t, fx.mani, 1)
	fx.frames = manifestFrames(t, fx.files[fx.mani[0]])
	return fx
}

// keyOwners maps each key to the data file that holds its newest version
// (live file or sealed segment), as a point read finds it.
func keyOwners(s *Store, keys []string) map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]string{}
	for _, k := range keys {
		if _, ok, _ := s.mu.tail.lookup([]byte(k)); ok {
			out[k] = s.mu.tail.path
			continue
		}
		for _, sg := range s.mu.segs {
			probe := index.NewProbe([]byte(k))
			if _, ok, _ := sg.index().Get(&probe); ok {
				out[k] = sg.df.path
				break
			}
		}
	}
	return out
}

// image returns a fresh Mem holding the fixture with path replaced by data.
func (fx *corruptFixture) image(t *testing.T, path string, data []byte) *vfs.Mem {
	mem := vfs.NewMem()
	for p, b := range fx.files {
		if p == path {
			b = data
		}
		require.NoError(t, mem.WriteFile(p, b))
	}
	return mem
}

// flipBits flips 1-3 random bits of a copy of orig. For a (preallocated)
// manifest most flips aim at its records, not at the zeros after them.
func flipBits(rng *rand.Rand, orig []byte, manifest bool) ([]byte, []int) {
	b := slices.Clone(orig)
	span := len(b)
	if manifest && rng.IntN(10) != 0 {
		span = usedLen(orig)
	}
	var where []int
	for range 1 + rng.IntN(3) {
		pos := rng.IntN(span)
		b[pos] ^= 1 << rng.IntN(8)
		where = append(where, pos)
	}
	return b, where
}

// frameSpan is one wal frame of a file: [off, end), with its watermark.
type frameSpan struct {
	off, end int64
	wm       uint64
}

// manifestFrames lists the frames of a manifest generation.
func manifestFrames(t *testing.T, b []byte) []frameSpan {
	var out []frameSpan
	for _, fr := range testutil.Frames(t, b, "/m", 0) {
		out = append(out, frameSpan{fr.Off, fr.Off + fr.Size(), fr.Watermark})
	}
	return out
}

// bothCopiesDamaged reports whether flips at where damage the manifest's
// last frame (the replica of the last group) and another frame of that
// group (the frames sharing its watermark). Nothing is left then to restore
// the group from, or to vouch that it had been synced: it is dropped like a
// torn write, the format's stated limit (two faults in the last group).
func bothCopiesDamaged(frames []frameSpan, where []int) bool {
	if len(frames) == 0 {
		return false
	}
	last := frames[len(frames)-1]
	hit := func(f frameSpan) bool {
		for _, w := range where {
			if int64(w) >= f.off && int64(w) < f.end {
				return true
			}
		}
		return false
	}
	if !hit(last) {
		return false
	}
	for _, f := range frames[:len(frames)-1] {
		if f.wm == last.wm && hit(f) {
			return true
		}
	}
	return false
}

// usedLen is the length of b without its trailing zeros.
func usedLen(b []byte) int {
	n := len(b)
	for n > 1 && b[n-1] == 0 {
		n--
	}
	return n
}

// namesFile reports whether err is a typed corruption error naming path.
func namesFile(err error, path string) bool {
	var ce *CorruptionError
	return errors.As(err, &ce) && filepath.Clean(ce.Path) == filepath.Clean(path)
}

// corruptTally counts trial outcomes.
type corruptTally struct {
	trials, clean, openRefused, readErrors, verifyFound, wrong int
}

func (c corruptTally) String() string {
	return fmt.Sprintf("trials %d: all answers right %d, Open refused with a typed error naming the file %d, reads with a typed error naming the file %d, Verify listed the damaged segment %d, wrong answers %d",
		c.trials, c.clean, c.openRefused, c.readErrors, c.verifyFound, c.wrong)
}

func TestReliabilityCorruption(t *testing.T) {
	n := 1000
	if v := os.Getenv("SEGKV_CORRUPT_TRIALS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	fx := buildCorruptFixture(t)
	rng := rand.New(rand.NewPCG(13, 14))
	tallies := map[string]*corruptTally{"data": {}, "index": {}, "manifest": {}}
	classes := map[string][]string{"data": fx.data, "index": fx.idx, "manifest": fx.mani}
	order := []string{"data", "index", "manifest"}
	tailDraws := 0
	for i := 0; i < 3*n; i++ {
		class := order[i%3]
		files := classes[class]
		path := files[rng.IntN(len(files))]
		orig := fx.files[path]
		var b []byte
		var where []int
		for {
			b, where = flipBits(rng, orig, class == "manifest")
			// Damage to both copies of the last group is the format's
			// stated limit (TestReplicaBothCopiesDamaged in manifestlog).
			if class != "manifest" || !bothCopiesDamaged(fx.frames, where) {
				break
			}
			tailDraws++
		}
		tl := tallies[class]
		tl.trials++
		if slices.Equal(b, orig) {
			tl.clean++ // two flips cancelled out
			continue
		}
		if err := corruptTrial(t, fx, class, path, b, tl); err != nil {
			tl.wrong++
			if tl.wrong <= 10 {
				t.Errorf("%s flip at %v of %s (%d bytes): %v", class, where, path, len(b), err)
			}
		}
	}
	total := 0
	wrong := 0
	for _, c := range order {
		t.Logf("%-8s %v", c, tallies[c])
		total += tallies[c].trials
		wrong += tallies[c].wrong
	}
	t.Logf("manifest draws that damaged both copies of the last group, redrawn (the format's stated limit): %d", tailDraws)
	t.Logf("corruption trials: %d, wrong answers: %d", total, wrong)
	require.Zero(t, wrong)
}

// corruptTrial opens the fixture with path damaged and checks every answer.
func corruptTrial(t *testing.T, fx *corruptFixture, class, path string, damaged []byte, tl *corruptTally) error {
	mem := fx.image(t, path, damaged)
	s, err := Open("/db", &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	if err != nil {
		if class == "manifest" && (namesFile(err, path) || errors.Is(err, manifestlog.ErrUnsupportedVersion) && strings.Contains(err.Error(), path)) {
			tl.openRefused++
			return nil
		}
		return fmt.Errorf("open: %w", err)
	}
	defer s.Close()
	if err := corruptAnswers(t, fx, s, class, path, tl); err != nil {
		return fmt.Errorf("%w\nmanifest report %+v\nrecovery report %+v\nsegments %+v\nfiles %v", err, s.mreport, s.RecoveryReport(), s.Segments(), mem.FileNames())
	}
	return nil
}

func corruptAnswers(t *testing.T, fx *corruptFixture, s *Store, class, path string, tl *corruptTally) error {
	readErr := false
	for _, k := range fx.keys {
		v, err := s.Get([]byte(k))
		want, ok := fx.want[k]
		switch {
		case err != nil && class == "data" && namesFile(err, path) && fx.owner[k] == path:
			readErr = true // only a key whose newest version is in the damaged file
		case err != nil && !errors.Is(err, ErrNotFound):
			return fmt.Errorf("get %s: %w", k, err)
		case err != nil && ok:
			return fmt.Errorf("get %s: not found, want %q", k, want)
		case err == nil && !ok:
			return fmt.Errorf("get %s: %q, want absent", k, v)
		case err == nil && string(v) != want:
			return fmt.Errorf("get %s: WRONG VALUE %q, want %q", k, v, want)
		}
	}
	// An ordered scan agrees, value by value.
	it, err := s.NewIterator(nil)
	if err != nil {
		return err
	}
	seen := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := string(it.Key())
		want, present := fx.want[k]
		v, err := it.Value()
		switch {
		case err != nil && class == "data" && namesFile(err, path) && fx.owner[k] == path:
			readErr = true
		case err != nil:
			it.Close()
			return fmt.Errorf("scan %s: %w", k, err)
		case !present:
			it.Close()
			return fmt.Errorf("scan: %s present, want absent", k)
		case string(v) != want:
			it.Close()
			return fmt.Errorf("scan %s: WRONG VALUE %q, want %q", k, v, want)
		}
		seen++
	}
	scanErr := it.Err()
	if scanErr != nil && !(class == "data" && namesFile(scanErr, path)) {
		it.Close()
		return fmt.Errorf("scan: %w", scanErr)
	}
	it.Close()
	if scanErr != nil {
		// A damaged block of a block file stops the walk of the keys (the
		// keys are in the block): every key before it was checked above.
		readErr = true
	} else if seen != len(fx.want) {
		return fmt.Errorf("scan saw %d keys, want %d", seen, len(fx.want))
	}
	if readErr {
		tl.readErrors++
	}
	if class == "index" {
		// The index is a cache: any damage is rebuilt from the data file,
		// at Open (the top block) or at the first read of the damaged part
		// (a key block or bloom chunk), and the gets and the scan above
		// read every part.
		if n := s.Metrics().IndexRebuilds; n != 1 {
			return fmt.Errorf("damaged index rebuilt %d times, want 1: report %+v", n, s.RecoveryReport())
		}
	}
	rep, err := s.Verify(t.Context())
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if class == "data" {
		if len(rep.Damaged) != 1 || !namesFile(rep.Damaged[0], path) {
			return fmt.Errorf("verify after damage to %s: %v", path, rep.Damaged)
		}
		tl.verifyFound++
		if err := s.Check(); !errors.Is(err, ErrCorrupt) {
			return fmt.Errorf("check after damage to a data file: %v, want ErrCorrupt", err)
		}
		return nil
	}
	if len(rep.Damaged) != 0 {
		return fmt.Errorf("verify lists undamaged segments: %v", rep.Damaged)
	}
	if err := s.Check(); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if !readErr {
		tl.clean++
	}
	return nil
}

// TestReliabilityManifestTailDamage: damage confined to the last group of
// the manifest (an acknowledged import and its replica), followed by
// acknowledged writes to the live file. No later frame vouches, by its
// watermark, that those bytes had been synced, so without the replica a flip
// there would look like a torn tail and drop the import while the later
// writes stay: not a prefix of history. Every byte of the group is flipped
// in turn; every trial must open to the full history, and reopen clean.
func TestReliabilityManifestTailDamage(t *testing.T) {
	mem := vfs.NewMem()
	// Small segments: every trial opens the store twice, and each Open
	// scans the live file's preallocated zeros.
	o := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	require.NoError(t, s.Put([]byte("k"), []byte("old")))
	require.NoError(t, s.Seal())
	peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem()})
	require.NoError(t, peer.Put([]byte("k"), []byte("imported")))
	stream := exportNewest(t, peer)
	require.NoError(t, peer.Close())
	_, err := s.Import(t.Context(), readers([][]byte{stream})...)
	require.NoError(t, err)
	require.NoError(t, s.Put([]byte("later"), []byte("write")))
	want := model{"k": "imported", "later": "write"}
	require.NoError(t, fullDiff(s, want, nil))
	mani := s.mreport.Path
	require.NoError(t, s.Close())
	img := mem.CrashClone(vfs.CrashDropUnsynced, nil)

	orig, err := img.ReadFile(mani)
	require.NoError(t, err)
	frames := manifestFrames(t, orig)
	last := frames[len(frames)-1]
	groupStart := last.off
	for _, f := range frames {
		if f.wm == last.wm {
			groupStart = min(groupStart, f.off)
		}
	}
	require.Less(t, groupStart, last.off, "the last group is the import's edit and its replica")
	trials := 0
	for off := groupStart; off < last.end; off++ {
		trial := img.CrashClone(vfs.CrashDropUnsynced, nil)
		b := slices.Clone(orig)
		b[off] ^= 1 << (off % 8)
		require.NoError(t, trial.WriteFile(mani, b))
		to := &Options{FS: trial, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
		st, err := Open("/db", to)
		require.NoError(t, err, "flip at %d", off)
		require.NoError(t, fullDiff(st, want, nil), "flip at %d: manifest report %+v", off, st.mreport)
		require.NotEmpty(t, st.mreport.Actions, "flip at %d went unnoticed", off)
		require.NoError(t, st.Close())
		st = mustOpen(t, "/db", to)
		require.Empty(t, st.mreport.Actions, "flip at %d: the repair left work for the next Open", off)
		require.NoError(t, fullDiff(st, want, nil))
		require.NoError(t, st.Close())
		trials++
	}
	t.Logf("manifest tail damage: %d one-bit flips across the last group (import edit + replica), wrong answers: 0", trials)
}
