package segstore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/vfs"
)

// SyncMode says when acknowledged writes become durable.
type SyncMode int

const (
	// SyncAlways (the zero value) makes every acknowledged Put, Delete and
	// Apply durable before it returns. Concurrent writers share one write and
	// one fdatasync (group commit).
	SyncAlways SyncMode = iota
	// SyncManual makes writes durable only on Sync, Seal and Close. A crash
	// loses a suffix of unsynced writes, never a middle part.
	SyncManual
	// SyncInterval syncs in the background every Options.SyncInterval; a crash
	// loses at most about that much acknowledged history, as a suffix.
	SyncInterval
)

func (m SyncMode) String() string {
	switch m {
	case SyncAlways:
		return "always"
	case SyncManual:
		return "manual"
	case SyncInterval:
		return "interval"
	}
	return fmt.Sprintf("SyncMode(%d)", int(m))
}

// Defaults for Options fields left zero.
const (
	DefaultMaxKeySize     = 64 << 10
	DefaultMaxValueSize   = 64 << 20
	DefaultSegmentSize    = 64 << 20
	DefaultSyncInterval   = 100 * time.Millisecond
	DefaultMaxOpenFiles   = 256
	maxBatchPayload       = 512 << 20
	minSegmentSize        = 4 << 10
	absoluteMaxKeySize    = 1 << 20
	absoluteMaxValueSize  = 256 << 20
	defaultMergeStepBytes = 1 << 30
)

// Options configures a Store. The zero value (or a nil *Options) is valid.
type Options struct {
	// FS is the file system; nil means the operating system's.
	FS vfs.FS
	// Sync says when writes become durable; the zero value is SyncAlways.
	Sync SyncMode
	// SyncInterval is the period of SyncInterval mode.
	SyncInterval time.Duration
	// MaxKeySize and MaxValueSize bound what Put accepts (and what Import
	// accepts from a peer). Zero means the defaults.
	MaxKeySize   int
	MaxValueSize int
	// SegmentSize is the live file size at which the store seals it
	// automatically. It is also how much space each live file preallocates.
	SegmentSize int64
	// MaxOpenFiles bounds the sealed segment files held open for reads; the
	// least recently used are closed beyond it.
	MaxOpenFiles int
	// Merge tunes (or disables) the background merge.
	Merge MergeOptions
	// DisableCompression makes merges store their output blocks raw
	// instead of S2-compressed. Merged data is still written in key-ordered
	// blocks; files written either way are read by every build that reads
	// block files, whatever this option says.
	DisableCompression bool
	// DisableMmap makes reads of sealed segments use pread instead of a
	// read-only memory mapping. A mapping saves a system call per read,
	// but an I/O error on a mapped page (or the file being cut short
	// behind the store's back) kills the process with SIGBUS instead of
	// returning an error, as in bbolt and LMDB. Reads verify each record's
	// checksum either way. Ignored for file systems whose files do not
	// implement vfs.Mapper.
	DisableMmap bool
	// Logger receives the store's log records, with their figures as
	// attributes: each repair Open makes and each failure the store
	// recovers from (WARN); the store failing (ERROR); Open with what it
	// found, Close, each seal, merge step, import and manifest rotation
	// (INFO); the start of a seal or merge step and other detail (DEBUG).
	// nil discards.
	Logger *slog.Logger
	// ReadOnly opens an existing store for reading only. Open repairs
	// nothing, writes nothing, removes nothing and starts no background
	// work: a torn tail of the live file or of the manifest log is read up
	// to its last valid record and left on disk, files a writable Open
	// would remove are left and not served, and an index that must be
	// rebuilt is rebuilt in memory only. RecoveryReport says what a
	// writable Open would have repaired. Every write (Put, Delete,
	// DeleteRange, Apply, Seal, Sync, Import, ReplaceAll, Compact,
	// NewSealedSnapshot) returns ErrReadOnly.
	//
	// A read-only Open takes the same exclusive lock as a writable one: it
	// fails with ErrLocked while any other Store (read-only or not) has the
	// directory open, and keeps every other Store out while it is open. The
	// only file it may create is the empty LOCK file, if the directory has
	// none; the lock opens that file for writing, so read-only media are
	// refused with the open's error. A directory that holds no store fails with an error matching
	// fs.ErrNotExist. A live chain longer than two files (never left by one
	// crash) is refused with ErrReadOnly: open it writable once.
	ReadOnly bool
	// Events receives the same events with their figures as values, for
	// a program to act on or count: see EventListener, which says on which
	// goroutine and under which locks each runs. The zero value listens to
	// nothing.
	Events EventListener
}

