// Package bucket is the object-store seam of segkv's backup: the four
// operations the backup layout needs (put-if-absent, ranged get, ordered
// listing, delete) and adapters for a local directory (through vfs, with
// every write made durable) and for gocloud.dev/blob (S3, GCS, Azure, file,
// memory).
//
// The interface is deliberately smaller than an object store's: there is no
// overwrite. Every object the backup writes is immutable and written once,
// and put-if-absent is what fences a second writer out of a prefix (see
// docs/BACKUP.md), so an adapter must make PutIfAbsent atomic with respect
// to other writers, or say in its documentation where it cannot.
package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
)

var (
	// ErrExists is returned by PutIfAbsent when the key already holds an
	// object; that object is left as it was.
	ErrExists = errors.New("bucket: object already exists")
	// ErrNotFound is returned by Get for a key that holds no object.
	ErrNotFound = errors.New("bucket: object not found")
	// ErrInvalidKey is returned for a key the adapter cannot store (empty,
	// absolute, with "." or ".." elements, or a reserved name).
	ErrInvalidKey = errors.New("bucket: invalid key")
)

// ObjectInfo describes one listed object.
type ObjectInfo struct {
	Key  string
	Size int64
}

// Bucket is what the backup needs of an object store. Keys are
// slash-separated paths without a leading slash. Implementations are safe
// for concurrent use.
type Bucket interface {
	// PutIfAbsent stores the size bytes read from r under key, unless key
	// already holds an object: then it returns an error matching ErrExists
	// and changes nothing. A reader shorter or longer than size fails the
	// put. The object becomes visible whole or not at all, and once
	// PutIfAbsent returns nil it is durable (as durable as the store makes
	// anything).
	PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error
	// Get reads length bytes of key's object from offset off (length < 0:
	// to its end). A missing key gives an error matching ErrNotFound.
	Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)
	// List returns up to limit objects (limit <= 0: all) whose keys start
	// with prefix and sort after after (after == "": from the first), in
	// ascending byte order of key.
	List(ctx context.Context, prefix, after string, limit int) ([]ObjectInfo, error)
	// Delete removes key's object; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Close releases the adapter's resources.
	Close() error
}

// ReadAll reads key's whole object.
func ReadAll(ctx context.Context, b Bucket, key string) ([]byte, error) {
	rc, err := b.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("bucket: read %s: %w", key, err)
	}
	return data, nil
}
