package backup

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/segkv/segkv/backup/bucket"
	"github.com/segkv/segkv/backup/internal/buckettest"
	"github.com/segkv/segkv/segstore"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Each rapid check opens stores on disk: fewer than rapid's default
	// 100, unless asked for on the command line.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		f.Value.Set("15")
	}
	os.Exit(m.Run())
}

// bucketKind opens a fresh, empty bucket of one kind.
type bucketKind struct {
	name string
	open func(t *testing.T) bucket.Bucket
}

var s3Seq atomic.Int64

// bucketKinds are the adapters every backup test runs against: the local
// directory, memblob, fileblob and an S3 server in process (gofakes3);
// SEGKV_BACKUP_S3_URL adds an external S3 server (scripts/versitygw.sh).
func bucketKinds() []bucketKind {
	kinds := []bucketKind{
		{"local", func(t *testing.T) bucket.Bucket {
			b, err := bucket.NewLocal(nil, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"memblob", func(t *testing.T) bucket.Bucket { return openURL(t, "mem://") }},
		{"fileblob", func(t *testing.T) bucket.Bucket { return openURL(t, "file://"+t.TempDir()) }},
		{"gofakes3", func(t *testing.T) bucket.Bucket {
			backend := s3mem.New()
			srv := httptest.NewServer(gofakes3.New(backend).Server())
			t.Cleanup(srv.Close)
			if err := backend.CreateBucket("bk"); err != nil {
				t.Fatal(err)
			}
			setS3Env(t)
			return openURL(t, "s3://bk?region=us-east-1&use_path_style=true&response_checksum_validation=when_required&endpoint="+srv.URL)
		}},
	}
	if u := os.Getenv("SEGKV_BACKUP_S3_URL"); u != "" {
		kinds = append(kinds, bucketKind{"s3env", func(t *testing.T) bucket.Bucket {
			sep := "?"
			if bytes.ContainsRune([]byte(u), '?') {
				sep = "&"
			}
			return openURL(t, fmt.Sprintf("%s%sprefix=t%d-%d/", u, sep, os.Getpid(), s3Seq.Add(1)))
		}})
	}
	return kinds
}

func setS3Env(t *testing.T) {
	if os.Getenv("SEGKV_BACKUP_S3_URL") != "" {
		return // the script's credentials
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
}

func openURL(t *testing.T, u string) bucket.Bucket {
	t.Helper()
	b, err := bucket.OpenURL(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestBucketConformance(t *testing.T) {
	for _, k := range bucketKinds() {
		t.Run(k.name, func(t *testing.T) { buckettest.Conformance(t, k.open(t)) })
	}
}

// fakeSource is a synthetic store: segments of a few bytes each, commits
// made by the test. Fast enough for ten thousand commits.
type fakeSource struct {
	seq, nextID, nextOrder uint64
	segs                   []segstore.SegmentInfo // oldest first
	data                   map[uint64][]byte
	exports                int
}

func newFakeSource() *fakeSource { return &fakeSource{data: map[uint64][]byte{}} }

// commit adds n new segments and removes the segments at the given
// positions, as one manifest commit.
func (f *fakeSource) commit(n int, remove ...int) {
	f.seq++
	sort.Sort(sort.Reverse(sort.IntSlice(remove)))
	for _, i := range remove {
		delete(f.data, f.segs[i].ID)
		f.segs = append(f.segs[:i], f.segs[i+1:]...)
	}
	for range n {
		f.nextID++
		f.nextOrder++
		data := fmt.Appendf(nil, "segment %d of a synthetic store", f.nextID)
		f.data[f.nextID] = data
		f.segs = append(f.segs, segstore.SegmentInfo{
			ID: f.nextID, Size: int64(len(data)), Digest: xxhash.Sum64(data), Order: f.nextOrder,
			AddedSeq: f.seq, Records: 1, Keys: 1, MinKey: fmt.Appendf(nil, "k%08d", f.nextID), MaxKey: fmt.Appendf(nil, "k%08d", f.nextID),
		})
	}
}

func (f *fakeSource) ManifestSeq() uint64 { return f.seq }
func (f *fakeSource) Seal() error         { return nil }
func (f *fakeSource) Capture(context.Context) (Capture, error) {
	return &fakeCapture{f: f, seq: f.seq, segs: append([]segstore.SegmentInfo(nil), f.segs...)}, nil
}

type fakeCapture struct {
	f    *fakeSource
	seq  uint64
	segs []segstore.SegmentInfo
}

func (c *fakeCapture) Seq() uint64                      { return c.seq }
func (c *fakeCapture) Segments() []segstore.SegmentInfo { return c.segs }
func (c *fakeCapture) Close() error                     { return nil }
func (c *fakeCapture) Export(_ context.Context, id uint64, w io.Writer) (int64, error) {
	c.f.exports++
	n, err := w.Write(c.f.data[id])
	return int64(n), err
}

// readStore returns every key and value of the store in dir.
func readStore(t *testing.T, dir string) map[string]string {
	t.Helper()
	s, err := segstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := map[string]string{}
	var iterErr error
	for k, v := range s.All(&iterErr) {
		out[string(k)] = string(v)
	}
	if iterErr != nil {
		t.Fatal(iterErr)
	}
	return out
}

// noSiblings checks that a failed restore left nothing beside its target.
func noSiblings(t *testing.T, target string) {
	t.Helper()
	names, err := os.ReadDir(filepath.Dir(target))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n.Name() != filepath.Base(target) && bytes.Contains([]byte(n.Name()), []byte(".restore-")) {
			t.Fatalf("restore left %s behind", n.Name())
		}
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("failed restore created %s (%v)", target, err)
	}
}
