// Package legacy re-enacts the seal protocol of the reference design that
// segkv replaces. It exists only so that segbench can measure the old
// protocol beside the new one, on the same vfs and the same disk, in one run;
// nothing in the engine uses it, and nobody should store data with it.
//
// Per seal the reference design made each of its three files durable on its
// own, and rewrote the whole manifest:
//
//  1. the data file (one record here: the benchmark seals a one-record tail)
//     is written to a temporary name, fsynced, renamed, and the directory
//     fsynced;
//  2. the index file likewise: temporary name, fsync, rename, directory fsync;
//  3. the manifest, one entry per segment, is rewritten whole to a temporary
//     file, fsynced, renamed over the old one, and the directory fsynced.
//
// That is six fsyncs (three of them of the directory) and three renames per
// seal, and manifest bytes written per seal that grow linearly with the
// number of segments: the quadratic the new manifest log removes.
//
// The manifest's encoding is sized to reproduce the reference table exactly:
// a header of 79 bytes plus the decimal segment count, and one entry of 185
// bytes plus the decimal segment id per segment (ids start at 1), so that 250,
// 1000 and 2000 segments give 46974, 187976 and 376976 bytes.
//
// Open and Close carry the reference design's lifecycle cost too: creating
// the directory (one directory fsync), writing the initial manifest, the
// rewrite Open always did after loading it, and the clean-shutdown rewrite at
// Close (two fsyncs and one rename each). That is 7 fsyncs and 3 renames
// outside the seals, so 200 seals cost 1207 fsyncs and 603 renames, the totals
// the reference measured with strace.
package legacy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"

	"github.com/segkv/segkv/vfs"
)

// ManifestName is the name of the manifest inside the store directory.
const ManifestName = "MANIFEST"

const (
	dataMagic  = "segkvref"
	indexMagic = "segkvrix"
	bloomBytes = 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entry is what the manifest records about one segment.
type entry struct {
	id       uint64
	size     int64
	dataCRC  uint32
	indexCRC uint32
	smallest []byte
	largest  []byte
}

// Store is the reference design reduced to what a seal touches: an in-memory
// tail of pending records and a list of segments named by a manifest.
type Store struct {
	fs      vfs.FS
	dir     string
	nextID  uint64
	segs    []entry
	pending [][2][]byte // key, value pairs not yet sealed
	closed  bool
	// manifestSize is the size of the manifest written last.
	manifestSize int64
}

// Open creates a fresh store in dir, which must not hold one already. The
// directory's parent must exist.
func Open(fs vfs.FS, dir string) (*Store, error) {
	if _, err := fs.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return nil, fmt.Errorf("legacy: %s already holds a store", dir)
	}
	if err := fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("legacy: create %s: %w", dir, err)
	}
	// The reference design made the new directory's own entry durable.
	if err := fs.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("legacy: sync parent of %s: %w", dir, err)
	}
	s := &Store{fs: fs, dir: dir, nextID: 1}
	// The initial manifest, then the rewrite the reference design's Open
	// always performed after loading the manifest it found.
	for range 2 {
		if err := s.writeManifest(false); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Put adds a record to the unsealed tail. Like the reference design's
// memtable it costs no I/O; the seal pays for durability.
func (s *Store) Put(key, value []byte) error {
	if s.closed {
		return errors.New("legacy: store is closed")
	}
	s.pending = append(s.pending, [2][]byte{append([]byte(nil), key...), append([]byte(nil), value...)})
	return nil
}

// Seal writes the pending records as a segment, with the reference design's
// six fsyncs and three renames. Sealing nothing does nothing.
func (s *Store) Seal() error {
	if s.closed {
		return errors.New("legacy: store is closed")
	}
	if len(s.pending) == 0 {
		return nil
	}
	id := s.nextID
	data, offsets := encodeData(s.pending)
	dataName := filepath.Join(s.dir, fmt.Sprintf("%016x.seg", id))
	if err := s.writeDurably(dataName, data); err != nil {
		return err
	}
	idx := encodeIndex(s.pending, offsets)
	if err := s.writeDurably(filepath.Join(s.dir, fmt.Sprintf("%016x.idx", id)), idx); err != nil {
		return err
	}
	smallest, largest := s.pending[0][0], s.pending[0][0]
	for _, kv := range s.pending[1:] {
		if string(kv[0]) < string(smallest) {
			smallest = kv[0]
		}
		if string(kv[0]) > string(largest) {
			largest = kv[0]
		}
	}
	s.segs = append(s.segs, entry{
		id: id, size: int64(len(data)),
		dataCRC:  crc32.Checksum(data, castagnoli),
		indexCRC: crc32.Checksum(idx, castagnoli),
		smallest: smallest,
		largest:  largest,
	})
	s.nextID++
	if err := s.writeManifest(false); err != nil {
		// The segment is not named: forget it, as the reference design did.
		s.segs = s.segs[:len(s.segs)-1]
		return err
	}
	s.pending = s.pending[:0]
	return nil
}

// Close rewrites the manifest once more with the clean-shutdown mark.
func (s *Store) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.writeManifest(true)
}

