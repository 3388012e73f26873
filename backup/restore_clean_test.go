package backup

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segkv/segkv/backup/bucket"
	"github.com/segkv/segkv/vfs"
)

// blockingBucket blocks every Get of a segment object until release is
// closed, and closes started at the first.
type blockingBucket struct {
	bucket.Bucket
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func newBlockingBucket(b bucket.Bucket) *blockingBucket {
	return &blockingBucket{Bucket: b, started: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockingBucket) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if strings.HasPrefix(key, segmentsDir) {
		b.once.Do(func() { close(b.started) })
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.Bucket.Get(ctx, key, off, length)
}

// restoreSiblings lists the names beside target that a restore into it
// makes (directories and lock files).
func restoreSiblings(t *testing.T, target string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(target))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "."+filepath.Base(target)+".restore-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestKilledRestoreHelper is the process TestRestoreCleansKilledRestore
// kills: a restore that blocks on its first segment, its store open.
func TestKilledRestoreHelper(t *testing.T) {
	root, target := os.Getenv("SEGKV_KILLED_RESTORE_BUCKET"), os.Getenv("SEGKV_KILLED_RESTORE_TARGET")
	if root == "" {
		t.Skip("run by TestRestoreCleansKilledRestore")
	}
	b, err := bucket.NewLocal(nil, root)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Restore(context.Background(), newBlockingBucket(b), target, nil)
	t.Fatalf("the blocked restore returned: %v", err)
}

// TestRestoreCleansKilledRestore is issue 28 item 6: a restore killed
// while it builds its store leaves its hidden .<name>.restore-* directory
// beside the target, which nothing removed. The next restore into the
// same target removes it (and its lock file), leaves alone a directory of
// another target and one it cannot prove abandoned, and succeeds.
func TestRestoreCleansKilledRestore(t *testing.T) {
	if os.Getenv("SEGKV_KILLED_RESTORE_BUCKET") != "" {
		t.Skip("in the helper process")
	}
	_, b, root := localScenario(t)
	parent := t.TempDir()
	target := filepath.Join(parent, "r")

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledRestoreHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SEGKV_KILLED_RESTORE_BUCKET="+root, "SEGKV_KILLED_RESTORE_TARGET="+target)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the child's store is open (its LOCK held) in its
	// temporary directory, then kill it.
	var killed string
	deadline := time.Now().Add(60 * time.Second)
	for killed == "" {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the restore to kill never opened its store")
		}
		time.Sleep(10 * time.Millisecond)
		for _, n := range restoreSiblings(t, target) {
			p := filepath.Join(parent, n)
			if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
				continue
			}
			if l, err := vfs.NewOS().Lock(filepath.Join(p, "LOCK")); errors.Is(err, vfs.ErrLocked) {
				killed = p
			} else if err == nil {
				l.Close()
			}
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if _, err := os.Stat(killed); err != nil {
		t.Fatalf("the killed restore left nothing: %v", err)
	}

	// Beside it: another target's directory, and one a restore that
	// holds its lock is using (both must stay).
	other := filepath.Join(parent, ".rx.restore-0123456789ab")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	busy := filepath.Join(parent, ".r.restore-00000000beef")
	if err := os.MkdirAll(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	hold, err := vfs.NewOS().Lock(busy + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()

	res, err := Restore(context.Background(), b, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{killed, killed + ".lock"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left after the next restore (%v)", p, err)
		}
	}
	for _, p := range []string{other, busy, busy + ".lock"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s, not provably abandoned, was removed: %v", p, err)
		}
	}
	if len(res.Cleaned) != 1 || res.Cleaned[0] != killed || len(res.CleanErrors) != 0 {
		t.Fatalf("Cleaned %v, CleanErrors %v; want [%s]", res.Cleaned, res.CleanErrors, killed)
	}
	r2 := filepath.Join(t.TempDir(), "r2")
	want, err := Restore(context.Background(), b, r2, nil)
	if err != nil || want.Seq != res.Seq {
		t.Fatalf("second restore: %+v %v", want, err)
	}
	if got, w := readStore(t, target), readStore(t, r2); !maps.Equal(got, w) || len(got) == 0 {
		t.Fatalf("restored %d keys, want %d", len(got), len(w))
	}
}

// Two restores into the same target at once: the cleanup of the second
// never touches the first's directory, which is in use; the second wins
// the target, the first fails at its rename and removes its own directory
// and lock file. CleanRestores on its own does the same.
func TestConcurrentRestoresKeepEachOthersDirectories(t *testing.T) {
	_, b, _ := localScenario(t)
	target := filepath.Join(t.TempDir(), "r")
	bb := newBlockingBucket(b)
	type result struct {
		res RestoreResult
		err error
	}
	first := make(chan result, 1)
	go func() {
		res, err := Restore(context.Background(), bb, target, nil)
		first <- result{res, err}
	}()
	<-bb.started
	running := restoreSiblings(t, target)
	if len(running) != 2 { // the directory and its lock file
		t.Fatalf("running restore: %v", running)
	}
	removed, err := CleanRestores(vfs.NewOS(), target)
	if err != nil || len(removed) != 0 {
		t.Fatalf("CleanRestores removed %v (%v) while a restore ran", removed, err)
	}
	res, err := Restore(context.Background(), b, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cleaned) != 0 {
		t.Fatalf("the second restore removed %v", res.Cleaned)
	}
	if got := restoreSiblings(t, target); len(got) != 2 || got[0] != running[0] {
		t.Fatalf("the running restore's files: %v, want %v", got, running)
	}
	close(bb.release)
	r := <-first
	if r.err == nil {
		t.Fatal("the first restore renamed onto the second's target")
	}
	if got := restoreSiblings(t, target); len(got) != 0 {
		t.Fatalf("the failed restore left %v", got)
	}
	if len(readStore(t, target)) == 0 {
		t.Fatal("empty restore")
	}
}
