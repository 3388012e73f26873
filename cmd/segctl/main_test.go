package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segstore"
)

// segctl runs the tool in-process and returns its exit code and output.
func segctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// newStore makes a store on the real disk: 3 sealed segments of 100 keys
// each, a live file with one more key, and one binary key.
func newStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := segstore.Open(dir, &segstore.Options{SegmentSize: 1 << 20, Merge: segstore.MergeOptions{Disable: true}})
	require.NoError(t, err)
	for i := range 300 {
		require.NoError(t, s.Put(fmt.Appendf(nil, "k%03d", i), fmt.Appendf(nil, "v%d", i)))
		if i%100 == 99 {
			require.NoError(t, s.Seal())
		}
	}
	require.NoError(t, s.Put([]byte("z\x00\xff"), []byte{0, 1, 2}))
	require.NoError(t, s.Close())
	return dir
}

// jsonLines decodes one JSON object per line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	for line := range strings.Lines(out) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		rows = append(rows, m)
	}
	return rows
}

func TestUsage(t *testing.T) {
	code, out, _ := segctl(t)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "segctl inspects")
	for name := range commands() {
		require.Contains(t, out, "  "+name+" ")
	}
	code, _, errOut := segctl(t, "frobnicate")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `unknown command "frobnicate"`)
	code, _, errOut = segctl(t, "get", "onlydir")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "want 2 argument(s), got 1")
	code, _, errOut = segctl(t, "scan", "dir", "-reverse")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "flags go first")
	code, _, _ = segctl(t, "scan", "-h")
	require.Equal(t, exitOK, code)
}

func TestRefusesADirectoryWithoutAStore(t *testing.T) {
	dir := t.TempDir()
	for _, cmd := range []string{"info", "segments", "verify", "compact", "manifest"} {
		code, _, errOut := segctl(t, cmd, dir)
		require.Equal(t, exitFail, code, cmd)
		require.Contains(t, errOut, "no MANIFEST", cmd)
	}
	code, _, _ := segctl(t, "info", filepath.Join(dir, "missing"))
	require.Equal(t, exitFail, code)
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, names, "segctl created files in a directory that held no store")
}

func TestInfoAndSegments(t *testing.T) {
	dir := newStore(t)
	code, out, errOut := segctl(t, "info", "-json", dir)
	require.Equal(t, exitOK, code, errOut)
	info := map[string]string{}
	for _, r := range jsonLines(t, out) {
		info[r["name"].(string)] = r["value"].(string)
	}
	require.Equal(t, "3", info["sealed segments"])
	require.Equal(t, "nothing to repair", info["recovery"])

	code, out, _ = segctl(t, "segments", "-json", dir)
	require.Equal(t, exitOK, code)
	rows := jsonLines(t, out)
	require.Len(t, rows, 3)
	require.Equal(t, "k000", rows[0]["min_key"])
	require.Equal(t, "k099", rows[0]["max_key"])
	require.EqualValues(t, 100, rows[2]["keys"])

	code, out, _ = segctl(t, "segments", dir)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "min_key")
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 4, "a header and three rows")
}

func TestGet(t *testing.T) {
	dir := newStore(t)
	code, out, _ := segctl(t, "get", dir, "k042")
	require.Equal(t, exitOK, code)
	require.Equal(t, "v42", out, "the value byte for byte, nothing added")

	code, out, _ = segctl(t, "get", "-hex", dir, hex.EncodeToString([]byte("z\x00\xff")))
	require.Equal(t, exitOK, code)
	require.Equal(t, "000102\n", out)

	code, out, errOut := segctl(t, "get", dir, "absent")
	require.Equal(t, exitFail, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "absent: not found")

	code, _, errOut = segctl(t, "get", "-hex", dir, "xyz")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "not hex")
}

func TestScan(t *testing.T) {
	dir := newStore(t)
	code, out, _ := segctl(t, "scan", dir)
	require.Equal(t, exitOK, code)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 301)
	require.Equal(t, "k000", lines[0])
	require.Equal(t, `"z\x00\xff"`, lines[300], "a binary key is quoted")

	code, out, _ = segctl(t, "scan", "-reverse", "-limit", "3", "-values", "-end", "k200", dir)
	require.Equal(t, exitOK, code)
	require.Equal(t, "k199\tv199\nk198\tv198\nk197\tv197\n", out)

	code, out, _ = segctl(t, "scan", "-prefix", "k25", "-json", "-values", dir)
	require.Equal(t, exitOK, code)
	rows := jsonLines(t, out)
	require.Len(t, rows, 10)
	for i, r := range rows {
		require.Equal(t, "k25"+strconv.Itoa(i), r["key"])
		require.Equal(t, "v25"+strconv.Itoa(i), r["value"])
	}

	code, out, _ = segctl(t, "scan", "-hex", "-start", hex.EncodeToString([]byte("z")), dir)
	require.Equal(t, exitOK, code)
	require.Equal(t, hex.EncodeToString([]byte("z\x00\xff"))+"\n", out)
}

