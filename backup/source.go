package backup

import (
	"context"
	"io"

	"github.com/segkv/segkv/segstore"
)

// Source is the store a Loop backs up. StoreSource adapts a
// *segstore.Store; tests supply synthetic ones.
type Source interface {
	// ManifestSeq is the sequence of the source's last manifest commit:
	// when it has not moved, nothing changed (an O(1) check).
	ManifestSeq() uint64
	// Capture pins a consistent state: a segment list and the manifest
	// sequence whose state it is, with its segments held for export until
	// Close.
	Capture(ctx context.Context) (Capture, error)
	// Seal makes the writes not yet in a sealed segment part of one (for a
	// bounded recovery point); a no-op when there are none.
	Seal() error
}

// Capture is a pinned state of a Source.
type Capture interface {
	Seq() uint64
	Segments() []segstore.SegmentInfo // oldest first
	Export(ctx context.Context, id uint64, w io.Writer) (int64, error)
	Close() error
}

// StoreSource returns s as a Source. Captures are snapshots
// (segstore.Store.NewSnapshot): merges meanwhile do not disturb their
// exports, and Snapshot.ManifestSeq labels each list with the commit that
// installed it.
func StoreSource(s *segstore.Store) Source { return storeSource{s} }

type storeSource struct{ s *segstore.Store }

func (ss storeSource) ManifestSeq() uint64 { return ss.s.ManifestSeq() }
func (ss storeSource) Seal() error         { return ss.s.Seal() }

func (ss storeSource) Capture(ctx context.Context) (Capture, error) {
	sn, err := ss.s.NewSnapshot()
	if err != nil {
		return nil, err
	}
	return snapCapture{sn}, nil
}

type snapCapture struct{ sn *segstore.Snapshot }

func (c snapCapture) Seq() uint64                      { return c.sn.ManifestSeq() }
func (c snapCapture) Segments() []segstore.SegmentInfo { return c.sn.Segments() }
func (c snapCapture) Close() error                     { return c.sn.Close() }
func (c snapCapture) Export(ctx context.Context, id uint64, w io.Writer) (int64, error) {
	return c.sn.Export(ctx, id, w)
}
