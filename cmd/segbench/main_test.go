package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// runCmd runs segbench in-process and returns its exit code and outputs.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// jsonRows parses one JSON object per line, refusing anything else on
// stdout.
func jsonRows(t *testing.T, out string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		rows = append(rows, m)
	}
	return rows
}

func keys(m map[string]any) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

func sorted(s ...string) []string { slices.Sort(s); return s }

func TestBadUsageExitsTwo(t *testing.T) {
	for _, args := range [][]string{
		{"nosuch"},
		{"-nosuchflag"},
		{"seal", "-segments", "0"},
		{"seal", "-segments", "ten"},
		{"seal", "-step", "0"},
		{"seal", "-segments", "10", "-step", "11"},
		{"seal", "-protocol", "old"},
		{"seal", "-fs", "nfs"},
		{"seal", "-segment-size", "100"},
		{"seal", "stray"},
		{"fsync", "-n", "0"},
		{"fsync", "-fs", "mem"}, // the probe is for a real disk only
		{"put", "-writers", "0"},
		{"put", "-writers", "4", "-n", "3"},
		{"mergeput", "-writers", "0"},
		{"mergeput", "-writers", "1,x"},
		{"mergeput", "-n", "0"},
		{"mergeput", "-duration", "0s"},
		{"mergeput", "-rounds", "0"},
		{"mergeput", "-segment-size", "100"},
		{"import", "-segments", "0"},
		{"import", "-records", "0"},
		{"plot", "-bogus"},
	} {
		code, out, errOut := runCmd(t, args...)
		require.Equal(t, exitUsage, code, "%q", args)
		require.Empty(t, out, "%q: nothing on stdout", args)
		require.NotEmpty(t, errOut, "%q: a message on stderr", args)
	}
}

