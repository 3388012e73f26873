package segstore

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// TestOpenFilesBounded reads from many segments concurrently with a small
// MaxOpenFiles: every read is right and idle files are closed down to the bound.
func TestOpenFilesBounded(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, MaxOpenFiles: 4, Merge: MergeOptions{Disable: true}})
	const segs = 20
	for i := 0; i < segs; i++ {
		require.NoError(t, s.Put([]byte(fmt.Sprint("k", i)), []byte(fmt.Sprint("v", i))))
		require.NoError(t, s.Seal())
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 50; r++ {
				i := (g*7 + r) % segs
				v, err := s.Get([]byte(fmt.Sprint("k", i)))
				if err != nil || string(v) != fmt.Sprint("v", i) {
					t.Errorf("get k%d = %q, %v", i, v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, s.Metrics().OpenFiles, 4)
	checkAndClose(t, s)
}
