package backup

import (
	"bytes"
	"errors"
	"testing"
)

func sampleEdit() *Edit {
	return &Edit{Seq: 9, Prev: 4, UnixNano: 1234, Writer: [16]byte{1, 2, 3},
		Removed: []SegmentKey{{Digest: 7, Size: 100}},
		Added:   []Segment{{SegmentKey: SegmentKey{Digest: 8, Size: 200}, Order: 3, Records: 5, Keys: 4, MinKey: []byte("a"), MaxKey: []byte("z")}}}
}

func TestEncodingRoundTrip(t *testing.T) {
	e := sampleEdit()
	got, err := DecodeEdit("e", EncodeEdit(e))
	if err != nil || !bytes.Equal(EncodeEdit(got), EncodeEdit(e)) {
		t.Fatalf("edit round trip: %+v %v", got, err)
	}
	c := &Checkpoint{Seq: 9, UnixNano: 5, Segments: e.Added}
	gc, err := DecodeCheckpoint("c", EncodeCheckpoint(c))
	if err != nil || !bytes.Equal(EncodeCheckpoint(gc), EncodeCheckpoint(c)) {
		t.Fatalf("checkpoint round trip: %+v %v", gc, err)
	}
	// Every single-bit flip is caught.
	data := EncodeEdit(e)
	for i := range data {
		for bit := range 8 {
			data[i] ^= 1 << bit
			if _, err := DecodeEdit("e", data); !errors.Is(err, ErrCorruptObject) {
				t.Fatalf("flip at %d.%d: %v", i, bit, err)
			}
			data[i] ^= 1 << bit
		}
	}
	if _, err := DecodeCheckpoint("e", data); !errors.Is(err, ErrCorruptObject) {
		t.Fatalf("an edit decoded as a checkpoint: %v", err)
	}
}

// FuzzDecodeEdit: any input decodes or fails with ErrCorruptObject, never
// panics, and what decodes re-encodes to the same bytes.
func FuzzDecodeEdit(f *testing.F) {
	f.Add(EncodeEdit(sampleEdit()))
	f.Add(EncodeEdit(&Edit{Seq: 1}))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEdit("f", data)
		if err != nil {
			if !errors.Is(err, ErrCorruptObject) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if !bytes.Equal(EncodeEdit(e), data) {
			t.Fatal("decoded edit re-encodes differently")
		}
	})
}

// FuzzDecodeCheckpoint is FuzzDecodeEdit for checkpoints.
func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(EncodeCheckpoint(&Checkpoint{Seq: 3, Segments: sampleEdit().Added}))
	f.Add(EncodeCheckpoint(&Checkpoint{}))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCheckpoint("f", data)
		if err != nil {
			if !errors.Is(err, ErrCorruptObject) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if !bytes.Equal(EncodeCheckpoint(c), data) {
			t.Fatal("decoded checkpoint re-encodes differently")
		}
	})
}