func TestHelpExitsZero(t *testing.T) {
	code, out, _ := runCmd(t, "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "seal")
	code, _, errOut := runCmd(t, "seal", "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, errOut, "-protocol")
}

func TestRuntimeFailureExitsOne(t *testing.T) {
	code, _, errOut := runCmd(t, "seal", "-protocol", "legacy", "-segments", "1", "-step", "1",
		"-dir", filepath.Join(t.TempDir(), "missing", "parent"))
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "work directory")
	code, _, _ = runCmd(t, "plot", "-in", filepath.Join(t.TempDir(), "none.json"))
	require.Equal(t, exitFail, code)
}

var sealKeys = sorted("protocol", "segments", "us_per_seal", "us_p99", "fsync_us_per_seal", "fsyncs_per_seal",
	"dirsyncs_per_seal", "renames_per_seal", "bg_fsyncs_per_seal", "bg_dirsyncs_per_seal", "spare_misses",
	"manifest_bytes", "manifest_file_bytes", "manifest_bytes_written_per_seal")

func TestSealLegacyJSONOnDisk(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCmd(t, "seal", "-protocol", "legacy", "-segments", "6", "-step", "3", "-json", "-dir", dir)
	require.Equal(t, exitOK, code, errOut)
	rows := jsonRows(t, out)
	require.Len(t, rows, 2)
	for i, r := range rows {
		require.Equal(t, sealKeys, keys(r))
		require.Equal(t, "rewrite", r["protocol"])
		require.EqualValues(t, 3*(i+1), r["segments"])
		require.EqualValues(t, 6, r["fsyncs_per_seal"])
		require.EqualValues(t, 3, r["dirsyncs_per_seal"])
		require.EqualValues(t, 3, r["renames_per_seal"])
		require.EqualValues(t, 0, r["bg_fsyncs_per_seal"])
		require.Positive(t, r["us_per_seal"])
		require.Positive(t, r["manifest_bytes"])
	}
	// The work directory is gone.
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestSealLegacyManifestGrowsLinearly(t *testing.T) {
	code, out, errOut := runCmd(t, "seal", "-protocol", "legacy", "-segments", "250", "-step", "125", "-json", "-fs", "mem")
	require.Equal(t, exitOK, code, errOut)
	rows := jsonRows(t, out)
	require.Len(t, rows, 2)
	// The reference table's figure at 250 segments.
	require.EqualValues(t, 46974, rows[1]["manifest_bytes"])
	require.Greater(t, rows[1]["manifest_bytes_written_per_seal"].(float64), 1.8*rows[0]["manifest_bytes_written_per_seal"].(float64))
}

func TestSealBothJSON(t *testing.T) {
	code, out, errOut := runCmd(t, "seal", "-segments", "8", "-step", "4", "-json", "-fs", "mem")
	require.Equal(t, exitOK, code, errOut)
	require.NotContains(t, errOut, "warning")
	rows := jsonRows(t, out)
	require.Len(t, rows, 5)
	for i, want := range []string{"rewrite", "segkv", "rewrite", "segkv"} {
		require.Equal(t, sealKeys, keys(rows[i]))
		require.Equal(t, want, rows[i]["protocol"])
		require.EqualValues(t, 4*(i/2+1), rows[i]["segments"])
	}
	for _, r := range []map[string]any{rows[1], rows[3]} {
		require.LessOrEqual(t, r["fsyncs_per_seal"].(float64), 2.0)
		require.EqualValues(t, 0, r["renames_per_seal"])
		require.EqualValues(t, 0, r["dirsyncs_per_seal"])
		// The next live file's barriers are made in the background and
		// reported as such, not hidden and not charged to the seal.
		require.Positive(t, r["bg_dirsyncs_per_seal"])
	}
	ratio := rows[4]
	require.Equal(t, sorted("protocol", "segments", "us_per_seal", "fsyncs_per_seal", "manifest_bytes_written_per_seal"), keys(ratio))
	require.Equal(t, "ratio", ratio["protocol"])
	require.EqualValues(t, 8, ratio["segments"])
	require.GreaterOrEqual(t, ratio["fsyncs_per_seal"].(float64), 3.0)
}

// The default table is narrow, names its units and the median, and
// explains each column; -wide has every column and no legend.
func TestSealTable(t *testing.T) {
	code, out, errOut := runCmd(t, "seal", "-protocol", "rewrite", "-segments", "2", "-step", "1", "-fs", "mem")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "# segbench seal")
	require.Contains(t, out, "median us/seal")
	require.NotContains(t, out, "bg dirsyncs/seal")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Equal(t, 1+1+2+len(sealLegend), len(lines), out)
	for _, l := range lines {
		require.LessOrEqual(t, len(l), 110, "a line wider than a terminal: %q", l)
	}
	for _, col := range (sealNarrowRow{}).Header() {
		require.Regexp(t, `(?m)^# (.*, )?`+regexp.QuoteMeta(col)+`(, .*)?:`, out, "column %q has no legend line", col)
	}

	code, out, errOut = runCmd(t, "seal", "-protocol", "legacy", "-segments", "2", "-step", "1", "-fs", "mem", "-wide")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "bg dirsyncs/seal")
	require.NotContains(t, out, "# fsyncs/seal:")
}

// segbench -h lists the subcommands, not the default subcommand's flags.
func TestTopLevelHelpListsSubcommands(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "help"} {
		code, out, _ := runCmd(t, arg)
		require.Equal(t, exitOK, code, arg)
		for name := range commands() {
			require.Contains(t, out, "  "+name+" ", arg)
		}
	}
}

func TestFsyncJSON(t *testing.T) {
	code, out, errOut := runCmd(t, "fsync", "-n", "3", "-json", "-dir", t.TempDir())
	require.Equal(t, exitOK, code, errOut)
	rows := jsonRows(t, out)
	require.Len(t, rows, 6)
	for _, r := range rows {
		require.Equal(t, sorted("op", "n", "p50_us", "p99_us", "mean_us", "min_us", "max_us"), keys(r))
		require.EqualValues(t, 3, r["n"])
		require.Positive(t, r["p50_us"])
		require.GreaterOrEqual(t, r["p99_us"].(float64), r["p50_us"].(float64))
	}
}

