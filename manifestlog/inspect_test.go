package manifestlog

import (
	"path"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/vfs"
)

func TestInspect(t *testing.T) {
	fsys := vfs.NewMem()
	l, _, _ := openLog(t, fsys, Options{})
	var w workload
	for range 6 {
		_, err := l.Commit(w.edit())
		require.NoError(t, err)
	}
	require.NoError(t, l.Checkpoint())
	for range 3 {
		_, err := l.Commit(w.edit())
		require.NoError(t, err)
	}
	want := l.State()
	require.NoError(t, l.Close())

	infos, err := Inspect(fsys, testDir)
	require.NoError(t, err)
	require.Len(t, infos, 1, "Open removed the generation the checkpoint replaced")
	g := infos[0]
	require.NoError(t, g.Err)
	require.True(t, g.Activated)
	require.Equal(t, uint64(2), g.Generation)
	requireStateEqual(t, want, g.State)
	require.Equal(t, uint64(6), g.CheckpointSeq)
	require.Equal(t, 3, g.Edits)
	require.Zero(t, g.TornBytes)
	require.Empty(t, g.RestorableFrames)
	var kinds []string
	var seqs []uint64
	for _, r := range g.Records {
		kinds = append(kinds, r.Kind)
		if r.Kind == "edit" {
			seqs = append(seqs, r.Seq)
		}
	}
	require.Equal(t, "header", kinds[0])
	require.Equal(t, "checkpoint", kinds[1])
	require.Contains(t, kinds, "activate")
	require.Equal(t, []uint64{7, 8, 9}, seqs)
	require.Equal(t, "replica", kinds[len(kinds)-1], "every group ends with its replica")
	require.Len(t, g.Records, g.Frames)

	// A torn tail and a damaged frame are reported, and nothing is written.
	p := path.Join(testDir, genName(2))
	orig, err := fsys.ReadFile(p)
	require.NoError(t, err)
	torn := append(copyBytes(orig[:g.End]), 0xde, 0xad, 0xbe, 0xef)
	writeRaw(t, fsys, p, torn)
	infos, err = Inspect(fsys, testDir)
	require.NoError(t, err)
	require.NoError(t, infos[0].Err)
	require.Equal(t, g.End, infos[0].End)
	require.Positive(t, infos[0].TornBytes)
	after, err := fsys.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, torn, after, "Inspect wrote to the file")

	damaged := copyBytes(orig)
	hit := g.Records[2] // the checkpoint's first segments record, which later frames vouch for
	require.Equal(t, "segments", hit.Kind)
	damaged[hit.Off+30] ^= 0x40
	writeRaw(t, fsys, p, damaged)
	infos, err = Inspect(fsys, testDir)
	require.NoError(t, err)
	var ce *corruption.Error
	require.ErrorAs(t, infos[0].Err, &ce)
	require.Equal(t, p, ce.Path)
	require.Equal(t, hit.Off, ce.Offset)
	require.Len(t, infos[0].Records, 2, "the header and the checkpoint precede the damage")
}

// TestRecordKindString: every record kind has the name Inspect reports, and
// an unknown one says its number.
func TestRecordKindString(t *testing.T) {
	want := []string{"header", "checkpoint", "segments", "edit", "activate", "replica"}
	for i, name := range want {
		require.Equal(t, name, recordKind(i+1).String())
	}
	require.Equal(t, "kind 0", recordKind(0).String())
	require.Equal(t, "kind 9", recordKind(9).String())
}
