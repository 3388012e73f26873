package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/segkv/segkv/vfs"

	// The drivers OpenURL understands.
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob"
)

// Blob is a Bucket on a gocloud.dev/blob bucket, under a key prefix.
//
// PutIfAbsent uses the driver's conditional write (blob.WriterOptions.
// IfNotExist). How strong that is depends on the driver, as of gocloud.dev
// v0.49.0:
//
//   - s3blob sends If-None-Match: *, which S3 (since 2024) and compatible
//     servers that implement it (gofakes3, versitygw, MinIO) decide
//     atomically on the server. A server that ignores the header silently
//     overwrites: the fence is then only as good as the server.
//   - gcsblob sends the DoesNotExist precondition; azureblob If-None-Match:
//     *. Both are atomic on the server.
//   - fileblob checks and renames under a mutex of the process: two
//     processes writing one directory are not fenced from each other, and
//     fileblob does not fsync. Use a plain directory path (the Local
//     adapter) for a mounted disk.
//   - memblob is atomic within its process (it is for tests).
type Blob struct {
	b      *blob.Bucket
	prefix string
	s3     bool // list with StartAfter on the server
}

// NewBlob wraps b; every key is stored under prefix. s3 says whether b is
// an s3blob bucket (listing can then start after a key on the server).
func NewBlob(b *blob.Bucket, prefix string, s3 bool) *Blob {
	return &Blob{b: b, prefix: prefix, s3: s3}
}

// OpenURL opens the bucket a URL names: a gocloud.dev/blob URL (s3://,
// gs://, azblob://, file://, mem://; a "prefix" query parameter puts every
// key under that prefix), or a plain directory path, which gives a Local
// bucket on the real file system.
func OpenURL(ctx context.Context, raw string) (Bucket, error) {
	return openURL(ctx, raw, true)
}

// OpenExistingURL is OpenURL for reading a backup (restore, prune): a
// plain directory path must already exist (an error matching
// fs.ErrNotExist otherwise), so a mistyped path is reported rather than
// created empty.
func OpenExistingURL(ctx context.Context, raw string) (Bucket, error) {
	return openURL(ctx, raw, false)
}

func openURL(ctx context.Context, raw string, create bool) (Bucket, error) {
	u, err := url.Parse(raw)
	if err != nil && strings.Contains(raw, "://") {
		// Meant as a URL, not a directory named "scheme:".
		return nil, fmt.Errorf("bucket: open %s: %w", raw, err)
	}
	if err != nil || u.Scheme == "" || len(u.Scheme) == 1 /* C:\ */ {
		if !create {
			if _, err := vfs.NewOS().List(raw); err != nil {
				return nil, fmt.Errorf("bucket: open %s: %w", raw, err)
			}
		}
		return NewLocal(nil, raw)
	}
	q := u.Query()
	prefix := q.Get("prefix")
	q.Del("prefix")
	u.RawQuery = q.Encode()
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("bucket: open %s: %w", raw, err)
	}
	return NewBlob(b, prefix, u.Scheme == "s3"), nil
}

func isExists(err error) bool {
	c := gcerrors.Code(err)
	return c == gcerrors.FailedPrecondition || c == gcerrors.AlreadyExists
}

// PutIfAbsent implements Bucket.
func (b *Blob) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	// Cancelling wctx before Close abandons the write: a short reader must
	// not leave a short object.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.b.NewWriter(wctx, b.prefix+key, &blob.WriterOptions{
		IfNotExist:  true,
		ContentType: "application/octet-stream",
	})
	if err != nil {
		return fmt.Errorf("bucket: put %s: %w", key, err)
	}
	// blob.Writer's ReadFrom allocates a large buffer per call: copy
	// through one sized to the object instead (edits are small).
	buf := make([]byte, min(max(size+1, 512), 1<<20))
	n, err := io.CopyBuffer(struct{ io.Writer }{w}, io.LimitReader(r, size+1), buf)
	if err == nil && n != size {
		err = fmt.Errorf("reader gave %d bytes, want %d", n, size)
	}
	if err != nil {
		cancel()
		w.Close()
		return fmt.Errorf("bucket: put %s: %w", key, err)
	}
	if err := w.Close(); err != nil {
		if isExists(err) {
			return fmt.Errorf("%w: %s", ErrExists, key)
		}
		return fmt.Errorf("bucket: put %s: %w", key, err)
	}
	return nil
}

// Get implements Bucket.
func (b *Blob) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	r, err := b.b.NewRangeReader(ctx, b.prefix+key, off, length, nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return nil, fmt.Errorf("bucket: get %s: %w", key, err)
	}
	return r, nil
}

// List implements Bucket.
func (b *Blob) List(ctx context.Context, prefix, after string, limit int) ([]ObjectInfo, error) {
	opts := &blob.ListOptions{Prefix: b.prefix + prefix}
	if b.s3 && after != "" {
		startAfter := b.prefix + after
		opts.BeforeList = func(as func(any) bool) error {
			var in *s3.ListObjectsV2Input
			if as(&in) && in.ContinuationToken == nil {
				in.StartAfter = aws.String(startAfter)
			}
			return nil
		}
	}
	it := b.b.List(opts)
	var out []ObjectInfo
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("bucket: list %s: %w", prefix, err)
		}
		if obj.IsDir {
			continue
		}
		key := strings.TrimPrefix(obj.Key, b.prefix)
		if key <= after {
			continue
		}
		out = append(out, ObjectInfo{Key: key, Size: obj.Size})
		if limit > 0 && len(out) == limit {
			return out, nil
		}
	}
}

// Delete implements Bucket.
func (b *Blob) Delete(ctx context.Context, key string) error {
	if err := b.b.Delete(ctx, b.prefix+key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("bucket: delete %s: %w", key, err)
	}
	return nil
}

// Close implements Bucket.
func (b *Blob) Close() error { return b.b.Close() }