func TestPutJSON(t *testing.T) {
	for _, args := range [][]string{
		{"put", "-writers", "3", "-n", "300", "-json", "-fs", "mem"},
		{"put", "-writers", "2", "-n", "50", "-sync", "-json", "-dir", t.TempDir()},
	} {
		code, out, errOut := runCmd(t, args...)
		require.Equal(t, exitOK, code, errOut)
		rows := jsonRows(t, out)
		require.Len(t, rows, 1)
		r := rows[0]
		require.Equal(t, sorted("writers", "n", "sync", "seconds", "ops_per_sec", "p50_us", "p99_us", "p999_us",
			"fsyncs_per_put", "dirsyncs_per_put", "seals"), keys(r))
		require.Positive(t, r["ops_per_sec"])
		if slices.Contains(args, "-sync") {
			require.Equal(t, "always", r["sync"])
			require.Positive(t, r["fsyncs_per_put"])
			require.LessOrEqual(t, r["fsyncs_per_put"].(float64), 1.5)
		} else {
			require.Equal(t, "manual", r["sync"])
		}
	}
}

// mergeput on the real disk at a tiny size: 5000 keys twice over in 64 KiB
// segments give the merge a backlog of some 30 segments, which it may well
// clear before the window's end; the row then says so.
func TestMergePutJSON(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCmd(t, "mergeput", "-n", "5000", "-segment-size", "65536", "-duration", "300ms",
		"-writers", "1,2", "-json", "-dir", dir)
	require.Equal(t, exitOK, code, errOut)
	rows := jsonRows(t, out)
	require.Len(t, rows, 2*3+2)
	phaseKeys := sorted("phase", "round", "writers", "n", "seconds", "puts", "ops_per_sec", "p50_us", "p99_us", "p999_us",
		"max_us", "merge_active", "merge_steps", "merge_mb_in", "merge_mb_out", "backlog_busy", "sync_mean_us",
		"sync_p99_us", "syncs_per_put", "seals", "write_stalls", "ended")
	for i, r := range rows[:6] {
		want := []string{phaseBefore, phaseMerging, phaseIdle}[i%3]
		require.Equal(t, want, r["phase"], "row %d", i)
		require.EqualValues(t, []int{1, 2}[i/3], r["writers"], "row %d", i)
		require.EqualValues(t, 1, r["round"])
		require.EqualValues(t, 5000, r["n"])
		f := func(k string) float64 { return r[k].(float64) }
		require.Positive(t, f("puts"), "row %d", i)
		require.Positive(t, f("ops_per_sec"), "row %d", i)
		require.InDelta(t, f("puts")/f("seconds"), f("ops_per_sec"), 0.02*f("ops_per_sec")+1, "row %d", i)
		require.Positive(t, f("p50_us"), "row %d", i)
		require.LessOrEqual(t, f("p50_us"), f("p99_us"))
		require.LessOrEqual(t, f("p99_us"), f("p999_us"))
		require.LessOrEqual(t, f("p999_us"), f("max_us"))
		// Durable puts: every window syncs the live file.
		require.Positive(t, f("sync_mean_us"), "row %d", i)
		require.GreaterOrEqual(t, f("sync_p99_us"), 8.0, "row %d", i)
		require.Positive(t, f("syncs_per_put"), "row %d", i)
		require.LessOrEqual(t, f("syncs_per_put"), 1.5, "row %d", i)
		require.GreaterOrEqual(t, f("merge_active"), 0.0)
		require.LessOrEqual(t, f("merge_active"), 1.0)
		switch want {
		case phaseBefore:
			// Merges are disabled: nothing runs, nothing is pending.
			require.Equal(t, sorted(phaseKeys...), keys(r))
			require.Zero(t, f("merge_active"))
			require.Zero(t, f("merge_steps"))
			require.Zero(t, f("backlog_busy"))
			require.Equal(t, "time", r["ended"])
			require.GreaterOrEqual(t, f("seconds"), 0.3)
		case phaseMerging:
			require.Equal(t, sorted(append(phaseKeys, "merge_done_s")...), keys(r))
			require.Positive(t, f("merge_steps"))
			require.Positive(t, f("merge_active"))
			require.Positive(t, f("merge_mb_in"))
			require.Contains(t, []string{"time", "merge done"}, r["ended"])
			require.Positive(t, f("merge_done_s"))
			if r["ended"] == "merge done" {
				require.LessOrEqual(t, f("merge_done_s"), f("seconds"))
			} else {
				require.GreaterOrEqual(t, f("seconds"), 0.3)
				require.GreaterOrEqual(t, f("merge_done_s"), f("seconds")-0.01)
			}
		case phaseIdle:
			require.Equal(t, sorted(phaseKeys...), keys(r))
			require.Equal(t, "time", r["ended"])
			require.GreaterOrEqual(t, f("seconds"), 0.3)
		}
	}
	for i, r := range rows[6:] {
		require.Equal(t, sorted("phase", "round", "writers", "ops_per_sec", "p50", "p99", "p999", "max", "idle_p99_drift"), keys(r))
		require.Equal(t, "merging/idle", r["phase"])
		require.EqualValues(t, []int{1, 2}[i], r["writers"])
		merging, idle := rows[3*i+1], rows[3*i+2]
		require.InDelta(t, merging["p99_us"].(float64)/idle["p99_us"].(float64), r["p99"], 0.01)
		require.Positive(t, r["idle_p99_drift"])
	}
	// The work directory is gone.
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left)

	// The table: one row per window, the ratio lines, and what the order was.
	code, out, errOut = runCmd(t, "mergeput", "-n", "500", "-segment-size", "16384", "-duration", "100ms", "-fs", "mem")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "# segbench mergeput")
	require.Contains(t, out, "merging/idle")
	require.Regexp(t, `(?m)^# order, per writer count: idle-before`, out)
	for _, ph := range []string{phaseBefore, phaseMerging, phaseIdle} {
		require.Regexp(t, `(?m)^ *`+ph+` +1 +1 `, out)
	}
}

