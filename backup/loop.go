package backup

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/segkv/segkv/backup/bucket"
	"github.com/segkv/segkv/segstore"
)

var (
	// ErrFenced reports that another writer recorded the next state of
	// this prefix first: two loops are backing up to one prefix, and this
	// one stops (the chain has exactly one successor for each state).
	ErrFenced = errors.New("backup: another writer owns this backup prefix")
	// ErrBehind reports a source whose manifest sequence is behind the
	// prefix's latest recorded state: a different store (or a restored
	// one, whose sequence starts again) is pointed at an existing backup.
	// Back it up to a new prefix.
	ErrBehind = errors.New("backup: source is behind the backup's latest state")
)

// Options configure a Loop. The zero value is usable.
type Options struct {
	// Poll is how often Run looks at the source's ManifestSeq (an O(1)
	// check). Default 1s.
	Poll time.Duration
	// SealEvery, if positive, makes Run seal the source this often, so
	// that a write is in the backup within about SealEvery + Poll + the
	// upload time (the recovery point). Zero: only what the store seals
	// on its own is backed up.
	SealEvery time.Duration
	// MaxBackoff caps the wait between retries after a failed step
	// (doubling from Poll). Default 30s.
	MaxBackoff time.Duration
	// Progress, if set, is called (from the goroutine running the loop)
	// after each upload and each recorded state, and with each error Run
	// retries.
	Progress func(Event)
	// Logger receives a line for each retried error and each checkpoint
	// passed over at start. Default: discard.
	Logger *slog.Logger
	// Now is the clock of the recorded times. Default time.Now.
	Now func() time.Time
}

// Event reports the loop's progress.
type Event struct {
	Kind     string // "segment", "edit", "checkpoint", "retry"
	Seq      uint64 // the recorded seq ("edit", "checkpoint")
	Key      string // the object written
	Bytes    int64  // its size
	Err      error  // "retry": the error
	Stats    Stats
	Duration time.Duration // "retry": the wait before the next attempt
}

// Stats count what a Loop did.
type Stats struct {
	Seq              uint64 // the latest recorded seq
	Segments         int    // segments in the latest recorded state
	Edits            int64  // edit objects written
	Checkpoints      int64  // checkpoint objects written
	SegmentsUploaded int64
	SegmentBytes     int64 // bytes of segment objects written
	MetaBytes        int64 // bytes of edit and checkpoint objects written
}

// Loop backs a Source up to a bucket prefix: each new manifest state it
// sees becomes one edit object (after the segments it adds are uploaded),
// and a checkpoint follows whenever the edits since the last one outweigh
// it. A Loop is not safe for concurrent use; run one per prefix (a second
// one, anywhere, is fenced: ErrFenced).
type Loop struct {
	src    Source
	b      bucket.Bucket
	opts   Options
	writer [16]byte

	ready     bool
	st        *state
	editBytes int                 // edit bytes since the last checkpoint
	uploaded  map[SegmentKey]bool // segment objects known to exist
	lastSeen  uint64              // the source seq the state is known to reflect
	stats     Stats
	// rewrite makes every edit followed by a checkpoint: the
	// rewrite-the-manifest strategy, for the test that must reject it.
	rewrite bool
}

// NewLoop returns a loop that backs src up to b. Nothing is read or written
// until Once or Run.
func NewLoop(src Source, b bucket.Bucket, opts *Options) *Loop {
	l := &Loop{src: src, b: b}
	if opts != nil {
		l.opts = *opts
	}
	if l.opts.Poll <= 0 {
		l.opts.Poll = time.Second
	}
	if l.opts.MaxBackoff <= 0 {
		l.opts.MaxBackoff = 30 * time.Second
	}
	if l.opts.Now == nil {
		l.opts.Now = time.Now
	}
	if l.opts.Logger == nil {
		l.opts.Logger = slog.New(slog.DiscardHandler)
	}
	_, _ = rand.Read(l.writer[:])
	return l
}

// Stats returns what the loop did so far.
func (l *Loop) Stats() Stats { return l.stats }

// init reads the prefix's latest state: the loop resumes from it, so a
// crash or a failed put loses nothing and repeats nothing.
func (l *Loop) init(ctx context.Context) error {
	c, err := loadChain(ctx, l.b, 0)
	switch {
	case errors.Is(err, ErrNoBackup):
		c = &chain{st: newState()}
	case err != nil:
		return err
	}
	for _, e := range c.skipped {
		l.opts.Logger.Warn("backup: checkpoint passed over", slog.Any("err", e))
	}
	if cur := l.src.ManifestSeq(); cur < c.st.seq {
		return fmt.Errorf("%w: source at seq %d, backup at %d", ErrBehind, cur, c.st.seq)
	}
	objs, err := l.b.List(ctx, segmentsDir, "", 0)
	if err != nil {
		return err
	}
	l.uploaded = make(map[SegmentKey]bool, len(objs))
	for _, o := range objs {
		if k, ok := parseSegmentName(o.Key); ok && o.Size == k.Size {
			l.uploaded[k] = true
		}
	}
	l.st, l.editBytes, l.lastSeen = c.st, c.editBytes, c.st.seq
	if c.ckptSeq == 0 && c.edits > 0 {
		// No checkpoint yet: every edit so far counts.
		l.editBytes = c.editBytes
	}
	l.stats.Seq, l.stats.Segments = l.st.seq, len(l.st.segs)
	l.ready = true
	return nil
}