// Segments returns the number of sealed segments.
func (s *Store) Segments() int { return len(s.segs) }

// ManifestSize returns the size of the manifest written last.
func (s *Store) ManifestSize() int64 { return s.manifestSize }

// ManifestPath returns the manifest's path.
func (s *Store) ManifestPath() string { return filepath.Join(s.dir, ManifestName) }

// writeManifest rewrites the whole manifest: the reference design's commit.
func (s *Store) writeManifest(clean bool) error {
	buf := EncodeManifest(s.nextID, s.segs, clean)
	if err := s.writeDurably(s.ManifestPath(), buf); err != nil {
		return err
	}
	s.manifestSize = int64(len(buf))
	return nil
}

// writeDurably is the reference design's way of making one file durable:
// write a temporary file, fsync it, rename it into place, fsync the
// directory. Two fsyncs and one rename.
func (s *Store) writeDurably(name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := s.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("legacy: create %s: %w", tmp, err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return fmt.Errorf("legacy: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("legacy: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("legacy: close %s: %w", tmp, err)
	}
	if err := s.fs.Rename(tmp, name); err != nil {
		return fmt.Errorf("legacy: rename %s: %w", tmp, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("legacy: sync directory %s: %w", s.dir, err)
	}
	return nil
}

// encodeData lays out a data file: magic, then per record key length, value
// length (u32 each), key, value and a CRC-32C of those. It returns the offset
// of each record.
func encodeData(recs [][2][]byte) ([]byte, []int64) {
	buf := []byte(dataMagic)
	offs := make([]int64, len(recs))
	for i, kv := range recs {
		offs[i] = int64(len(buf))
		start := len(buf)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(kv[0])))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(kv[1])))
		buf = append(buf, kv[0]...)
		buf = append(buf, kv[1]...)
		buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf[start:], castagnoli))
	}
	return buf, offs
}

// encodeIndex lays out an index file: magic, record count, then per record
// key length, key, offset; a small bloom filter; a CRC-32C of it all. Its
// exact layout does not matter to the benchmark, only that it is a separate
// small file made durable on its own.
func encodeIndex(recs [][2][]byte, offs []int64) []byte {
	buf := []byte(indexMagic)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(recs)))
	var bloom [bloomBytes]byte
	for i, kv := range recs {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(kv[0])))
		buf = append(buf, kv[0]...)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(offs[i]))
		h := crc32.Checksum(kv[0], castagnoli)
		for k := range 3 {
			bit := (h >> (k * 9)) % (bloomBytes * 8)
			bloom[bit/8] |= 1 << (bit % 8)
		}
	}
	buf = append(buf, bloom[:]...)
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
}

// keyField renders up to 8 bytes of a key as 16 hex digits, zero-padded, so
// that entries have the reference design's fixed width whatever the key.
func keyField(k []byte) string {
	var b [8]byte
	copy(b[:], k)
	return fmt.Sprintf("%016x", b[:])
}

// EncodeManifest renders the whole manifest: a header line, then one line
// per segment. See the package comment for the sizes.
func EncodeManifest(nextID uint64, segs []entry, clean bool) []byte {
	c := 0
	if clean {
		c = 1
	}
	buf := fmt.Appendf(nil, `{"fmt":"segkv-ref","ver":1,"clean":%d,"next_id":"%016x","segments":%d}`+"\n",
		c, nextID, len(segs))
	for _, e := range segs {
		buf = fmt.Appendf(buf, `{"id":%d,"data":"%016x.seg","index":"%016x.idx","size":"%016x","data_crc":"%08x","icrc":"%08x","min":"%s","max":"%s"}`+"\n",
			e.id, e.id, e.id, e.size, e.dataCRC, e.indexCRC, keyField(e.smallest), keyField(e.largest))
	}
	return buf
}
