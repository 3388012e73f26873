package manifestlog

import (
	"encoding/binary"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

const testDir = "db"

// seg returns deterministic metadata for id.
func seg(id uint64) SegmentMeta {
	return SegmentMeta{
		ID:            id,
		FileKind:      segment.FileKind(max(id%3, 1)), // KindLog or KindSeg, as the golden file's ids were written
		Order:         id * 2,
		DataLength:    int64(id*100 + 16),
		DataDigest:    id * 0x9e3779b97f4a7c15,
		IndexChecksum: id ^ 0xabcdef,
		Records:       id + 10,
		Keys:          id + 5,
		MinKey:        fmt.Appendf(nil, "key-%08d-a", id),
		MaxKey:        fmt.Appendf(nil, "key-%08d-z", id),
	}
}

// model applies edits the way the log must, for comparison.
type model struct{ st State }

func newModel() *model { return &model{st: State{Segments: map[uint64]SegmentMeta{}}} }

func (m *model) apply(e Edit) {
	m.st.Seq++
	for _, id := range e.Remove {
		delete(m.st.Segments, id)
	}
	nextID := max(m.st.NextID, e.NextID)
	for _, s := range e.Add {
		s.AddedSeq = m.st.Seq
		if len(s.MinKey) == 0 {
			s.MinKey = nil
		}
		if len(s.MaxKey) == 0 {
			s.MaxKey = nil
		}
		m.st.Segments[s.ID] = s
		nextID = max(nextID, s.ID+1)
	}
	if e.SetLive {
		m.st.LiveID = e.LiveID
		if e.LiveID != 0 {
			nextID = max(nextID, e.LiveID+1)
		}
	}
	m.st.NextID = nextID
	m.st.NextOrder = max(m.st.NextOrder, e.NextOrder)
	if e.SetFollowed {
		m.st.Followed = e.Followed
	}
	if e.ForgetAdopted {
		m.st.Adopted = nil
	}
	m.st.Adopted = append(m.st.Adopted, e.Adopt...)
	if n := len(m.st.Adopted); n > AdoptedMemory {
		m.st.Adopted = slices.Clone(m.st.Adopted[n-AdoptedMemory:])
	}
}

func (m *model) clone() State {
	s := m.st
	s.Segments = maps.Clone(m.st.Segments)
	s.Adopted = slices.Clone(m.st.Adopted)
	return s
}

// requireStateEqual compares two states, treating empty and nil keys alike.
func requireStateEqual(t testing.TB, want, got State, msgAndArgs ...any) {
	t.Helper()
	norm := func(s State) State {
		out := s
		out.Segments = make(map[uint64]SegmentMeta, len(s.Segments))
		for id, m := range s.Segments {
			if len(m.MinKey) == 0 {
				m.MinKey = nil
			}
			if len(m.MaxKey) == 0 {
				m.MaxKey = nil
			}
			out.Segments[id] = m
		}
		if len(out.Adopted) == 0 {
			out.Adopted = nil
		}
		return out
	}
	require.Equal(t, norm(want), norm(got), msgAndArgs...)
}

// workload produces a deterministic mix of adds, removes, merges and live
// switches. It keeps its own view of which ids are live.
type workload struct {
	next uint64
	live []uint64
	step int
}

func (w *workload) edit() Edit {
	w.step++
	var e Edit
	switch {
	case w.step%7 == 0 && len(w.live) >= 3:
		// merge: add one, remove two
		w.next++
		e.Add = []SegmentMeta{seg(w.next)}
		e.Remove = []uint64{w.live[0], w.live[1]}
		w.live = append(w.live[2:], w.next)
	case w.step%5 == 0 && len(w.live) > 0:
		e.Remove = []uint64{w.live[0]}
		w.live = w.live[1:]
	case w.step%11 == 0:
		w.next++
		e.SetLive, e.LiveID = true, w.next
	default:
		w.next++
		e.Add = []SegmentMeta{seg(w.next)}
		w.live = append(w.live, w.next)
		if w.step%4 == 1 {
			// A follower's commit: a mirrored segment and the seq it reflects.
			e.Add[0].Origin = w.next * 3
			e.SetFollowed, e.Followed = true, uint64(w.step)*5
		}
		if w.step%6 == 2 {
			e.Adopt = []uint64{e.Add[0].DataDigest}
		}
		if w.step%13 == 3 {
			e.ForgetAdopted = true
		}
	}
	e.NextID = w.next + 1
	e.NextOrder = uint64(w.step) * 2
	return e
}

func openLog(t testing.TB, fsys vfs.FS, opts Options) (*Log, State, Report) {
	t.Helper()
	l, st, rep, err := Open(fsys, testDir, opts)
	require.NoError(t, err)
	return l, st, rep
}

// manifestFiles lists the manifest generation files in testDir.
func manifestFiles(t testing.TB, fsys vfs.FS) []string {
	t.Helper()
	gens, err := listGenerations(fsys, testDir)
	require.NoError(t, err)
	var out []string
	for _, g := range gens {
		out = append(out, g.path)
	}
	return out
}

// frameOffsets returns the offsets of the valid frames of a file.
func frameOffsets(t testing.TB, fsys vfs.FS, path string) []int64 {
	t.Helper()
	var offs []int64
	scanFile(t, fsys, path, func(off int64, _ []byte) error {
		offs = append(offs, off)
		return nil
	})
	return offs
}

// scanFile scans the whole of path for frames, calling fn (if not nil) for
// each valid one.
func scanFile(t testing.TB, fsys vfs.FS, path string, fn func(off int64, payload []byte) error) wal.ScanResult {
	t.Helper()
	f, err := fsys.Open(path)
	require.NoError(t, err)
	defer f.Close()
	size, err := f.Size()
	require.NoError(t, err)
	res, err := wal.Scan(f, path, 0, size, fn)
	require.NoError(t, err)
	return res
}

// writeFile writes payloads as frames to dir/MANIFEST-<gen>, each frame
// claiming that everything before it was synced (so damage to an earlier
// frame is provably corruption). Header, checkpoint and segments records are
// written alone; any other record as a group of one with its replica, as
// the writer does.
func writeFile(t testing.TB, fsys vfs.FS, gen uint64, payloads ...[]byte) string {
	t.Helper()
	require.NoError(t, fsys.MkdirAll(testDir))
	path := filepath.Join(testDir, genName(gen))
	var buf []byte
	for _, p := range payloads {
		switch recordKind(p[0]) {
		case kindHeader, kindCheckpoint, kindSegments:
			buf = wal.AppendFrame(buf, p, uint64(len(buf)))
		default:
			buf = appendGroups(buf, 0, [][]byte{p}, uint64(len(buf)))
		}
	}
	f, err := fsys.Create(path)
	require.NoError(t, err)
	_, err = f.WriteAt(buf, 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, fsys.SyncDir(testDir))
	return path
}

func headerWithVersion(version uint32, gen uint64) []byte {
	b := []byte{byte(kindHeader)}
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint32(b, version)
	return binary.LittleEndian.AppendUint64(b, gen)
}

func editPayload(seq uint64, e Edit) []byte {
	for i := range e.Add {
		e.Add[i].AddedSeq = seq
	}
	return appendEdit(nil, seq, &e, e.NextID, e.NextOrder)
}

func appendFrameForTest(payload []byte, watermark uint64) []byte {
	return wal.AppendFrame(nil, payload, watermark)
}