// Once records the source's current state (everything committed so far)
// if it is not recorded yet, and returns. Safe to call again after an
// error: it resumes where the last success left off.
func (l *Loop) Once(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !l.ready {
		if err := l.init(ctx); err != nil {
			return err
		}
	}
	if l.src.ManifestSeq() == l.lastSeen {
		return nil
	}
	capt, err := l.src.Capture(ctx)
	if err != nil {
		return fmt.Errorf("backup: capture: %w", err)
	}
	defer capt.Close()
	seq := capt.Seq()
	switch {
	case seq == 0:
		return fmt.Errorf("backup: capture has no manifest seq")
	case seq < l.st.seq:
		return fmt.Errorf("%w: source at seq %d, backup at %d", ErrBehind, seq, l.st.seq)
	case seq == l.st.seq:
		l.lastSeen = seq
		return nil
	}
	removed, added, ids := diff(l.st, capt.Segments())
	if len(removed) == 0 && len(added) == 0 {
		// A commit that changed no segment (a live-file switch): the
		// recorded state already is this one.
		l.lastSeen = seq
		return nil
	}
	for i, s := range added {
		if l.uploaded[s.SegmentKey] {
			continue
		}
		if err := l.upload(ctx, capt, ids[i], s.SegmentKey); err != nil {
			return err
		}
	}
	e := &Edit{Seq: seq, Prev: l.st.seq, UnixNano: l.opts.Now().UnixNano(), Writer: l.writer, Removed: removed, Added: added}
	if err := l.writeEdit(ctx, e); err != nil {
		return err
	}
	return l.maybeCheckpoint(ctx)
}

// diff returns what turns st into the captured list: the keys to remove
// and the segments to add (oldest first, with their local ids for export).
// A segment the store holds twice (equal content) is recorded once; one
// whose Order changed (ReplaceAll restates kept segments) is removed and
// added again, since Order places it among the others.
func diff(st *state, infos []segstore.SegmentInfo) ([]SegmentKey, []Segment, []uint64) {
	now := make(map[SegmentKey]int, len(infos))
	for i, in := range infos {
		k := SegmentKey{Digest: in.Digest, Size: in.Size}
		if j, ok := now[k]; !ok || infos[j].Order < in.Order {
			now[k] = i
		}
	}
	var removed []SegmentKey
	for k, s := range st.segs {
		if i, ok := now[k]; !ok || infos[i].Order != s.Order {
			removed = append(removed, k)
		}
	}
	sortKeys(removed)
	var added []Segment
	var ids []uint64
	for i, in := range infos { // oldest first
		k := SegmentKey{Digest: in.Digest, Size: in.Size}
		if now[k] != i {
			continue
		}
		if s, ok := st.segs[k]; ok && s.Order == in.Order {
			continue
		}
		added = append(added, Segment{SegmentKey: k, Order: in.Order, Records: in.Records, Keys: in.Keys, MinKey: in.MinKey, MaxKey: in.MaxKey})
		ids = append(ids, in.ID)
	}
	return removed, added, ids
}

// errUploadEnded is what an export still writing sees once the put it
// feeds has returned.
var errUploadEnded = errors.New("backup: upload ended")

