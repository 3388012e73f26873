package index

import (
	"bytes"
	"fmt"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// Built is an index built from a data file.
type Built struct {
	Data     []byte // the version 3 index file
	Checksum uint64 // its checksum
	Digest   uint64
	Records  uint64
	Keys     uint64
	MinKey   []byte
	MaxKey   []byte

	entries   []Entry
	ranges    *rangedel.Set
	id        Identity
	blockFile bool
}

// Anchored returns the index file that matches want, the checksum a
// manifest recorded: Data if want is its checksum; for a block file, its
// dense index (an entry per key, each naming its block) if want is that
// one's, as builds before the sparse index of block files recorded; else,
// if want is the checksum the segment's version 1 or 2 index had, a
// version 3 file that carries it (EncodeUpgrade). Any other want is an
// error.
func (b *Built) Anchored(want uint64) ([]byte, error) {
	if want == b.Checksum {
		return b.Data, nil
	}
	if b.blockFile {
		dense, sum, err := encode(b.entries, b.ranges, b.id, 0, false)
		if err != nil {
			return nil, err
		}
		if sum == want {
			return dense, nil
		}
		return nil, fmt.Errorf("rebuilt index checksum %016x (dense %016x) differs from the manifest's %016x", b.Checksum, sum, want)
	}
	legacy, err := LegacyChecksum(b.entries, b.ranges, b.id)
	if err != nil {
		return nil, err
	}
	if legacy != want {
		return nil, fmt.Errorf("rebuilt index checksum %016x (legacy format %016x) differs from the manifest's %016x", b.Checksum, legacy, want)
	}
	data, _, err := EncodeUpgrade(b.entries, b.ranges, b.id, legacy)
	return data, err
}

// Build replays the first length bytes of a sealed data file, which must
// hold complete frames only (a torn tail in a sealed segment is corruption),
// and builds its index: the newest record of each key wins.
func Build(fsys vfs.FS, dataPath string, length int64) (*Built, error) {
	f, err := fsys.Open(dataPath)
	if err != nil {
		return nil, fmt.Errorf("index: open %s: %w", dataPath, err)
	}
	defer f.Close()
	ib := NewBuilder()
	rr, err := segment.ReplayFile(f, dataPath, length, func(r segment.Record, off int64, n int) error {
		ib.Add(r, off, n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if rr.Scan.End != length {
		return nil, corruption.New(dataPath, rr.Scan.End, "sealed segment ends at %d, the manifest recorded %d", rr.Scan.End, length)
	}
	digest, err := segment.Digest(f, length)
	if err != nil {
		return nil, err
	}
	entries, ranges := ib.Finish()
	id := Identity{DataLength: length, DataDigest: digest}
	blockFile := rr.Version >= segment.BlockVersion
	data, sum, err := encode(entries, ranges, id, 0, blockFile)
	if err != nil {
		return nil, fmt.Errorf("index: encode index of %s: %w", dataPath, err)
	}
	b := &Built{Data: data, Checksum: sum, Digest: digest, Records: uint64(rr.Records), Keys: uint64(len(entries)),
		entries: entries, ranges: ranges, id: id, blockFile: blockFile}
	if len(entries) > 0 {
		b.MinKey = bytes.Clone(entries[0].Key)
		b.MaxKey = bytes.Clone(entries[len(entries)-1].Key)
	}
	return b, nil
}
