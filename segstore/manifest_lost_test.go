package segstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
)

// TestDamagedLoneManifestIsRefused: a store whose only manifest generation
// was emptied, zeroed or removed (damage, not a crash: generation 1 is
// complete and durable before any data file exists) is refused, writable
// and read-only alike, and nothing in the directory changes. An emptied or
// zeroed generation 1 used to be taken for a store a crash left while
// creating it: Open re-created the empty state and then removed every data
// file as uncommitted, losing every write.
func TestDamagedLoneManifestIsRefused(t *testing.T) {
	damage := map[string]func(t *testing.T, path string){
		"emptied": func(t *testing.T, path string) { require.NoError(t, os.Truncate(path, 0)) },
		"zeroed": func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, make([]byte, fi.Size()), 0o644))
		},
		"removed": func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) },
	}
	for name, harm := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, dir, &Options{Merge: MergeOptions{Disable: true}})
			for i := range 50 {
				require.NoError(t, s.Put(fmt.Appendf(nil, "k%03d", i), []byte("v")))
				if i == 20 {
					require.NoError(t, s.Seal())
				}
			}
			require.NoError(t, s.Close())
			var manifests []string
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), "MANIFEST-") {
					manifests = append(manifests, filepath.Join(dir, e.Name()))
				}
			}
			require.Len(t, manifests, 1, "a store that never rotated: generation 1 alone")
			harm(t, manifests[0])
			before := dirDigest(t, dir)

			for _, ro := range []bool{true, false} {
				_, err := Open(dir, &Options{ReadOnly: ro})
				testutil.RequireCorrupt(t, err, "read-only %v", ro)
				require.Equal(t, before, dirDigest(t, dir), "read-only %v: the refused open changed the directory", ro)
			}
		})
	}
}
