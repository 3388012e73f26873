package segstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/wal"
)

// SegmentInfo describes a sealed segment.
type SegmentInfo struct {
	ID       uint64 // local id: names the segment in Export
	Size     int64  // bytes of the data file (what Export streams)
	Records  uint64 // records in the data file, superseded ones included
	Keys     uint64 // distinct keys (tombstones included)
	Digest   uint64 // xxhash64 of the data file: equal content, equal digest, in any store
	Order    uint64 // shadowing order: a higher Order holds newer data
	AddedSeq uint64 // the ManifestSeq of the commit that added it
	MinKey   []byte
	MaxKey   []byte
	// Origin is the segment's ID in the leader it was mirrored from
	// (Follow), 0 for a segment of the store's own.
	Origin uint64
}

func infoOf(m manifestlog.SegmentMeta) SegmentInfo {
	return SegmentInfo{
		ID: m.ID, Size: m.DataLength, Records: m.Records, Keys: m.Keys, Digest: m.DataDigest,
		Order: m.Order, AddedSeq: m.AddedSeq, MinKey: bytes.Clone(m.MinKey), MaxKey: bytes.Clone(m.MaxKey),
		Origin: m.Origin,
	}
}

// Segments returns the sealed segments, oldest first.
func (s *Store) Segments() []SegmentInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]SegmentInfo, len(s.mu.segs))
	for i, sg := range s.mu.segs {
		out[len(s.mu.segs)-1-i] = infoOf(sg.meta)
	}
	return out
}

// Export streams sealed segment id's data file to w: the data file only; an
// importer rebuilds the index itself. The segment stays on disk until the
// export is done, whatever merges do meanwhile.
func (s *Store) Export(ctx context.Context, id uint64, w io.Writer) (int64, error) {
	if ctx == nil || w == nil {
		return 0, fmt.Errorf("%w: nil context or writer", ErrInvalidOption)
	}
	if err := s.enter(false); err != nil {
		return 0, err
	}
	defer s.ops.leave()
	ctx, done := s.opContext(ctx)
	defer done()
	s.mu.RLock()
	var sg *sealed
	for _, c := range s.mu.segs {
		if c.meta.ID == id {
			sg = c
			break
		}
	}
	if sg != nil {
		sg.df.pin()
	}
	s.mu.RUnlock()
	if sg == nil {
		return 0, fmt.Errorf("%w: %d", ErrNoSegment, id)
	}
	defer sg.df.unpin()
	return s.exportSegment(ctx, sg, w, nil)
}

// exportSegment streams sg's data file to w and checks that the bytes sent
// have the digest the manifest recorded. The caller keeps sg pinned and is
// admitted by the operation gate; ctx ends with Close (opContext). stop, if
// not nil, is asked before every chunk whether to give up (with its error).
func (s *Store) exportSegment(ctx context.Context, sg *sealed, w io.Writer, stop func() error) (int64, error) {
	h, err := s.files.acquire(sg.df.id, sg.df.path)
	if err != nil {
		return 0, err
	}
	defer s.files.release(h)
	var n int64
	buf := make([]byte, min(1<<20, max(sg.meta.DataLength, 1)))
	digest := xxhash.New()
	for n < sg.meta.DataLength {
		if err := ctxErr(ctx); err != nil {
			return n, err
		}
		if stop != nil {
			if err := stop(); err != nil {
				return n, err
			}
		}
		chunk := buf[:min(int64(len(buf)), sg.meta.DataLength-n)]
		if _, err := h.f.ReadAt(chunk, n); err != nil {
			return n, fmt.Errorf("segkv: export %s at %d: %w", sg.df.path, n, err)
		}
		digest.Write(chunk)
		m, err := w.Write(chunk)
		n += int64(m)
		if err != nil {
			return n, fmt.Errorf("segkv: export %s: %w", sg.df.path, err)
		}
	}
	// A peer trusts nothing we send, but we should not knowingly send a
	// damaged segment either.
	if digest.Sum64() != sg.meta.DataDigest {
		return n, corruption.New(sg.df.path, -1, "exported bytes have digest %016x, the manifest recorded %016x", digest.Sum64(), sg.meta.DataDigest)
	}
	return n, nil
}

