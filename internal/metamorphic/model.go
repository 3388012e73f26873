package metamorphic

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// kv is one state of a store: key to value. A kv in the history is never
// modified; every change makes a new one.
type kv map[string]string

// replay applies ops in order: a put sets, a delete removes, a range
// deletion removes every key in [Key, End). A store applies a batch, and a
// segment applies over older data, exactly so (a unit's own keys are newer
// than its own range tombstones that cover them).
func replay(m kv, ops []BatchOp) {
	for _, o := range ops {
		switch o.Kind {
		case OpPut:
			m[string(o.Key)] = string(o.Val)
		case OpDelete:
			delete(m, string(o.Key))
		case OpDeleteRange:
			lo, hi := string(o.Key), string(o.End)
			for k := range m {
				if k >= lo && k < hi {
					delete(m, k)
				}
			}
		}
	}
}

func sortedKeys(m kv) []string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	return keys
}

// diff describes how got differs from want, briefly.
func diff(got, want kv) string {
	var b strings.Builder
	n := 0
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	all := slices.Collect(maps.Keys(keys))
	sort.Strings(all)
	for _, k := range all {
		g, gok := got[k]
		w, wok := want[k]
		if gok == wok && g == w {
			continue
		}
		n++
		if n > 6 {
			continue
		}
		fmt.Fprintf(&b, " %q: got %s, want %s;", k, showVal(g, gok), showVal(w, wok))
	}
	if n > 6 {
		fmt.Fprintf(&b, " ... %d keys differ in all", n)
	}
	return b.String()
}

func showVal(v string, ok bool) string {
	if !ok {
		return "absent"
	}
	return qv([]byte(v))
}

// histEntry is the store's state after one acknowledged change.
type histEntry struct {
	st      kv
	adopted map[uint64]bool // digests of the peer segments imported so far
	// maybe holds digests that may or may not have been adopted: a power
	// loss came back to a state that reads the same with and without
	// their import (an import wholly hidden by newer writes). The next
	// import of such a stream tells which it was.
	maybe map[uint64]bool
}

// model is what the store under test must show: its acknowledged history
// (a state per change, from the last durable point on), and the split of
// the current state into sealed data and the live file's writes, which
// decides what an import shadows.
type model struct {
	base    int // absolute index of hist[0]
	hist    []histEntry
	durable int // absolute index of the last state every crash must keep

	syncAlways bool
	segSize    int64
	// presentDoubt: Avoid.PresentReimport.
	presentDoubt bool

	// sealed is the state of the sealed segments alone and live the writes
	// since; valid only while liveKnown (an automatic seal, or a crash,
	// makes the split unknown until the next explicit seal).
	sealed    kv
	live      []BatchOp
	liveBytes int64
	liveKnown bool
}

func newModel(c Config) *model {
	return &model{
		hist:         []histEntry{{st: kv{}, adopted: map[uint64]bool{}}},
		syncAlways:   c.Sync == 0,
		segSize:      c.SegmentSize,
		sealed:       kv{},
		presentDoubt: c.Avoid.PresentReimport,
		liveKnown:    true,
	}
}

func (m *model) last() int      { return m.base + len(m.hist) - 1 }
func (m *model) cur() histEntry { return m.hist[len(m.hist)-1] }
func (m *model) at(i int) (histEntry, bool) {
	if i < m.base || i > m.last() {
		return histEntry{}, false
	}
	return m.hist[i-m.base], true
}

func (m *model) push(e histEntry) {
	m.hist = append(m.hist, e)
	if m.syncAlways {
		m.setDurable()
	}
}

// setDurable marks the current state durable: no crash may return to an
// older one.
func (m *model) setDurable() { m.durable = m.last() }

// trim forgets the history before state d (at most the durable one), to
// which no crash image still to be checked can return.
func (m *model) trim(d int) {
	d = min(d, m.durable)
	if drop := d - m.base; drop > 0 {
		m.hist = slices.Clone(m.hist[drop:])
		m.base = d
	}
}

// write records an acknowledged Put, Delete, DeleteRange or Apply.
func (m *model) write(ops []BatchOp) {
	c := m.cur()
	st := maps.Clone(c.st)
	replay(st, ops)
	m.push(histEntry{st: st, adopted: c.adopted, maybe: c.maybe})
	m.live = append(m.live, ops...)
	for _, o := range ops {
		m.liveBytes += int64(len(o.Key)+len(o.Val)+len(o.End)) + 32
	}
	m.liveBytes += 32
	// The store seals on its own once the live file reaches SegmentSize;
	// from well before that, the split is unknown.
	if 2*m.liveBytes+4096 >= m.segSize {
		m.liveKnown = false
	}
}

// seal records an explicit seal: everything is in sealed segments, and
// durable.
func (m *model) seal() {
	m.sealed = m.cur().st
	m.live = nil
	m.liveBytes = 0
	m.liveKnown = true
	m.setDurable()
}