func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	if out.FS == nil {
		out.FS = vfs.NewOS()
	}
	switch out.Sync {
	case SyncAlways, SyncManual, SyncInterval:
	default:
		return out, fmt.Errorf("%w: unknown sync mode %d", ErrInvalidOption, out.Sync)
	}
	if out.SyncInterval < 0 {
		return out, fmt.Errorf("%w: negative SyncInterval", ErrInvalidOption)
	}
	if out.SyncInterval == 0 {
		out.SyncInterval = DefaultSyncInterval
	}
	if out.MaxKeySize < 0 || out.MaxKeySize > absoluteMaxKeySize {
		return out, fmt.Errorf("%w: MaxKeySize %d outside [0, %d]", ErrInvalidOption, out.MaxKeySize, absoluteMaxKeySize)
	}
	if out.MaxKeySize == 0 {
		out.MaxKeySize = DefaultMaxKeySize
	}
	if out.MaxValueSize < 0 || out.MaxValueSize > absoluteMaxValueSize {
		return out, fmt.Errorf("%w: MaxValueSize %d outside [0, %d]", ErrInvalidOption, out.MaxValueSize, absoluteMaxValueSize)
	}
	if out.MaxValueSize == 0 {
		out.MaxValueSize = DefaultMaxValueSize
	}
	if out.SegmentSize < 0 || (out.SegmentSize > 0 && out.SegmentSize < minSegmentSize) {
		return out, fmt.Errorf("%w: SegmentSize %d below %d", ErrInvalidOption, out.SegmentSize, minSegmentSize)
	}
	if out.SegmentSize == 0 {
		out.SegmentSize = DefaultSegmentSize
	}
	if out.MaxOpenFiles < 0 {
		return out, fmt.Errorf("%w: negative MaxOpenFiles", ErrInvalidOption)
	}
	if out.MaxOpenFiles == 0 {
		out.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, nil
}

// Errors. Every error a Store returns matches one of these with errors.Is, or
// wraps an I/O error from the file system. Two are typed as well:
// *CorruptionError (errors.As; it matches ErrCorrupt) names the damaged
// file and offset, and *ImportError (errors.As) names the stream Import or
// ReplaceAll refused.
var (
	// ErrNotFound: Get of an absent or deleted key.
	ErrNotFound = errors.New("segkv: not found")
	// ErrNoSegment: Export (of a Store or a Snapshot) of an id that names
	// no sealed segment there.
	ErrNoSegment     = errors.New("segkv: no such sealed segment")
	ErrClosed        = errors.New("segkv: store is closed")
	ErrLocked        = errors.New("segkv: directory is locked by another store")
	ErrKeyTooLarge   = errors.New("segkv: key too large")
	ErrValueTooLarge = errors.New("segkv: value too large")
	ErrBatchTooLarge = errors.New("segkv: batch too large")
	ErrInvalidOption = errors.New("segkv: invalid option")
	ErrInvalidRange  = errors.New("segkv: invalid range: start after end")
	ErrInvalidBatch  = errors.New("segkv: invalid batch: not made by this store's NewBatch, or already applied")
	// ErrReadOnly is returned by every write to a store opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("segkv: store is opened read-only")
	// ErrFailed is returned by every write after a write or fsync failure.
	// The store stops accepting writes instead of retrying fsync, because a
	// retried fsync can report success after the kernel dropped the data.
	// Reopen the store to recover every write acknowledged before the failure.
	ErrFailed = errors.New("segkv: store failed after an I/O error; reopen to recover")
	// ErrCorrupt matches every *CorruptionError.
	ErrCorrupt = corruption.ErrCorrupt
)

// CorruptionError carries the file and offset of damage a crash cannot
// produce. errors.As(err, &ce) extracts it; errors.Is(err, ErrCorrupt) tests it.
type CorruptionError = corruption.Error
