package backup

import (
	"bytes"
	"cmp"
	"io"
	"slices"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func sortKeys(ks []SegmentKey) {
	slices.SortFunc(ks, func(a, b SegmentKey) int {
		if c := cmp.Compare(a.Digest, b.Digest); c != 0 {
			return c
		}
		return cmp.Compare(a.Size, b.Size)
	})
}
