package segstore

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/segment"
)

// Garbage is what a sealed segment holds that no read can reach: a record
// whose key a newer segment also holds (or a newer range tombstone covers),
// and a point tombstone with nothing older left for it to delete. A
// size-tiered merge never looks at it, so a store written twice over keeps
// both generations until sizes happen to line up. The merge therefore also
// rewrites a segment alone, without its garbage, once the estimate below
// says that a large enough part of it is garbage (MergeOptions.GarbageRatio).
//
// Only sealed segments count as newer: the live file's writes are not in
// the manifest, and under a lazy sync mode they may not survive a crash
// that the rewrite's commit survives, so dropping what they shadow could
// lose a key.

// garbageSamples is how many records of a segment the estimate checks:
// evenly spaced positions of its index, so the estimate of the garbage
// fraction is within a few percent whatever the segment's size, at a cost
// that does not grow with it.
const garbageSamples = 256

// defaultGarbageRatio is MergeOptions.GarbageRatio's default: a settled
// store is then at most about a fifth garbage (space amplification about
// 1.25 before the index).
const defaultGarbageRatio = 0.2

// garbageTracker keeps each sealed segment's garbage estimate, updated
// incrementally: a sample that a newer segment shadows stays shadowed (a
// merge of newer segments keeps every key of its inputs, and a segment
// dropped under a range tombstone leaves that tombstone, newer still), so
// a refresh checks only the samples not yet found dead against only the
// segments added since. A tombstone's verdict (nothing older holds its
// key) also only moves one way, since segments older than a given one
// only lose keys; it is rechecked when the segment list has changed.
//
// Its lock is never held while an index is read: a read may heal a
// damaged index and call the IndexRebuilt listener, which may call
// Metrics, which refreshes too. A refresh copies the estimates it
// updates, reads without the lock, and merges what it found back; two
// refreshes at once only repeat work, since both move every verdict the
// same one way.
type garbageTracker struct {
	mu sync.Mutex
	// segs is keyed by the segment's struct: a segment that ReplaceAll
	// or Follow restates under a new order is a new struct and starts
	// over, since its newer and older neighbours changed.
	segs map[*sealed]*segGarbage
	// newestSeq is the newest segment list a refresh has merged.
	newestSeq uint64
}

// segGarbage is one segment's estimate. A refresh works on a copy (clone)
// and merges it back (absorb).
type segGarbage struct {
	samples []garbageSample
	total   int64 // the samples' record bytes
	dead    int64 // the dead samples' record bytes
	// newerSeen: the segments newer than this one with an Order up to
	// newerSeen have been checked against every live sample.
	newerSeen uint64
	// listSeq is the segment list (its manifest seq) the tombstone samples
	// were last checked against.
	listSeq uint64
}

type garbageSample struct {
	pos    int
	key    []byte // in a block file, the sampled key (else the index's at pos)
	length uint32
	tomb   bool
	dead   bool
}

// bytes returns the estimated garbage bytes of segment sg's data file: the
// records its own later records superseded or deleted (a live file keeps
// every version it was given; its index names the newest), counted from
// the manifest's record and key counts less the range tombstones a rewrite
// keeps, plus the sampled fraction of the records its index names that
// other segments make dead. A rewrite leaves exactly its keys and its
// merged range tombstones, so a rewritten segment counts nothing inside.
func (g *segGarbage) bytes(sg *sealed) int64 {
	if g == nil {
		return 0
	}
	m := &sg.meta
	kept := m.Keys + uint64(sg.index().Ranges().Len())
	var inside float64 // fraction of the records superseded within the file
	if m.Records > kept {
		inside = float64(m.Records-kept) / float64(m.Records)
	}
	var outside float64
	if g.total > 0 {
		outside = float64(g.dead) / float64(g.total)
	}
	return int64(float64(m.DataLength) * (inside + (1-inside)*outside))
}

func (g *segGarbage) clone() *segGarbage {
	c := *g
	c.samples = slices.Clone(g.samples)
	return &c
}

// absorb merges into g what another refresh found for the same segment
// (same sample positions): a sample dead in either is dead, and each
// bound is the further of the two, since every sample live in the merged
// estimate was live in both.
func (g *segGarbage) absorb(o *segGarbage) {
	g.dead = 0
	for i := range g.samples {
		g.samples[i].dead = g.samples[i].dead || o.samples[i].dead
		if g.samples[i].dead {
			g.dead += int64(g.samples[i].length)
		}
	}
	g.newerSeen = max(g.newerSeen, o.newerSeen)
	g.listSeq = max(g.listSeq, o.listSeq)
}