// upload writes one segment object, streaming the export into the put.
func (l *Loop) upload(ctx context.Context, capt Capture, id uint64, k SegmentKey) error {
	key := segmentObject(k)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := capt.Export(ctx, id, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	err := l.b.PutIfAbsent(ctx, key, pr, k.Size)
	pr.CloseWithError(errUploadEnded) // unblocks the export
	exportErr := <-done
	if errors.Is(err, bucket.ErrExists) {
		// Uploaded before (a step that failed after it, or a crash):
		// segment objects are named by content, so it is this one.
		err = nil
	}
	if err != nil {
		// The export's own failure is the cause; one that only saw the
		// put end (cancelled, refused) would hide the put's error.
		if exportErr != nil && !errors.Is(exportErr, io.ErrClosedPipe) && !errors.Is(exportErr, errUploadEnded) {
			return fmt.Errorf("backup: export segment %d: %w", id, exportErr)
		}
		return fmt.Errorf("backup: upload %s: %w", key, err)
	}
	l.uploaded[k] = true
	l.stats.SegmentsUploaded++
	l.stats.SegmentBytes += k.Size
	l.event(Event{Kind: "segment", Key: key, Bytes: k.Size})
	return nil
}

// writeEdit records e with put-if-absent under the name of the state it
// follows: of two writers extending one state, exactly one succeeds.
func (l *Loop) writeEdit(ctx context.Context, e *Edit) error {
	key := editObject(e.Prev)
	data := EncodeEdit(e)
	err := l.b.PutIfAbsent(ctx, key, bytesReader(data), int64(len(data)))
	if errors.Is(err, bucket.ErrExists) {
		// Ours, if an earlier attempt's put succeeded but reported an
		// error; otherwise another writer's.
		got, rerr := bucket.ReadAll(ctx, l.b, key)
		if rerr != nil {
			return fmt.Errorf("%w: %s exists and cannot be read: %w", ErrFenced, key, rerr)
		}
		theirs, derr := DecodeEdit(key, got)
		if derr != nil || theirs.Writer != l.writer {
			return fmt.Errorf("%w: %s was written by another writer", ErrFenced, key)
		}
		e, data = theirs, got
		err = nil
	}
	if err != nil {
		return fmt.Errorf("backup: write %s: %w", key, err)
	}
	if err := l.st.apply(e, key); err != nil {
		return err
	}
	l.editBytes += len(data)
	l.lastSeen = e.Seq
	l.stats.Edits++
	l.stats.MetaBytes += int64(len(data))
	l.stats.Seq, l.stats.Segments = l.st.seq, len(l.st.segs)
	l.event(Event{Kind: "edit", Seq: e.Seq, Key: key, Bytes: int64(len(data))})
	return nil
}

// maybeCheckpoint writes a checkpoint of the whole state once the edits
// since the last one outweigh it: metadata bytes stay within about twice
// the edit bytes, O(1) per commit amortized at any store size.
func (l *Loop) maybeCheckpoint(ctx context.Context) error {
	if l.editBytes <= l.st.encSize && !l.rewrite {
		return nil
	}
	key := checkpointObject(l.st.seq)
	data := EncodeCheckpoint(l.st.checkpoint(l.opts.Now().UnixNano()))
	err := l.b.PutIfAbsent(ctx, key, bytesReader(data), int64(len(data)))
	if errors.Is(err, bucket.ErrExists) {
		// Only the writer of the edit to this seq writes its checkpoint,
		// and that is us: an earlier attempt's.
		err = nil
		data = nil
	}
	if err != nil {
		// The edit is recorded; the checkpoint is retried after the
		// next one (the rule still holds then).
		return fmt.Errorf("backup: write %s: %w", key, err)
	}
	l.editBytes = 0
	l.stats.Checkpoints++
	l.stats.MetaBytes += int64(len(data))
	l.event(Event{Kind: "checkpoint", Seq: l.st.seq, Key: key, Bytes: int64(len(data))})
	return nil
}

func (l *Loop) event(ev Event) {
	if l.opts.Progress != nil {
		ev.Stats = l.stats
		l.opts.Progress(ev)
	}
}

// Permanent reports whether err stops Run rather than being retried: a
// fenced or mismatched prefix, a corrupt or broken chain, a closed or
// failed store, or the end of the context.
func Permanent(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, ErrBehind) || errors.Is(err, ErrCorruptObject) ||
		errors.Is(err, ErrGap) || errors.Is(err, segstore.ErrClosed) || errors.Is(err, segstore.ErrFailed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Run backs the source up until ctx ends (it then returns ctx's error) or
// a permanent error (Permanent) stops it. Other errors (a failed put, a
// network error) are retried with a doubling backoff; the state on the
// bucket is never left half-recorded by one, since an edit is written only
// after its segments and names only what is uploaded.
func (l *Loop) Run(ctx context.Context) error {
	wait := l.opts.Poll
	var nextSeal time.Time
	if l.opts.SealEvery > 0 {
		nextSeal = time.Now().Add(l.opts.SealEvery)
	}
	for {
		if l.opts.SealEvery > 0 && !time.Now().Before(nextSeal) {
			nextSeal = time.Now().Add(l.opts.SealEvery)
			if err := l.src.Seal(); err != nil {
				if Permanent(err) {
					return err
				}
				l.opts.Logger.Warn("backup: seal failed", slog.Any("err", err))
			}
		}
		err := l.Once(ctx)
		switch {
		case err == nil:
			wait = l.opts.Poll
		case ctx.Err() != nil:
			return ctx.Err()
		case Permanent(err):
			return err
		default:
			wait = min(2*wait, l.opts.MaxBackoff)
			l.opts.Logger.Warn("backup: step failed, retrying", slog.Any("err", err), slog.Duration("wait", wait))
			l.event(Event{Kind: "retry", Err: err, Duration: wait})
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
