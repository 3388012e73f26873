package index

import (
	"errors"
	"io"
	"os"

	"github.com/segkv/segkv/vfs"
)

// testFS is a minimal OS-backed vfs.FS for this package's tests, so that they
// do not depend on another package's implementation. It counts syncs, which
// Write must never issue.
type testFS struct {
	syncs int
}

func newTestFS() *testFS { return &testFS{} }

var _ vfs.FS = (*testFS)(nil)

type testFile struct {
	*os.File
	fs *testFS
}

func (f testFile) Sync() error {
	f.fs.syncs++
	return f.File.Sync()
}

func (f testFile) Preallocate(off, length int64) error {
	return errors.ErrUnsupported
}

func (f testFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (t *testFS) Create(name string) (vfs.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return testFile{f, t}, nil
}

func (t *testFS) Open(name string) (vfs.File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return testFile{f, t}, nil
}

func (t *testFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return testFile{f, t}, nil
}

func (t *testFS) Remove(name string) error             { return os.Remove(name) }
func (t *testFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (t *testFS) Stat(name string) (int64, error) {
	st, err := os.Stat(name)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
func (t *testFS) List(dir string) ([]string, error)   { return nil, errors.ErrUnsupported }
func (t *testFS) MkdirAll(dir string) error           { return os.MkdirAll(dir, 0o755) }
func (t *testFS) Lock(name string) (io.Closer, error) { return nil, errors.ErrUnsupported }
func (t *testFS) SyncDir(dir string) error            { t.syncs++; return nil }
