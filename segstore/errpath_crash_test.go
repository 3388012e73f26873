package segstore

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

// TestCrashAfterFailedReadOrBuild makes a read or an index build fail inside
// a seal, a merge (Compact) and an import, then takes a power-loss image in
// every crash mode right after the failure and after each later operation,
// and opens each image. The store must never lose or alter an acknowledged
// write: a seal past its switch completes (a read that fails once is
// retried) or fails the store, leaving the frozen file for recovery to
// finish; a merge or an import that fails changes nothing. Every write runs
// under SyncAlways, so each image must show exactly the acknowledged writes.
func TestCrashAfterFailedReadOrBuild(t *testing.T) {
	type failure struct {
		name string
		arm  func(ft *vfs.Faulty, build *atomic.Pointer[string], target string)
	}
	failures := []failure{
		// The control: the harness itself must see no loss.
		{"none", func(*vfs.Faulty, *atomic.Pointer[string], string) {}},
		{"read-once", func(ft *vfs.Faulty, _ *atomic.Pointer[string], target string) {
			require.NoError(t, ft.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Match: suffixMatch(target)}))
		}},
		{"read-persistent", func(ft *vfs.Faulty, _ *atomic.Pointer[string], target string) {
			require.NoError(t, ft.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: true, Match: suffixMatch(target)}))
		}},
		{"short-read-persistent", func(ft *vfs.Faulty, _ *atomic.Pointer[string], target string) {
			require.NoError(t, ft.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: true, Short: true, Match: suffixMatch(target)}))
		}},
		{"build", func(_ *vfs.Faulty, build *atomic.Pointer[string], target string) {
			build.Store(&target)
		}},
	}
	for _, op := range []string{"seal", "merge", "import"} {
		for _, f := range failures {
			t.Run(op+"/"+f.name, func(t *testing.T) {
				runFailedOpCrash(t, op, f.name, f.arm)
			})
		}
	}
}

// suffixMatch selects paths ending in suffix (an extension, or "" for all).
func suffixMatch(suffix string) func(string) bool {
	return func(p string) bool { return strings.HasSuffix(p, suffix) }
}

func runFailedOpCrash(t *testing.T, op, failName string, arm func(*vfs.Faulty, *atomic.Pointer[string], string)) {
	rng := rand.New(rand.NewPCG(7, uint64(len(op))))
	const keySpace = 60
	keys := append(keyNames(keySpace), "imp-00")

	// A peer segment for the import (a key of its own, so the model is
	// simple: present once the import is acknowledged).
	peerFS := vfs.NewMem()
	peer := mustOpen(t, "/peer", &Options{FS: peerFS})
	require.NoError(t, peer.Put([]byte("imp-00"), []byte("from-peer")))
	stream := exportNewest(t, peer)
	require.NoError(t, peer.Close())

	mem := vfs.NewMem()
	ft := vfs.NewFaulty(mem)
	var failBuild atomic.Pointer[string] // suffix of the path whose build fails
	o := &Options{FS: ft, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}
	s, err := open("/db", o, testHooks{beforeBuild: func(p string) error {
		if suf := failBuild.Load(); suf != nil && strings.HasSuffix(p, *suf) {
			return fmt.Errorf("injected build failure: %w", vfs.ErrInjected)
		}
		return nil
	}})
	require.NoError(t, err)

	m := model{}
	put := func() error {
		ops := randomOps(rng, 1+rng.IntN(4), keySpace)
		err := applyOps(s, ops)
		if err == nil {
			m.apply(ops)
		} else {
			require.ErrorIs(t, err, ErrFailed, "a write after the failure")
		}
		return err
	}
	// History: three sealed segments (merge inputs) and a live file.
	for range 3 {
		for range 20 {
			require.NoError(t, put())
		}
		require.NoError(t, s.Seal())
	}
	for range 20 {
		require.NoError(t, put())
	}

	var images []*vfs.Mem
	var labels []string
	var wants []model // the acknowledged state when each image was taken
	snap := func(when string) {
		for _, mode := range testutil.CrashModes() {
			images = append(images, mem.CrashClone(mode, rng))
			labels = append(labels, fmt.Sprintf("%s, %v", when, mode))
			wants = append(wants, m.clone())
		}
	}

	// The operation, with its failure armed for that operation's files only.
	var opErr error
	importAcked := false
	switch op {
	case "seal":
		arm(ft, &failBuild, filepath.Base(rlTailPath(s)))
		opErr = s.Seal()
	case "merge":
		arm(ft, &failBuild, "") // every read and build of the merge
		opErr = s.Compact(t.Context())
	case "import":
		arm(ft, &failBuild, ".seg")
		var r io.Reader = bytes.NewReader(stream)
		if failName != "build" {
			// An import reads its stream, not a file: fail the stream.
			r = io.MultiReader(bytes.NewReader(stream[:len(stream)/2]), errReader{vfs.ErrInjected})
		}
		_, opErr = s.Import(t.Context(), r)
		importAcked = opErr == nil
	}
	ft.Clear()
	failBuild.Store(nil)
	if importAcked {
		m["imp-00"] = "from-peer"
	}
	t.Logf("%s: %v (store failed: %v)", op, opErr, s.failed() != nil)
	if opErr != nil && op == "seal" {
		// Past the switch there is no going back: a seal that reports an
		// error has failed the store.
		require.ErrorIs(t, opErr, ErrFailed)
	}
	if op != "seal" && opErr != nil {
		require.NoError(t, s.failed(), "a failed %s changed nothing and must not fail the store", op)
	}
	// Reads still answer from acknowledged history.
	require.NoError(t, fullDiff(s, m, keys))
	snap("right after the failed " + op)
	for i := range 6 {
		put()
		if i%3 == 2 {
			if err := s.Seal(); err != nil {
				require.ErrorIs(t, err, ErrFailed)
			}
		}
		snap(fmt.Sprintf("after operation %d following the failure", i))
	}
	require.NoError(t, fullDiff(s, m, keys))
	s.Close()
	images = append(images, mem)
	labels = append(labels, "clean close")
	wants = append(wants, m)

	for i, img := range images {
		requireImageHolds(t, img, &Options{FS: img, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}, wants[i], keys, labels[i])
	}
}

// errReader fails every Read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
