// Package corruption defines the one error type that every segkv decoder uses
// to report damage that a crash cannot produce: a bad record followed by valid
// ones, a sealed segment whose bytes disagree with its recorded checksum, a
// manifest record out of sequence. The error names the file and the byte
// offset so that an operator can find the damage, and it matches ErrCorrupt
// under errors.Is so that callers can test for it without knowing the detail.
package corruption

import (
	"errors"
	"fmt"
)

// ErrCorrupt is the sentinel every *Error matches with errors.Is.
var ErrCorrupt = errors.New("segkv: corruption")

// Error describes corruption found in one file.
type Error struct {
	Path   string // file in which the damage was found
	Offset int64  // byte offset of the damaged record or field; -1 when unknown
	Reason string // what was wrong, in words
}

// New returns an *Error for path at offset.
func New(path string, offset int64, format string, args ...any) *Error {
	return &Error{Path: path, Offset: offset, Reason: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("segkv: corruption in %s: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("segkv: corruption in %s at offset %d: %s", e.Path, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true for every *Error.
func (e *Error) Is(target error) bool { return target == ErrCorrupt }
