package rangedel

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func sp(a, b string) Span { return Span{Start: []byte(a), End: []byte(b)} }

func TestUnionMergesOverlappingAndTouching(t *testing.T) {
	s := Union(sp("c", "e"), sp("a", "b"), sp("b", "c"), sp("x", "y"), sp("d", "f"), sp("q", "q"))
	require.Equal(t, []Span{sp("a", "f"), sp("x", "y")}, s.Spans())
	require.True(t, s.Covers([]byte("a")))
	require.True(t, s.Covers([]byte("e\xff")))
	require.False(t, s.Covers([]byte("f")))
	require.False(t, s.Covers([]byte("y")))
	require.True(t, s.ContainsSpan(sp("b", "f")))
	require.False(t, s.ContainsSpan(sp("b", "f\x00")))
	require.True(t, s.CoversClosed([]byte("x"), []byte("x\xff")))
	require.False(t, s.CoversClosed([]byte("e"), []byte("x")))
	var empty *Set
	require.False(t, empty.Covers([]byte("a")))
	require.Equal(t, 0, empty.Len())
	require.Nil(t, Union(sp("b", "a")))
}

// TestSetMatchesModel: a set built from random spans, by Union or by With
// one span at a time, answers Covers and ContainsSpan like a brute-force
// check over the spans.
func TestSetMatchesModel(t *testing.T) {
	alphabet := []string{"", "a", "a\x00", "ab", "b", "ba", "c", "d", "e"}
	rapid.Check(t, func(rt *rapid.T) {
		key := rapid.SampledFrom(alphabet)
		var spans []Span
		var incremental *Set
		for i, n := 0, rapid.IntRange(0, 6).Draw(rt, "n"); i < n; i++ {
			s := sp(key.Draw(rt, "start"), key.Draw(rt, "end"))
			spans = append(spans, s)
			incremental = incremental.With(s)
		}
		set := Union(spans...)
		require.Equal(rt, set.Spans(), incremental.Spans())
		covers := func(k string) bool {
			return slices.ContainsFunc(spans, func(s Span) bool { return s.Covers([]byte(k)) })
		}
		for _, k := range alphabet {
			require.Equal(rt, covers(k), set.Covers([]byte(k)), "key %q", k)
		}
		// ContainsSpan: every key of the span is covered, judged on the
		// alphabet's keys (and a witness key just below each end).
		for _, a := range alphabet {
			for _, b := range alphabet {
				q := sp(a, b)
				if q.Empty() {
					continue
				}
				if set.ContainsSpan(q) {
					for _, k := range alphabet {
						if q.Covers([]byte(k)) {
							require.True(rt, covers(k), fmt.Sprintf("%q in %v", k, q))
						}
					}
				}
			}
		}
		for i, s := range set.Spans() {
			require.False(rt, s.Empty())
			if i > 0 {
				require.Negative(rt, bytesCompare(set.Spans()[i-1].End, s.Start))
			}
		}
	})
}

func bytesCompare(a, b []byte) int { return slices.Compare(a, b) }

// TestTreeMatchesUnion: a Tree fed spans one at a time holds exactly their
// Union, answers Covers like it, and a Copy taken midway keeps its spans
// whatever the original absorbs afterwards.
func TestTreeMatchesUnion(t *testing.T) {
	alphabet := []string{"", "a", "a\x00", "ab", "b", "ba", "c", "d", "e"}
	rapid.Check(t, func(rt *rapid.T) {
		key := rapid.SampledFrom(alphabet)
		tree := NewTree()
		var spans []Span
		var frozen *Tree
		var frozenSpans []Span
		for i, n := 0, rapid.IntRange(0, 10).Draw(rt, "n"); i < n; i++ {
			s := sp(key.Draw(rt, "start"), key.Draw(rt, "end"))
			spans = append(spans, s)
			tree.Add(s)
			if i == n/2 {
				frozen, frozenSpans = tree.Copy(), slices.Clone(spans)
			}
			require.Equal(rt, Union(spans...).Spans(), tree.Set().Spans())
			for _, k := range alphabet {
				require.Equal(rt, Union(spans...).Covers([]byte(k)), tree.Covers([]byte(k)), "key %q", k)
			}
		}
		if frozen != nil {
			require.Equal(rt, Union(frozenSpans...).Spans(), frozen.Set().Spans())
		}
	})
}
