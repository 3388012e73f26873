package segstore

import (
	"fmt"
	"path/filepath"

	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/wal"
)

// recoverReadOnly is recover for Options.ReadOnly: the same reads and
// checks, and none of the changes. The manifest log is replayed without
// truncating or restoring anything (manifestlog.OpenReadOnly); recovery
// plans as usual, rebuilding indexes in memory, and WouldSettle records
// what a writable Open would repair instead of repairing it. The live
// chain is served as it is: its last file as the live file and, after a
// crash inside a seal, the file being sealed as the frozen file, which
// reads already consult, so nothing has to be sealed.
func (s *Store) recoverReadOnly() error {
	hasData, err := s.refuseDataWithoutManifest()
	if err != nil {
		return err
	}
	mlog, state, mrep, err := manifestlog.OpenReadOnly(s.fs, s.dir, manifestlog.Options{Logger: s.log, HasData: hasData})
	if err != nil {
		return fmt.Errorf("segkv: open manifest read-only: %w", err)
	}
	s.mlog = mlog
	s.mreport = mrep
	for _, a := range mrep.Actions {
		s.log.Warn("segkv: manifest left as it is (read-only)", "action", a)
	}

	res, tails, err := s.planRecovery(state, mrep, true)
	if err != nil {
		return err
	}
	for _, rs := range res.Segments {
		df := s.newDataFile(rs.Meta.ID, rs.Meta.FileKind)
		df.setSealed(rs.Meta.DataLength)
		df.holdIndex(rs.Index)
		s.mu.segs = append(s.mu.segs, newSealed(rs.Meta, df, rs.Index))
	}
	sortSegments(s.mu.segs)
	s.mu.segsSeq = s.mlog.Seq()
	res.WouldSettle()

	switch len(res.Live) {
	case 0:
		// No live file named yet: a store a crash left right after it
		// created its manifest. It holds nothing; an empty tail with no
		// file answers for the live file.
		t := newTail(s, 0)
		t.df = s.newDataFile(0, segment.KindLog)
		t.w = wal.NewWriter(nil, "", segment.HeaderSize, segment.HeaderSize, s.walOptions(t))
		s.mu.tail = t
		return nil
	case 1, 2:
	default:
		return fmt.Errorf("%w: the live chain has %d files; open the store writable once to seal them", ErrReadOnly, len(res.Live))
	}
	var chain []*tail
	for _, lf := range res.Live {
		t, err := s.openTailReadOnly(lf.ID, lf.End, tails[lf.ID])
		if err != nil {
			for _, c := range chain {
				c.file.Close()
			}
			return err
		}
		chain = append(chain, t)
	}
	s.mu.tail = chain[len(chain)-1]
	if len(chain) == 2 {
		// A crash inside a seal: the first file is what the seal was
		// sealing. Reads consult it after the live file, as they do while
		// a seal runs.
		s.mu.frozen = chain[0]
	}
	return nil
}

// openTailReadOnly is openTail without writing: the file is opened for
// reading (an older header is not upgraded) and its writer, never used,
// only tells where the valid data ends.
func (s *Store) openTailReadOnly(id uint64, end int64, replayed *tail) (*tail, error) {
	p := filepath.Join(s.dir, segment.DataName(id, segment.KindLog))
	f, err := s.fs.Open(p)
	if err != nil {
		return nil, fmt.Errorf("segkv: open live file: %w", err)
	}
	t := replayed
	if t == nil {
		t = newTail(s, id)
	}
	t.path, t.file = p, f
	t.df = s.newDataFile(id, segment.KindLog)
	t.w = wal.NewWriter(f, p, end, end, s.walOptions(t))
	return t, nil
}