// importError wraps the error that made stream i fail: the context's own
// error when it was cancelled (unless the store failed meanwhile), with the
// offset of the damage when there is one.
func importError(ctx context.Context, i int, err error) *ImportError {
	if cerr := ctxErr(ctx); cerr != nil && !errors.Is(err, ErrFailed) {
		err = cerr
	}
	var ce *corruption.Error
	off := int64(-1)
	if errors.As(err, &ce) {
		off = ce.Offset
	}
	return &ImportError{Stream: i, Offset: off, Err: err}
}

// ImportError names the stream of a batch that made Import refuse it.
type ImportError struct {
	Stream int   // index of the stream in the Import call
	Offset int64 // byte offset in that stream, -1 if not applicable
	Err    error
}

func (e *ImportError) Error() string {
	return fmt.Sprintf("segkv: import stream %d at offset %d: %v", e.Stream, e.Offset, e.Err)
}

func (e *ImportError) Unwrap() error { return e.Err }

// Import adopts a batch of segment streams (each an exported data file) as
// one atomic commit. Every record is validated as it is copied, each index is
// built locally, the new files are made durable with one directory sync for
// the whole batch, and one manifest commit adds them all. Any invalid stream
// or a cancelled ctx fails the whole batch, with an *ImportError naming the
// stream and offset; nothing of the batch becomes visible and its files are
// removed.
//
// Imported segments are newer than every sealed segment and older than the
// live file's writes: those are sealed in the same commit, above the
// imported segments, so that the commit names a state the store actually
// showed (an unsealed write shadowed the imported data before the import
// and still does after it, in the sealed set alone too).
//
// Re-running an import changes nothing: a stream whose digest is present in
// the store, earlier in the same batch, or among the digests the store
// remembers adopting (the newest manifestlog.AdoptedMemory, kept in the
// manifest after a merge or a range drop retired the segment) is skipped.
// The returned infos describe the segments added, in stream order.
func (s *Store) Import(ctx context.Context, segments ...io.Reader) (infos []SegmentInfo, err error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	if err := s.enter(true); err != nil {
		return nil, err
	}
	defer s.ops.leave()
	ev := ImportInfo{Streams: len(segments)}
	start := time.Now()
	s.importBegin(ev)
	defer func() {
		ev.Duration, ev.Err = time.Since(start), err
		for _, in := range infos {
			ev.Segments = append(ev.Segments, in.ID)
			ev.Bytes += in.Size
		}
		if err == nil && len(infos) > 0 {
			s.stats.importBatches.Add(1)
			s.stats.importedBytes.Add(ev.Bytes)
		}
		s.importEnd(ev)
	}()
	ctx, done := s.opContext(ctx)
	defer done()

	var written []*sealed
	cleanup := func() {
		for _, sg := range written {
			s.discardUncommitted(sg)
		}
	}
	batch := map[uint64]bool{} // digests seen earlier in this batch
	for i, r := range segments {
		if r == nil {
			cleanup()
			return nil, &ImportError{Stream: i, Offset: -1, Err: fmt.Errorf("%w: nil reader", ErrInvalidOption)}
		}
		sg, err := s.importOne(ctx, r)
		if err != nil {
			cleanup()
			return nil, importError(ctx, i, err)
		}
		if batch[sg.meta.DataDigest] {
			s.discardUncommitted(sg)
			continue
		}
		batch[sg.meta.DataDigest] = true
		written = append(written, sg)
	}
	if err := ctxErr(ctx); err != nil {
		cleanup()
		return nil, err
	}

	// The duplicate check and the commit are one step under importMu: two
	// imports of the same stream at once adopt it once. sealMu comes first
	// (the lock order): the commit seals the live file.
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	s.importMu.Lock()
	defer s.importMu.Unlock()
	wanted := make(map[uint64]bool, len(written))
	for _, sg := range written {
		wanted[sg.meta.DataDigest] = true
	}
	remembered := s.mlog.Adopted(wanted)
	present := make(map[uint64]bool)
	s.mu.RLock()
	for _, sg := range s.mu.segs {
		if wanted[sg.meta.DataDigest] {
			present[sg.meta.DataDigest] = true
		}
	}
	s.mu.RUnlock()
	// A stream skipped because the store holds a segment with its digest
	// (sealed here, or installed by a ReplaceAll or a Follow) counts as
	// adopted: it is remembered too, so that a re-run after a merge or a
	// range drop retired that segment still changes nothing.
	var skipped []uint64
	fresh := written[:0]
	for _, sg := range written {
		d := sg.meta.DataDigest
		switch {
		case remembered[d]:
			s.discardUncommitted(sg)
		case present[d]:
			s.discardUncommitted(sg)
			skipped = append(skipped, d)
		default:
			fresh = append(fresh, sg)
		}
	}
	written = fresh
	if len(written) == 0 {
		if len(skipped) > 0 {
			// The segment set does not change: a commit of the digests
			// alone. Like every import's, it is a durable point: the live
			// file's writes are made durable first, so that no crash keeps
			// the memory of this import and loses a write before it.
			if err := s.syncLive(); err != nil {
				return nil, err
			}
			if err := s.commit(commitSpec{adopt: skipped}); err != nil {
				return nil, err
			}
		}
		return []SegmentInfo{}, nil
	}
	// One directory sync makes every new file's entry durable; only then may
	// the manifest name them.
	if err := s.fs.SyncDir(s.dir); err != nil {
		cleanup()
		return nil, fmt.Errorf("segkv: import: sync directory: %w", err)
	}
	if err := s.commitImport(written, skipped); err != nil {
		if !errors.Is(err, ErrFailed) {
			cleanup()
			return nil, err
		}
		// The store failed at or after the commit: the files stay for
		// the next Open, which keeps them if the commit is durable.
		for _, sg := range written {
			sg.df.unmap() // never installed: release the index mappings
		}
		return nil, err
	}
	s.stats.imports.Add(int64(len(written)))
	s.bg.requestMerge()
	out := make([]SegmentInfo, len(written))
	for i, sg := range written {
		out[i] = infoOf(sg.meta)
	}
	return out, nil
}