// importSegs records an Import of segs (in stream order) and returns how
// many the store must adopt: a stream whose digest was adopted before
// (or earlier in the batch) changes nothing; the others go above every
// sealed segment and below the live file's writes. An import that adopts
// something is a durable point: its commit seals (and so syncs) the live
// file's writes above the imported segments. Requires liveKnown.
//
// present holds the digests of the store's own segments just before the
// import: a stream of equal content (equal digest) is skipped as present
// (docs/SYNC.md), unless a merge retired that segment meanwhile, so for
// those the store decides, as it does for maybe.
func (m *model) importSegs(segs []*peerSeg, added, present map[uint64]bool) (want int, err error) {
	c := m.cur()
	adopted := maps.Clone(c.adopted)
	maybe := maps.Clone(c.maybe)
	sealed := maps.Clone(m.sealed)
	remembered := false // a stream skipped as present, newly remembered
	for _, s := range segs {
		if present[s.digest] && !adopted[s.digest] && !maybe[s.digest] && !added[s.digest] && !m.presentDoubt {
			remembered = true
		}
		if maybe[s.digest] || (present[s.digest] && !adopted[s.digest]) {
			// Adopted before the power loss or not, or present: the
			// store knows.
			delete(maybe, s.digest)
			if !added[s.digest] {
				if present[s.digest] && m.presentDoubt {
					// Skipped as present: whether the store remembers
					// it is left open (Avoid.PresentReimport).
					maybe = addDigest(maybe, s.digest)
				} else {
					adopted[s.digest] = true
				}
				continue
			}
			adopted[s.digest] = true
		} else if adopted[s.digest] {
			continue
		}
		adopted[s.digest] = true
		replay(sealed, s.ops)
		want++
	}
	for d := range added {
		if !adopted[d] {
			return 0, fmt.Errorf("the store adopted a stream of digest %x that was not imported", d)
		}
	}
	if want == 0 {
		// Nothing adopted. Nothing committed either, unless a stream was
		// skipped as present and is remembered from now on: that commit
		// of the digests alone is a durable point (the store syncs the
		// live file first). Otherwise the unsynced writes before it may
		// still be lost, as a suffix. A stream the model could not place
		// (maybe) may have been remembered here too: then the store
		// decided, and the point is not claimed durable.
		m.push(histEntry{st: c.st, adopted: adopted, maybe: maybe})
		if remembered {
			m.setDurable()
		}
		return 0, nil
	}
	st := maps.Clone(sealed)
	replay(st, m.live)
	m.push(histEntry{st: st, adopted: adopted, maybe: maybe})
	// The import's commit seals the live file's writes above the imported
	// segments (docs/SYNC.md): all of it is sealed now, and durable.
	m.seal()
	return want, nil
}

// replace records a ReplaceAll that installed st: the whole state, in
// sealed segments under a new, empty live file, committed durably; the
// adopted digests are forgotten (an import of a stream adopted before is
// adopted again), and so is any doubt about them.
func (m *model) replace(st kv) {
	m.push(histEntry{st: st, adopted: map[uint64]bool{}})
	m.seal()
}

// sealedNow records a seal the store made inside an acknowledged write (a
// range drop seals the live file, which holds the tombstone, in the
// commit that drops the segments it covers).
func (m *model) sealedNow() {
	m.sealed = m.cur().st
	m.live = nil
	m.liveBytes = 0
}

// rollback makes state i (found after a crash) the current one. The
// states in [lo, hi] that read the same as i could be what the crash kept
// as well: a stream adopted in some of them and not in others goes to
// maybe.
func (m *model) rollback(i, lo, hi int) {
	e := m.hist[i-m.base]
	var maybe map[uint64]bool
	for j := max(lo, m.base); j <= min(hi, m.last()); j++ {
		o := m.hist[j-m.base]
		if !maps.Equal(o.st, e.st) {
			continue
		}
		for d := range o.maybe {
			maybe = addDigest(maybe, d)
		}
		for d := range o.adopted {
			if !e.adopted[d] {
				maybe = addDigest(maybe, d)
			}
		}
		for d := range e.adopted {
			if !o.adopted[d] {
				maybe = addDigest(maybe, d)
			}
		}
	}
	if maybe != nil {
		for d := range e.maybe {
			maybe[d] = true
		}
		adopted := maps.Clone(e.adopted)
		for d := range maybe {
			delete(adopted, d)
		}
		m.hist[i-m.base] = histEntry{st: e.st, adopted: adopted, maybe: maybe}
	}
	m.hist = m.hist[:i-m.base+1]
	m.setDurable()
	m.liveKnown = false
	m.live = nil
	m.liveBytes = 0
}

// afterReopen records a clean Close and Open: everything is durable; the
// live file stays live unless Close sealed it (it seals a large one).
func (m *model) afterReopen() {
	m.setDurable()
	if m.liveBytes >= 512<<10 {
		m.liveKnown = false
	}
}

// iterModel is what an iterator over st within bounds must show.
type iterModel struct {
	keys  []string
	st    kv
	pos   int
	valid bool
}

func inBounds(k string, lower, upper, prefix []byte) bool {
	if lower != nil && k < string(lower) {
		return false
	}
	if upper != nil && k >= string(upper) {
		return false
	}
	return prefix == nil || strings.HasPrefix(k, string(prefix))
}

func newIterModel(st kv, lower, upper, prefix []byte) *iterModel {
	var keys []string
	for k := range st {
		if inBounds(k, lower, upper, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return &iterModel{keys: keys, st: st}
}

func (im *iterModel) move(mv Move, key []byte) {
	n := len(im.keys)
	switch mv {
	case MoveFirst:
		im.pos, im.valid = 0, n > 0
	case MoveLast:
		im.pos, im.valid = n-1, n > 0
	case MoveSeek:
		im.pos = sort.SearchStrings(im.keys, string(key))
		im.valid = im.pos < n
	case MoveSeekLT:
		if key == nil {
			im.pos, im.valid = n-1, n > 0
			return
		}
		im.pos = sort.SearchStrings(im.keys, string(key)) - 1
		im.valid = im.pos >= 0
	case MoveNext:
		if im.valid {
			im.pos++
			im.valid = im.pos < n
		}
	case MovePrev:
		if im.valid {
			im.pos--
			im.valid = im.pos >= 0
		}
	}
}

func addDigest(m map[uint64]bool, d uint64) map[uint64]bool {
	if m == nil {
		m = map[uint64]bool{}
	}
	m[d] = true
	return m
}
