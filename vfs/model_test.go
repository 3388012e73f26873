package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMemMatchesOS runs the same random operations on Mem and on the real
// file system and requires the same results: the in-memory model the crash
// tests rely on behaves like the thing it models when nothing crashes.
func TestMemMatchesOS(t *testing.T) {
	names := []string{"a", "b", "c", "s/d", "s/e", "s", "missing/x"}
	for seed := range uint64(25) {
		rng := seeded(seed)
		osDir := t.TempDir()
		osFS, mem := NewOS(), NewMem()
		memDir := "/db"
		require.NoError(t, osFS.MkdirAll(filepath.Join(osDir, "s")))
		require.NoError(t, mem.MkdirAll(memDir+"/s"))

		type pair struct {
			os, mem File
			label   string
		}
		var handles []pair
		var trace []string
		same := func(label string, errOS, errMem error) {
			t.Helper()
			msg := fmt.Sprintf("seed %d: %s (os: %v, mem: %v)\ntrace:\n%v", seed, label, errOS, errMem, trace)
			require.Equal(t, errOS == nil, errMem == nil, msg)
			require.Equal(t, errors.Is(errOS, fs.ErrNotExist), errors.Is(errMem, fs.ErrNotExist), msg)
			require.Equal(t, errors.Is(errOS, fs.ErrClosed), errors.Is(errMem, fs.ErrClosed), msg)
			require.Equal(t, errors.Is(errOS, io.EOF), errors.Is(errMem, io.EOF), msg)
		}
		pick := func() string { return names[rng.IntN(len(names))] }
		for step := range 150 {
			var label string
			switch op := rng.IntN(100); {
			case op < 10 || len(handles) == 0:
				n := pick()
				kind := rng.IntN(3)
				label = fmt.Sprintf("open%d %s", kind, n)
				var fo, fm File
				var eo, em error
				switch kind {
				case 0:
					fo, eo = osFS.Create(filepath.Join(osDir, n))
					fm, em = mem.Create(memDir + "/" + n)
				case 1:
					fo, eo = osFS.OpenReadWrite(filepath.Join(osDir, n))
					fm, em = mem.OpenReadWrite(memDir + "/" + n)
				default:
					fo, eo = osFS.Open(filepath.Join(osDir, n))
					fm, em = mem.Open(memDir + "/" + n)
				}
				// Opening a directory read-only works on Linux; Mem refuses
				// it, and the engine never does it.
				if n == "s" && kind == 2 {
					if fo != nil {
						fo.Close()
					}
					continue
				}
				same(label, eo, em)
				if eo == nil {
					handles = append(handles, pair{fo, fm, label})
				}
			case op < 40:
				h := handles[rng.IntN(len(handles))]
				off := rng.Int64N(3*pageSize) - 2
				data := make([]byte, rng.IntN(pageSize+100))
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				label = fmt.Sprintf("write %s off=%d len=%d", h.label, off, len(data))
				no, eo := h.os.WriteAt(data, off)
				nm, em := h.mem.WriteAt(data, off)
				same(label, eo, em)
				require.Equal(t, no, nm, label)
			case op < 55:
				h := handles[rng.IntN(len(handles))]
				off, n := rng.Int64N(4*pageSize), rng.IntN(pageSize+100)
				label = fmt.Sprintf("read %s off=%d len=%d", h.label, off, n)
				bo, bm := make([]byte, n), make([]byte, n)
				no, eo := h.os.ReadAt(bo, off)
				nm, em := h.mem.ReadAt(bm, off)
				same(label, eo, em)
				require.Equal(t, no, nm, label)
				require.Equal(t, bo[:no], bm[:nm], label)
			case op < 62:
				h := handles[rng.IntN(len(handles))]
				size := rng.Int64N(4*pageSize) - 1
				label = fmt.Sprintf("truncate %s %d", h.label, size)
				same(label, h.os.Truncate(size), h.mem.Truncate(size))
			case op < 68:
				h := handles[rng.IntN(len(handles))]
				off, n := rng.Int64N(4*pageSize), rng.Int64N(2*pageSize)
				label = fmt.Sprintf("prealloc %s %d %d", h.label, off, n)
				same(label, h.os.Preallocate(off, n), h.mem.Preallocate(off, n))
			case op < 72:
				h := handles[rng.IntN(len(handles))]
				label = "size " + h.label
				so, eo := h.os.Size()
				sm, em := h.mem.Size()
				same(label, eo, em)
				require.Equal(t, so, sm, label)
			case op < 74:
				h := handles[rng.IntN(len(handles))]
				label = "sync " + h.label
				same(label, h.os.Sync(), h.mem.Sync())
			case op < 78:
				h := handles[rng.IntN(len(handles))]
				label = "close " + h.label
				same(label, h.os.Close(), h.mem.Close())
			case op < 85:
				a, b := pick(), pick()
				if a == "s" || b == "s" {
					continue // Mem does not rename directories
				}
				label = fmt.Sprintf("rename %s %s", a, b)
				same(label, osFS.Rename(filepath.Join(osDir, a), filepath.Join(osDir, b)),
					mem.Rename(memDir+"/"+a, memDir+"/"+b))
			case op < 90:
				n := pick()
				label = "remove " + n
				same(label, osFS.Remove(filepath.Join(osDir, n)), mem.Remove(memDir+"/"+n))
			case op < 95:
				n := pick()
				label = "stat " + n
				so, eo := osFS.Stat(filepath.Join(osDir, n))
				sm, em := mem.Stat(memDir + "/" + n)
				same(label, eo, em)
				if n != "s" && eo == nil {
					require.Equal(t, so, sm, label)
				}
			case op < 99:
				d := []string{".", "s", "missing"}[rng.IntN(3)]
				label = "list " + d
				lo, eo := osFS.List(filepath.Join(osDir, d))
				lm, em := mem.List(memDir + "/" + d)
				same(label, eo, em)
				require.Equal(t, lo, lm, label)
			default:
				label = "syncdir"
				same(label, osFS.SyncDir(osDir), mem.SyncDir(memDir))
			}
			trace = append(trace, fmt.Sprintf("%d %s", step, label))
		}
		for _, n := range names {
			so, eo := osFS.Stat(filepath.Join(osDir, n))
			sm, em := mem.Stat(memDir + "/" + n)
			same("final stat "+n, eo, em)
			if eo == nil && n != "s" {
				require.Equal(t, so, sm)
				require.Equal(t, readAll(t, osFS, filepath.Join(osDir, n)), readAll(t, mem, memDir+"/"+n), "seed %d: %s", seed, n)
			}
		}
		for _, h := range handles {
			h.os.Close()
			h.mem.Close()
		}
	}
}