// refreshGarbage brings the estimates of the store's own segments in
// newestFirst (the segment list of manifest seq listSeq, pinned by the
// caller) up to date, forgets segments no longer in it, and returns each
// own segment's estimated garbage bytes. The caller holds no store lock:
// a first refresh reads a sample of every index. A segment whose index
// cannot be read now has no estimate; the next refresh tries again.
func (s *Store) refreshGarbage(newestFirst []*sealed, listSeq uint64) garbageBytes {
	t := &s.garbage
	work := make(map[*sealed]*segGarbage, len(newestFirst))
	t.mu.Lock()
	for _, sg := range newestFirst {
		if g := t.segs[sg]; g != nil {
			work[sg] = g.clone()
		}
	}
	t.mu.Unlock()

	var blocks blockCache // block files' blocks the samples and probes read
	for i, sg := range newestFirst {
		if sg.meta.Origin != 0 {
			continue // mirrored: the leader's to merge
		}
		g := work[sg]
		var err error
		if g == nil {
			g, err = sampleGarbage(sg, &blocks)
		}
		if err == nil {
			err = g.update(sg, newestFirst[:i], newestFirst[i+1:], listSeq, &blocks)
		}
		if err != nil {
			delete(work, sg)
			s.log.Debug("segkv: garbage estimate skipped a segment", "path", sg.df.path, "err", err)
			continue
		}
		work[sg] = g
	}
	blocks.reset()

	present := make(map[*sealed]bool, len(newestFirst))
	for _, sg := range newestFirst {
		present[sg] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.segs == nil {
		t.segs = map[*sealed]*segGarbage{}
	}
	t.newestSeq = max(t.newestSeq, listSeq)
	for sg, g := range work {
		if cur := t.segs[sg]; cur != nil {
			cur.absorb(g)
		} else {
			t.segs[sg] = g
		}
	}
	out := make(garbageBytes, len(newestFirst))
	for sg, g := range t.segs {
		if !present[sg] {
			// Gone from this view. A segment leaves the list for good, but
			// a refresh of an older view than one already merged must not
			// forget one that a newer view added.
			if listSeq >= t.newestSeq {
				delete(t.segs, sg)
			}
			continue
		}
		if b := g.bytes(sg); b > 0 {
			out[sg] = b
		}
	}
	return out
}

// garbageBytes maps segments to their estimated garbage bytes, as a
// refresh left them.
type garbageBytes map[*sealed]int64

// of returns sg's estimated garbage bytes (0 if it has no estimate).
func (gb garbageBytes) of(sg *sealed) int64 { return gb[sg] }

// sampleGarbage picks the segment's sample positions and reads their
// record lengths and kinds. In a block file, whose index positions are
// blocks, a sample is the middle record of a block, read through c, with
// the block's share of bytes per record as its length.
func sampleGarbage(sg *sealed, c *blockCache) (*segGarbage, error) {
	g := &segGarbage{}
	ix := sg.index()
	if ix.BlockFile() {
		return g, g.sampleBlocks(sg, ix, c)
	}
	n := ix.Len()
	m := min(n, garbageSamples)
	g.samples = make([]garbageSample, m)
	for j := range g.samples {
		pos := int((int64(2*j+1) * int64(n)) / int64(2*m))
		e, err := ix.At(pos)
		if err != nil {
			return nil, fmt.Errorf("segkv: read index of %s: %w", sg.df.path, err)
		}
		g.samples[j] = garbageSample{pos: pos, length: e.Length, tomb: e.Kind == index.KindDelete}
		g.total += int64(e.Length)
	}
	return g, nil
}

// sampleBlocks samples a block file, whose index positions are blocks:
// every record when the file holds at most garbageSamples keys, else
// evenly spaced records of evenly spaced blocks, about garbageSamples in
// all, read through c. A sample's length is its block's bytes per record.
func (g *segGarbage) sampleBlocks(sg *sealed, ix *index.Index, c *blockCache) error {
	n := ix.Len()
	m, per := n, math.MaxInt // every record
	if sg.meta.Keys > garbageSamples {
		m = min(n, garbageSamples)
		per = max(1, garbageSamples/max(m, 1))
	}
	for j := range m {
		pos := int((int64(2*j+1) * int64(n)) / int64(2*m))
		e, err := ix.At(pos)
		if err != nil {
			return fmt.Errorf("segkv: read index of %s: %w", sg.df.path, err)
		}
		sl, err := c.block(sg.df, e.Offset, e.Length)
		if err != nil {
			return fmt.Errorf("segkv: read %s: %w", sg.df.path, err)
		}
		recs := sl.bi.Len()
		length := max(e.Length/uint32(max(recs, 1)), 1)
		k := min(recs, per)
		for r := range k {
			kind, key := sl.bi.Entry(sl.records, int((int64(2*r+1)*int64(recs))/int64(2*k)))
			g.samples = append(g.samples, garbageSample{pos: pos, key: bytes.Clone(key), length: length, tomb: kind == segment.KindDelete})
			g.total += int64(length)
		}
	}
	return nil
}

// update checks the live samples against the segments added newer than
// the last update, and the live tombstone samples against the older ones
// if the list changed.
func (g *segGarbage) update(sg *sealed, newer, older []*sealed, listSeq uint64, c *blockCache) error {
	var fresh []*sealed
	maxOrder := g.newerSeen
	for _, n := range newer {
		if n.meta.Order > g.newerSeen {
			fresh = append(fresh, n)
			maxOrder = max(maxOrder, n.meta.Order)
		}
	}
	recheckTombs := g.listSeq != listSeq
	if len(fresh) == 0 && !recheckTombs {
		return nil
	}
	ix := sg.index()
	for j := range g.samples {
		smp := &g.samples[j]
		if smp.dead || (len(fresh) == 0 && !smp.tomb) {
			continue
		}
		key := smp.key
		if key == nil {
			e, err := ix.At(smp.pos)
			if err != nil {
				return err
			}
			key = e.Key
		}
		probe := index.NewProbe(key)
		dead, err := anyHolds(fresh, &probe, c)
		if err != nil {
			return err
		}
		if !dead && smp.tomb && recheckTombs {
			held, err := anyHolds(older, &probe, c)
			if err != nil {
				return err
			}
			dead = !held
		}
		if dead {
			smp.dead = true
			g.dead += int64(smp.length)
		}
	}
	g.newerSeen, g.listSeq = maxOrder, listSeq
	return nil
}

// anyHolds reports whether one of segs holds the probe's key: a record of
// it (of any kind), or a range tombstone over it.
// A block file's index names only the block that would hold the key: the
// block is read through c to find out.
func anyHolds(segs []*sealed, p *index.Probe, c *blockCache) (bool, error) {
	key := p.Key()
	for _, sg := range segs {
		ix := sg.index()
		if ix.Ranges().Covers(key) {
			return true, nil
		}
		if !mayHoldKey(sg, key) {
			continue
		}
		e, found, _, err := ix.Lookup(p)
		if err != nil {
			return false, fmt.Errorf("segkv: read index of %s: %w", sg.df.path, err)
		}
		if found && ix.BlockFile() {
			if _, found, err = c.findRecord(sg.df, e.Offset, e.Length, key); err != nil {
				return false, fmt.Errorf("segkv: read %s: %w", sg.df.path, err)
			}
		}
		if found {
			return true, nil
		}
	}
	return false, nil
}

// mayHoldKey reports whether key lies within the segment's recorded key
// range (a segment recorded without one may hold any key). The index, not
// the manifest's key count, says whether it holds keys at all: manifests
// of old versions did not record the count.
func mayHoldKey(sg *sealed, key []byte) bool {
	if sg.index().Len() == 0 {
		return false
	}
	m := &sg.meta
	if len(m.MinKey) == 0 && len(m.MaxKey) == 0 {
		return true
	}
	return bytes.Compare(key, m.MinKey) >= 0 && bytes.Compare(key, m.MaxKey) <= 0
}

// reclaimer filters a segment rewritten alone: it drops the records that
// the segments newer than it shadow, and the point tombstones with nothing
// older to delete. Its segments are pinned for the rewrite.
type reclaimer struct {
	newer  []*sealed
	older  []*sealed
	blocks blockCache // the blocks of block files it probes
}

// drop reports whether the rewrite may leave out the entry e for key.
func (r *reclaimer) drop(key []byte, kind segment.RecordKind) (bool, error) {
	p := index.NewProbe(key)
	if dead, err := anyHolds(r.newer, &p, &r.blocks); dead || err != nil {
		return dead, err
	}
	if kind != index.KindDelete {
		return false, nil
	}
	held, err := anyHolds(r.older, &p, &r.blocks)
	return !held, err
}
