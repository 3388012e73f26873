package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segstore"
)

// TestMain lets a test run segctl's real main in a child process
// (SEGCTL_RUN_MAIN=1), for what only a real process shows: its death by a
// signal.
func TestMain(m *testing.M) {
	if os.Getenv("SEGCTL_RUN_MAIN") == "1" {
		os.Args = append([]string{"segctl"}, os.Args[1:]...)
		main()
		return
	}
	os.Exit(m.Run())
}

// dirHash hashes the names and contents of every file in dir.
func dirHash(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	h := sha256.New()
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		fmt.Fprintf(h, "%s %d\n", e.Name(), len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestCreateThenImport(t *testing.T) {
	src := newStore(t)
	exported := filepath.Join(t.TempDir(), "seg")
	code, _, errOut := segctl(t, "export", src, "2", exported)
	require.Equal(t, exitOK, code, errOut)

	dst := filepath.Join(t.TempDir(), "new")
	code, _, errOut = segctl(t, "import", dst, exported)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "segctl create")
	_, err := os.Stat(dst)
	require.True(t, errors.Is(err, os.ErrNotExist), "import created the directory")

	code, out, errOut := segctl(t, "create", "-json", dst)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"created"`)
	code, _, errOut = segctl(t, "create", dst)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "already holds")

	code, _, errOut = segctl(t, "import", dst, exported)
	require.Equal(t, exitOK, code, errOut)
	code, out, _ = segctl(t, "get", dst, "k150")
	require.Equal(t, exitOK, code)
	require.Equal(t, "v150", out)
}

// The read commands open the store read-only: a store that needs repair
// is left byte for byte as it was, and info says what would be repaired.
func TestReadCommandsChangeNothing(t *testing.T) {
	dir := newStore(t)
	matches, err := filepath.Glob(filepath.Join(dir, "*.log"))
	require.NoError(t, err)
	live := matches[len(matches)-1] // the highest id: the live file
	f, err := os.OpenFile(live, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(bytes.Repeat([]byte{0xab}, 17)) // a torn tail
	require.NoError(t, err)
	require.NoError(t, f.Close())
	before := dirHash(t, dir)

	code, out, errOut := segctl(t, "info", dir)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "would truncate the torn tail of "+live)
	for _, args := range [][]string{
		{"segments", dir}, {"get", dir, "k001"}, {"scan", "-values", dir}, {"verify", dir},
		{"export", dir, "2", "-"}, {"manifest", dir},
	} {
		code, _, errOut := segctl(t, args...)
		require.Equal(t, exitOK, code, "%v: %s", args, errOut)
	}
	require.Equal(t, before, dirHash(t, dir), "a read command changed the store")

	// A writable command repairs it.
	code, _, errOut = segctl(t, "compact", dir)
	require.Equal(t, exitOK, code, errOut)
	require.NotEqual(t, before, dirHash(t, dir))
	code, out, _ = segctl(t, "info", dir)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "nothing to repair")
}

func TestKeysStartingWithDash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	s, err := segstore.Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, s.Put([]byte("-k"), []byte("dash")))
	require.NoError(t, s.Close())

	code, _, errOut := segctl(t, "get", dir, "-k")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `"--" ends the flags`)
	// "--" ends the flags wherever it comes: before DIR, or after it as
	// the README and the package doc show ("segctl get DIR -- -key").
	code, out, errOut := segctl(t, "get", dir, "--", "-k")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "dash", out)
	code, out, errOut = segctl(t, "get", "--", dir, "-k")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "dash", out)
	// Only the first "--" ends the flags: a second one is a key.
	code, _, errOut = segctl(t, "get", dir, "--", "--")
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "--: not found")
	code, _, errOut = segctl(t, "get", dir, "--", "-k", "extra")
	require.Equal(t, exitUsage, code, "-- does not lift the argument count")
	require.Contains(t, errOut, "want 2 argument(s), got 3")
	code, out, _ = segctl(t, "scan", "-start", "-", "--", dir)
	require.Equal(t, exitOK, code)
	require.Equal(t, "-k\n", out)
}

func TestVerifyJSONAlwaysPrintsAResult(t *testing.T) {
	dir := newStore(t)
	code, out, _ := segctl(t, "verify", "-json", dir)
	require.Equal(t, exitOK, code)
	rows := jsonLines(t, out)
	require.Len(t, rows, 1)
	require.Equal(t, true, rows[0]["ok"])
	require.EqualValues(t, 3, rows[0]["segments"])

	// No store: still one result, with the error in it.
	code, out, errOut := segctl(t, "verify", "-json", t.TempDir())
	require.Equal(t, exitFail, code)
	rows = jsonLines(t, out)
	require.Len(t, rows, 1)
	require.Equal(t, false, rows[0]["ok"])
	require.Contains(t, rows[0]["error"], "no MANIFEST")
	require.Contains(t, errOut, "no MANIFEST")

	// A store another process holds.
	s, err := segstore.Open(dir, nil)
	require.NoError(t, err)
	code, out, _ = segctl(t, "verify", "-json", dir)
	require.NoError(t, s.Close())
	require.Equal(t, exitFail, code)
	rows = jsonLines(t, out)
	require.Len(t, rows, 1)
	require.Contains(t, rows[0]["error"], "locked")
}

// failingWriter accepts n writes, then fails every one as a closed pipe.
type failingWriter struct {
	n   int
	buf bytes.Buffer
}

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.n == 0 {
		return 0, syscall.EPIPE
	}
	w.n--
	return w.buf.Write(b)
}

func TestClosedStdoutStopsCleanly(t *testing.T) {
	dir := newStore(t)
	before := dirHash(t, dir)
	for _, args := range [][]string{{"scan", dir}, {"segments", dir}, {"info", "-json", dir}, {"export", dir, "2", "-"}} {
		out := &failingWriter{}
		var errOut bytes.Buffer
		code := run(context.Background(), args, out, &errOut)
		require.Equal(t, exitPipe, code, "%v: %s", args, errOut.String())
		require.Empty(t, errOut.String(), "a closed pipe is not an error to report")
	}
	require.Equal(t, before, dirHash(t, dir))
	// The store was closed: its lock is free.
	s, err := segstore.Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// A real process whose stdout pipe closes ("segctl scan DIR | head -1")
// exits 3 after closing the store, rather than dying of SIGPIPE mid-scan.
func TestBrokenPipeDoesNotKill(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	s, err := segstore.Open(dir, &segstore.Options{Sync: segstore.SyncManual})
	require.NoError(t, err)
	b := s.NewBatch()
	for i := range 20000 { // far more than a pipe buffer holds
		require.NoError(t, b.Put([]byte("key-"+strconv.Itoa(i)), nil))
	}
	require.NoError(t, s.Apply(b))
	require.NoError(t, s.Close())

	cmd := exec.Command(os.Args[0], "scan", dir)
	cmd.Env = append(os.Environ(), "SEGCTL_RUN_MAIN=1")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "key-0\n", line)
	require.NoError(t, stdout.Close()) // what head does after one line
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stderr: %s", errOut.String())
	status := exit.Sys().(syscall.WaitStatus)
	require.False(t, status.Signaled(), "killed by %v", status.Signal())
	require.Equal(t, exitPipe, exit.ExitCode(), "stderr: %s", errOut.String())
	// Closed cleanly: the lock is free and the store opens.
	s, err = segstore.Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

func TestBinaryToATerminalIsRefused(t *testing.T) {
	dir := newStore(t)
	runTTY := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runEnv(context.Background(), &env{stdout: &out, stderr: &errOut, stdoutTTY: true}, args)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := runTTY("get", "-hex", dir, "7a00ff")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "000102\n", out, "hex is text")
	key := "z\x00\xff"
	code, out, errOut = runTTY("get", dir, key)
	require.Equal(t, exitFail, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "-binary")
	code, out, _ = runTTY("get", "-binary", dir, key)
	require.Equal(t, exitOK, code)
	require.Equal(t, "\x00\x01\x02", out)
	code, out, _ = runTTY("get", dir, "k001")
	require.Equal(t, exitOK, code)
	require.Equal(t, "v1\n", out, "printable text goes to a terminal, and ends its line there")
	code, out, errOut = runTTY("export", dir, "2", "-")
	require.Equal(t, exitFail, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "-binary")
	code, out, _ = runTTY("export", "-binary", dir, "2", "-")
	require.Equal(t, exitOK, code)
	require.NotEmpty(t, out)
}

func TestHelpTexts(t *testing.T) {
	code, out, _ := segctl(t, "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "usage: segctl COMMAND [flags] ARGS...")
	require.Contains(t, out, "read-only")
	for name, c := range commands() {
		code, _, errOut := segctl(t, name, "-h")
		require.Equal(t, exitOK, code, name)
		require.Contains(t, errOut, "usage: segctl "+name+" [flags] "+c.args+"\n", name)
		require.Contains(t, errOut, c.summary, name)
		require.Contains(t, errOut, "-json", name)
	}
}

// Ids are decimal everywhere: segments prints the id export takes, with the
// file name (the id in 16 hex digits) beside it.
func TestIDsPrintTheSameWay(t *testing.T) {
	dir := newStore(t)
	code, out, _ := segctl(t, "segments", "-json", dir)
	require.Equal(t, exitOK, code)
	rows := jsonLines(t, out)
	for _, r := range rows {
		id := uint64(r["id"].(float64))
		require.Equal(t, fmt.Sprintf("%016x.log", id), r["file"])
		_, err := os.Stat(filepath.Join(dir, r["file"].(string)))
		require.NoError(t, err)
		code, _, errOut := segctl(t, "export", dir, strconv.FormatUint(id, 10), filepath.Join(t.TempDir(), "x"))
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, errOut, "segment "+strconv.FormatUint(id, 10)+",")
	}
	code, _, errOut := segctl(t, "export", dir, "0000000000000002", "-")
	require.Equal(t, exitOK, code, errOut)
}