func TestVerifyFindsDamage(t *testing.T) {
	dir := newStore(t)
	code, out, _ := segctl(t, "verify", dir)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "3 sealed segments")
	require.Contains(t, out, "0 damaged")

	// Flip a byte in the middle of the first sealed segment.
	code, out, _ = segctl(t, "segments", "-json", dir)
	require.Equal(t, exitOK, code)
	first := jsonLines(t, out)[0]
	id := uint64(first["id"].(float64))
	path := filepath.Join(dir, fmt.Sprintf("%016x.log", id))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x10
	require.NoError(t, os.WriteFile(path, b, 0o644))

	code, out, _ = segctl(t, "verify", "-json", dir)
	require.Equal(t, exitFail, code)
	rows := jsonLines(t, out)
	require.Len(t, rows, 1, "one result object")
	require.Equal(t, false, rows[0]["ok"])
	damaged := rows[0]["damaged"].([]any)
	require.NotEmpty(t, damaged)
	require.Contains(t, damaged[0], path, "the damaged file is named")
}

func TestExportImport(t *testing.T) {
	src := newStore(t)
	exported := filepath.Join(t.TempDir(), "seg2")
	code, _, errOut := segctl(t, "export", src, "2", exported)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "segment 2")
	code, _, errOut = segctl(t, "export", src, "2", exported)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "does not overwrite")

	var viaStdout bytes.Buffer
	require.Equal(t, exitOK, run(context.Background(), []string{"export", src, "2", "-"}, &viaStdout, &bytes.Buffer{}))
	onDisk, err := os.ReadFile(exported)
	require.NoError(t, err)
	require.Equal(t, onDisk, viaStdout.Bytes())

	dst := filepath.Join(t.TempDir(), "peer")
	s, err := segstore.Open(dst, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	code, out, errOut := segctl(t, "import", "-json", dst, exported)
	require.Equal(t, exitOK, code, errOut)
	rows := jsonLines(t, out)
	require.Len(t, rows, 1)
	require.Equal(t, "k100", rows[0]["min_key"])
	code, out, _ = segctl(t, "get", dst, "k150")
	require.Equal(t, exitOK, code)
	require.Equal(t, "v150", out)

	// Importing it again adopts nothing: the digest is already present.
	code, out, _ = segctl(t, "import", dst, exported)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "0 of 1 streams adopted")

	// A damaged stream is refused whole, with the stream named.
	damaged := filepath.Join(t.TempDir(), "bad")
	onDisk[len(onDisk)/2] ^= 1
	require.NoError(t, os.WriteFile(damaged, onDisk, 0o644))
	code, _, errOut = segctl(t, "import", dst, damaged)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "import stream 0")
}

func TestCompact(t *testing.T) {
	dir := newStore(t)
	code, out, errOut := segctl(t, "compact", "-json", dir)
	require.Equal(t, exitOK, code, errOut)
	got := map[string]string{}
	for _, r := range jsonLines(t, out) {
		got[r["name"].(string)] = r["value"].(string)
	}
	require.Equal(t, "3", got["segments before"])
	after, err := strconv.Atoi(got["segments after"])
	require.NoError(t, err)
	require.Less(t, after, 3)
	code, out, _ = segctl(t, "get", dir, "k007")
	require.Equal(t, exitOK, code)
	require.Equal(t, "v7", out)
}

func TestManifestReadsAStoreInUse(t *testing.T) {
	dir := newStore(t)
	s, err := segstore.Open(dir, nil)
	require.NoError(t, err)
	defer s.Close()

	code, _, errOut := segctl(t, "info", dir)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "locked")

	code, out, errOut := segctl(t, "manifest", "-json", dir)
	require.Equal(t, exitOK, code, errOut)
	rows := jsonLines(t, out)
	require.Len(t, rows, 1)
	require.Equal(t, true, rows[0]["activated"])
	require.EqualValues(t, 3, rows[0]["segments"])
	require.EqualValues(t, s.ManifestSeq(), rows[0]["seq"])

	code, out, _ = segctl(t, "manifest", "-records", dir)
	require.Equal(t, exitOK, code)
	for _, kind := range []string{"header", "checkpoint", "activate", "edit", "replica"} {
		require.Contains(t, out, " "+kind+" ")
	}
}

func TestManifestReportsCorruption(t *testing.T) {
	dir := newStore(t)
	matches, err := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	require.NoError(t, err)
	require.Len(t, matches, 1)
	b, err := os.ReadFile(matches[0])
	require.NoError(t, err)
	b[30] ^= 0x01 // inside the header record, which later frames vouch for
	require.NoError(t, os.WriteFile(matches[0], b, 0o644))

	code, out, _ := segctl(t, "manifest", "-json", dir)
	require.Equal(t, exitFail, code)
	rows := jsonLines(t, out)
	require.Contains(t, rows[0]["error"], matches[0])
	after, err := os.ReadFile(matches[0])
	require.NoError(t, err)
	require.Equal(t, b, after, "manifest wrote to the file")
}