func TestImportJSON(t *testing.T) {
	code, out, errOut := runCmd(t, "import", "-segments", "5", "-records", "3", "-json", "-fs", "mem")
	require.Equal(t, exitOK, code, errOut)
	rows := jsonRows(t, out)
	require.Len(t, rows, 3)
	fields := sorted("mode", "segments", "imports", "total_ms", "us_per_segment", "manifest_commits", "fsyncs",
		"dirsyncs", "renames", "manifest_bytes_written")
	require.Equal(t, fields, keys(rows[0]))
	require.Equal(t, fields, keys(rows[1]))
	require.Equal(t, "batch", rows[0]["mode"])
	require.EqualValues(t, 1, rows[0]["imports"])
	require.EqualValues(t, 1, rows[0]["manifest_commits"])
	require.Equal(t, "single", rows[1]["mode"])
	require.EqualValues(t, 5, rows[1]["imports"])
	require.EqualValues(t, 5, rows[1]["manifest_commits"])
	require.Equal(t, "ratio", rows[2]["mode"])
}

func TestPlotRendersSVG(t *testing.T) {
	in := `{"protocol":"legacy","segments":250,"us_per_seal":3000,"manifest_bytes_written_per_seal":23000}
{"protocol":"new","segments":250,"us_per_seal":500,"manifest_bytes_written_per_seal":150}
{"protocol":"legacy","segments":500,"us_per_seal":3500,"manifest_bytes_written_per_seal":70000}
{"protocol":"new","segments":500,"us_per_seal":510,"manifest_bytes_written_per_seal":151}
{"protocol":"ratio","segments":500,"us_per_seal":6.9,"fsyncs_per_seal":3,"manifest_bytes_written_per_seal":460}
`
	dir := t.TempDir()
	src := filepath.Join(dir, "in.json")
	require.NoError(t, os.WriteFile(src, []byte(in), 0o644))
	dst := filepath.Join(dir, "out.svg")
	code, _, errOut := runCmd(t, "plot", "-in", src, "-out", dst)
	require.Equal(t, exitOK, code, errOut)
	svg, err := os.ReadFile(dst)
	require.NoError(t, err)
	// Well-formed XML with one line per protocol per panel.
	d := xml.NewDecoder(bytes.NewReader(svg))
	polylines := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	require.Equal(t, 4, polylines)

	code, _, _ = runCmd(t, "plot", "-in", filepath.Join(dir, "empty"), "-out", dst)
	require.Equal(t, exitFail, code)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644))
	code, _, errOut = runCmd(t, "plot", "-in", filepath.Join(dir, "empty"), "-out", dst)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "no seal rows")
}

