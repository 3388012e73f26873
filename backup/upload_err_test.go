package backup

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/segkv/segkv/backup/bucket"
	"github.com/segkv/segkv/backup/internal/buckettest"
)

// refusingBucket fails segment puts without reading their body, as a put
// cancelled by Ctrl-C or refused by the server before the upload does.
type refusingBucket struct{ bucket.Bucket }

func (r refusingBucket) PutIfAbsent(ctx context.Context, key string, rd io.Reader, size int64) error {
	if strings.HasPrefix(key, "segments/") {
		return buckettest.ErrInjected
	}
	return r.Bucket.PutIfAbsent(ctx, key, rd, size)
}

// TestUploadErrorIsThePuts: when a segment put fails before reading the
// export, the error is the put's, not the export's "upload ended" it
// caused (an interrupted -once used to report only that).
func TestUploadErrorIsThePuts(t *testing.T) {
	src := newFakeSource()
	src.commit(2)
	err := NewLoop(src, refusingBucket{openURL(t, "mem://")}, nil).Once(context.Background())
	if !errors.Is(err, buckettest.ErrInjected) || errors.Is(err, errUploadEnded) {
		t.Fatalf("got %v, want the put's error", err)
	}
}
