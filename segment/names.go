package segment

import (
	"fmt"
	"strconv"
	"strings"
)

// FileKind is a data file's kind, recorded in the manifest for every
// segment. The kind decides the data file's name, which is how recovery
// tells a live file (or a spare made ahead of need, or a live file that
// continues another) from the output of a merge or import that never
// committed. It is a type of its own so that a record kind (RecordKind)
// cannot be passed where a file kind belongs.
type FileKind uint8

// File kinds.
const (
	// KindLog names files that were written as live files: "<id>.log".
	KindLog FileKind = 1
	// KindSeg names files written whole by merge or import: "<id>.seg".
	KindSeg FileKind = 2
)

// Known reports whether k is one of the file kinds above: a manifest that
// names any other is damaged, and guessing a name for it could make recovery
// take the segment's data file for one nothing names.
func (k FileKind) Known() bool { return k == KindLog || k == KindSeg }

// String names the kind by the extension it gives the data file; an unknown
// kind is "file kind N".
func (k FileKind) String() string {
	switch k {
	case KindLog:
		return NameLog
	case KindSeg:
		return NameSeg
	}
	return fmt.Sprintf("file kind %d", uint8(k))
}

// Name kinds recognised by ParseName.
const (
	NameLog   = "log"
	NameSeg   = "seg"
	NameIndex = "idx"
)

// DataName returns the data file name of segment id of the given kind.
func DataName(id uint64, kind FileKind) string {
	if kind == KindSeg {
		return fmt.Sprintf("%016x.%s", id, NameSeg)
	}
	return fmt.Sprintf("%016x.%s", id, NameLog)
}

// IndexName returns the index file name of segment id.
func IndexName(id uint64) string { return fmt.Sprintf("%016x.%s", id, NameIndex) }

// ParseName splits a file name made by DataName or IndexName. ok is false for
// any other name.
func ParseName(name string) (id uint64, ext string, ok bool) {
	base, ext, found := strings.Cut(name, ".")
	if !found || len(base) != 16 {
		return 0, "", false
	}
	switch ext {
	case NameLog, NameSeg, NameIndex:
	default:
		return 0, "", false
	}
	id, err := strconv.ParseUint(base, 16, 64)
	if err != nil {
		return 0, "", false
	}
	return id, ext, true
}