// commitImport names the imported segments in one manifest commit, with
// the live file's writes sealed above them in the same commit when there
// are any. A seal writes its data barrier first when the write path left
// bytes unsynced (SyncManual, SyncInterval), so no crash can keep the
// import and lose a write acknowledged before it that shadowed an imported
// key. skipped are digests skipped as present, remembered with the
// adopted ones. An error that does not match ErrFailed changed nothing.
// sealMu and importMu held.
func (s *Store) commitImport(written []*sealed, skipped []uint64) error {
	spec := &commitSpec{add: written, adopt: slices.Clone(skipped)}
	for _, sg := range written {
		spec.adopt = append(spec.adopt, sg.meta.DataDigest)
	}
	seg, err := s.sealLocked(nil, spec)
	if err != nil || seg != nil {
		return err
	}
	// The live file was empty: the import alone.
	return s.commit(*spec)
}

// importOne copies one stream into a new ".seg" file, validating every frame
// and record, syncs the file, and writes its locally built index.
func (s *Store) importOne(ctx context.Context, r io.Reader) (_ *sealed, err error) {
	id := s.mlog.NewID()
	df := s.newDataFile(id, segment.KindSeg)
	name := df.path
	f, err := s.fs.Create(df.path)
	if err != nil {
		return nil, fmt.Errorf("segkv: import: create %s: %w", df.path, err)
	}
	out := newDigestWriter(s.timedSyncs(f), df.path)
	defer func() {
		if err != nil {
			out.discard(s.fs)
		}
	}()
	hdr := make([]byte, segment.HeaderSize)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, corruption.New(name, 0, "stream ends inside the data file header: %v", err)
	}
	if err := segment.CheckHeader(name, hdr); err != nil {
		return nil, err
	}
	if err := out.write(hdr); err != nil {
		return nil, err
	}
	version := segment.HeaderVersion(hdr)
	df.setFormat(version)
	var walk segment.FrameWalk
	// No block a merge writes decodes to more than two blocks' worth or
	// one record, and a record above this store's limits is refused
	// anyway: a hostile stream cannot make the import allocate more.
	blockLimit := max(2*blockBytes, segment.EncodedLen(s.opts.MaxKeySize, max(s.opts.MaxValueSize, s.opts.MaxKeySize)))
	ib := index.NewBuilder()
	var records uint64
	first := true
	maxPayload := maxBatchPayload + wal.HeaderSize
	sr := wal.NewStreamReader(r, name, segment.HeaderSize, maxPayload)
	for {
		if err := ctxErr(ctx); err != nil {
			return nil, err
		}
		frame, payload, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		frameOff := out.off
		err = segment.ForEachFrameRecord(name, version, frameOff, payload, blockLimit, &walk, func(rec segment.Record, recOff int64, n int) error {
			if rec.Kind == segment.KindLink {
				if _, _, ok := segment.ParseLink(rec); !ok || !first {
					return corruption.New(name, recOff, "misplaced or malformed link record")
				}
				first = false
				return nil
			}
			first = false
			if len(rec.Key) > s.opts.MaxKeySize {
				return corruption.New(name, recOff, "%v: key of %d bytes", ErrKeyTooLarge, len(rec.Key))
			}
			if len(rec.Value) > s.opts.MaxValueSize {
				return corruption.New(name, recOff, "%v: value of %d bytes", ErrValueTooLarge, len(rec.Value))
			}
			if rec.Kind == segment.KindRangeDelete && len(rec.Value) > s.opts.MaxKeySize {
				return corruption.New(name, recOff, "%v: range end of %d bytes", ErrKeyTooLarge, len(rec.Value))
			}
			ib.Add(rec, recOff, n)
			records++
			return nil
		})
		if err != nil {
			return nil, err
		}
		if err := out.write(frame); err != nil {
			return nil, err
		}
	}
	length, digest, err := out.finish()
	if err != nil {
		return nil, err
	}
	entries, ranges := ib.Finish()
	sg, ixData, err := s.buildSegment(df, length, digest, entries, ranges, records, 0)
	if err != nil {
		return nil, err
	}
	s.writeIndexFile(sg, ixData)
	return sg, nil
}