func TestNiceTicks(t *testing.T) {
	ticks, top := niceTicks(2000)
	require.Equal(t, []float64{0, 500, 1000, 1500, 2000}, ticks)
	require.EqualValues(t, 2000, top)
	_, top = niceTicks(376976)
	require.EqualValues(t, 400000, top)
	require.Equal(t, "1.5k", human(1500))
	require.Equal(t, "2M", human(2e6))
	require.Equal(t, "0.25", human(0.25))
}

// Flags without a subcommand are seal's: `make bench BENCHARGS="-segments
// 100 -step 50"` works as well as `seal -segments 100 -step 50`.
func TestNoSubcommandIsSeal(t *testing.T) {
	code, out, errOut := runCmd(t, "-protocol", "legacy", "-segments", "2", "-step", "1", "-json", "-fs", "mem")
	require.Equal(t, exitOK, code, errOut)
	rows := jsonRows(t, out)
	require.Len(t, rows, 2)
	require.Equal(t, "rewrite", rows[0]["protocol"])
	// Progress is for terminals only: a buffer gets none.
	require.Empty(t, errOut)
}

func TestClassifierCountsCallersOwnBarriersAsForeground(t *testing.T) {
	require.True(t, isBackgroundFrame("github.com/segkv/segkv/segstore.(*background).run"))
	require.True(t, isBackgroundFrame("github.com/segkv/segkv/manifestlog.(*Log).maybeRotate.func1"))
	require.False(t, isBackgroundFrame("github.com/segkv/segkv/segstore.(*Store).Seal"))

	c := newCounted(vfs.NewMem(), true)
	require.NoError(t, c.cnt.MkdirAll("/d"))
	f, err := c.cls.Create("/d/f")
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, c.cls.Rename("/d/f", "/d/g"))
	require.NoError(t, c.cls.SyncDir("/d"))
	fg := c.foreground()
	require.Equal(t, [4]int64{1, 1, 1, 1}, [4]int64{fg.Syncs, fg.DirSyncs, fg.Renames, fg.Creates})
	require.EqualValues(t, 1, fg.Calls[opSync])
	require.EqualValues(t, 1, fg.Calls[opClose])
	require.Positive(t, fg.Nanos[opSync]+fg.Nanos[opCreate])
	require.Equal(t, opCounts{}, c.background())
	total, _ := c.totals()
	require.True(t, total.sameOps(fg))
}

func TestSealOpsBreakdown(t *testing.T) {
	code, out, errOut := runCmd(t, "seal", "-segments", "4", "-step", "4", "-ops", "-json", "-fs", "mem")
	require.Equal(t, exitOK, code, errOut)
	var ops []map[string]any
	for _, r := range jsonRows(t, out) {
		if _, ok := r["breakdown"]; ok {
			require.Equal(t, sorted("breakdown", "op", "calls_per_seal", "us_per_seal"), keys(r))
			ops = append(ops, r)
		}
	}
	calls := map[string]float64{}
	for _, r := range ops {
		calls[r["breakdown"].(string)+" "+r["op"].(string)] = r["calls_per_seal"].(float64)
	}
	require.EqualValues(t, 3, calls["rewrite rename"])
	require.EqualValues(t, 3, calls["rewrite syncdir"])
	require.EqualValues(t, 3, calls["rewrite sync (fdatasync)"])
	require.EqualValues(t, 2, calls["segkv sync (fdatasync)"])
	require.EqualValues(t, 1, calls["segkv seal (wall)"])
}
