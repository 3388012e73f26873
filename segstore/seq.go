package segstore

import "iter"

// All returns every key of the store with its value, in key order, for a
// range-over-func loop. Each loop reads a snapshot taken when it starts:
//
//	var err error
//	for k, v := range s.All(&err) {
//		...
//	}
//	if err != nil {
//		...
//	}
//
// A loop owns an Iterator for its duration and closes it when the loop
// ends, also when the body breaks out of it (or returns, or panics). The
// error that stopped the walk early (a value that cannot be read: a
// *CorruptionError or an I/O error; ErrClosed once the store is closed) is
// stored in *errp, and nil when the walk ended normally or the body broke
// out. The sequence yields nothing if errp is nil: an error must have
// somewhere to go.
//
// k and v alias buffers the loop reuses: they are valid until the next
// iteration only and must not be modified; bytes.Clone them to keep them.
// So a walk allocates nothing per key (see Iterator.AppendValue). The
// cursor API (NewIterator) is there for seeks, reverse walks and reading
// values only for some keys.
func (s *Store) All(errp *error) iter.Seq2[[]byte, []byte] { return s.Range(nil, nil, errp) }

// Range is All restricted to the keys k with lo <= k < hi; a nil bound is
// open.
func (s *Store) Range(lo, hi []byte, errp *error) iter.Seq2[[]byte, []byte] {
	return walk(func() (*Iterator, error) {
		return s.NewIterator(&IterOptions{LowerBound: lo, UpperBound: hi})
	}, errp)
}

// All returns every key of the snapshot with its value, in key order, for
// a range-over-func loop: see Store.All. Every loop over it sees the same
// state, the snapshot's.
func (sn *Snapshot) All(errp *error) iter.Seq2[[]byte, []byte] { return sn.Range(nil, nil, errp) }

// Range is All restricted to the keys k with lo <= k < hi; a nil bound is
// open.
func (sn *Snapshot) Range(lo, hi []byte, errp *error) iter.Seq2[[]byte, []byte] {
	return walk(func() (*Iterator, error) {
		return sn.NewIterator(&IterOptions{LowerBound: lo, UpperBound: hi})
	}, errp)
}

// walk is the sequence of every key and value of the iterator open makes,
// which it closes when the loop ends.
func walk(open func() (*Iterator, error), errp *error) iter.Seq2[[]byte, []byte] {
	return func(yield func(k, v []byte) bool) {
		if errp == nil {
			return
		}
		*errp = nil
		it, err := open()
		if err != nil {
			*errp = err
			return
		}
		defer it.Close() // its only error is a second Close
		var buf []byte
		for ok := it.First(); ok; ok = it.Next() {
			if buf, err = it.AppendValue(buf[:0]); err != nil {
				*errp = err
				return
			}
			if !yield(it.Key(), buf) {
				return
			}
		}
		*errp = it.Err()
	}
}