// Changes is what a peer needs to catch up from a ManifestSeq it saw.
type Changes struct {
	Seq     uint64        // the store's ManifestSeq the answer describes
	Since   uint64        // the seq it was asked for (ChangesSince's argument)
	Added   []SegmentInfo // sealed segments added after Since, present at Seq, oldest first (by Order)
	Removed []uint64      // segment ids present at Since and removed by Seq
	// Complete is false when the history since the given seq has been
	// checkpointed away: Added then lists every segment present at Seq and
	// Removed is empty, and the peer must treat it as a full listing.
	Complete bool
}

// ChangesSince reports what changed after ManifestSeq seq: every part of
// the answer describes the state at its Seq, read in one step, so commits
// racing with the call never mix into it. When seq equals the current
// ManifestSeq the answer is "nothing" at O(1) cost; otherwise it is
// O(changes) while the manifest holds the history since seq, and a full
// listing (Complete false) when a checkpoint dropped it.
func (s *Store) ChangesSince(seq uint64) Changes {
	cur, added, removed, complete := s.mlog.ChangesAt(seq)
	if seq == cur {
		return Changes{Seq: cur, Since: seq, Complete: true}
	}
	if !complete {
		st := s.mlog.State()
		out := Changes{Seq: st.Seq, Since: seq, Added: make([]SegmentInfo, 0, len(st.Segments))}
		for _, m := range st.Segments {
			out.Added = append(out.Added, infoOf(m))
		}
		sortInfos(out.Added)
		return out
	}
	out := Changes{Seq: cur, Since: seq, Removed: removed, Complete: true, Added: make([]SegmentInfo, 0, len(added))}
	for _, m := range added {
		out.Added = append(out.Added, infoOf(m))
	}
	sortInfos(out.Added)
	return out
}

// sortInfos puts segment infos oldest first (by Order, which is unique
// among the segments of one state).
func sortInfos(infos []SegmentInfo) {
	slices.SortFunc(infos, func(a, b SegmentInfo) int { return cmp.Compare(a.Order, b.Order) })
}
