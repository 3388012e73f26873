package prometheus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	segkvprom "github.com/segkv/segkv/contrib/prometheus"
	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// fake returns fixed Metrics, so that every exported value can be checked.
type fake struct{ m segstore.Metrics }

func (f fake) Metrics() segstore.Metrics { return f.m }

func gather(t *testing.T, src segkvprom.Source, opts ...segkvprom.Option) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(segkvprom.NewCollector(src, opts...))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	// promlint: names, units and help text follow Prometheus's conventions.
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	return out
}

func TestCollectorNamesTypesValues(t *testing.T) {
	m := segstore.Metrics{Writes: 7, GetHits: 3, GetMisses: 2, Gets: 6, Segments: 4, DiskBytes: 12345, Failed: true}
	m.DataSyncs.Count = 3
	m.DataSyncs.Sum = 2*time.Millisecond + 20*time.Microsecond
	m.DataSyncs.Buckets[0] = 1                           // <= 8µs
	m.DataSyncs.Buckets[1] = 1                           // <= 16µs
	m.DataSyncs.Buckets[segstore.HistogramBuckets-1] = 1 // beyond the last bound
	fams := gather(t, fake{m}, segkvprom.WithStoreName("main"))

	want := map[string]dto.MetricType{
		"segkv_writes_total":                     dto.MetricType_COUNTER,
		"segkv_gets_total":                       dto.MetricType_COUNTER,
		"segkv_get_hits_total":                   dto.MetricType_COUNTER,
		"segkv_get_misses_total":                 dto.MetricType_COUNTER,
		"segkv_bloom_negatives_total":            dto.MetricType_COUNTER,
		"segkv_read_bytes_total":                 dto.MetricType_COUNTER,
		"segkv_write_bytes_total":                dto.MetricType_COUNTER,
		"segkv_seals_total":                      dto.MetricType_COUNTER,
		"segkv_merges_total":                     dto.MetricType_COUNTER,
		"segkv_rewrites_total":                   dto.MetricType_COUNTER,
		"segkv_garbage_bytes":                    dto.MetricType_GAUGE,
		"segkv_imports_total":                    dto.MetricType_COUNTER,
		"segkv_index_rebuilds_total":             dto.MetricType_COUNTER,
		"segkv_background_errors_total":          dto.MetricType_COUNTER,
		"segkv_segments":                         dto.MetricType_GAUGE,
		"segkv_disk_bytes":                       dto.MetricType_GAUGE,
		"segkv_index_bytes":                      dto.MetricType_GAUGE,
		"segkv_manifest_bytes":                   dto.MetricType_GAUGE,
		"segkv_files":                            dto.MetricType_GAUGE,
		"segkv_failed":                           dto.MetricType_GAUGE,
		"segkv_manifest_commit_duration_seconds": dto.MetricType_HISTOGRAM,
		"segkv_data_sync_duration_seconds":       dto.MetricType_HISTOGRAM,
	}
	for name, typ := range want {
		f, ok := fams[name]
		if !ok {
			t.Errorf("%s not exported", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s: type %v, want %v", name, f.GetType(), typ)
		}
		if f.GetHelp() == "" {
			t.Errorf("%s: no help text", name)
		}
		if l := f.GetMetric()[0].GetLabel(); len(l) != 1 || l[0].GetName() != "store" || l[0].GetValue() != "main" {
			t.Errorf("%s: labels %v, want store=main", name, l)
		}
	}
	for name, f := range fams {
		if f.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
			t.Errorf("counter %s does not end in _total", name)
		}
	}

	value := func(name string) float64 {
		mt := fams[name].GetMetric()[0]
		if c := mt.GetCounter(); c != nil {
			return c.GetValue()
		}
		return mt.GetGauge().GetValue()
	}
	for name, v := range map[string]float64{"segkv_writes_total": 7, "segkv_get_hits_total": 3, "segkv_gets_total": 6,
		"segkv_segments": 4, "segkv_disk_bytes": 12345, "segkv_failed": 1} {
		if got := value(name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}

	h := fams["segkv_data_sync_duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 3 || h.GetSampleSum() != 0.00202 {
		t.Errorf("histogram count %d sum %v, want 3 and 0.00202", h.GetSampleCount(), h.GetSampleSum())
	}
	b := h.GetBucket()
	if len(b) != segstore.HistogramBuckets-1 {
		t.Fatalf("%d buckets, want %d (the last is +Inf)", len(b), segstore.HistogramBuckets-1)
	}
	if b[0].GetUpperBound() != 8e-6 || b[0].GetCumulativeCount() != 1 || b[1].GetCumulativeCount() != 2 || b[len(b)-1].GetCumulativeCount() != 2 {
		t.Errorf("buckets not cumulative by bound: %v", b)
	}
}

// TestCollectorOverStore scrapes a real store after some work.
func TestCollectorOverStore(t *testing.T) {
	s, err := segstore.Open("/db", &segstore.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Put([]byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Seal(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(context.Background()); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, s)
	if got := fams["segkv_writes_total"].GetMetric()[0].GetCounter().GetValue(); got != 3 {
		t.Errorf("writes_total %v, want 3", got)
	}
	if got := fams["segkv_seals_total"].GetMetric()[0].GetCounter().GetValue(); got != 1 {
		t.Errorf("seals_total %v, want 1", got)
	}
	if got := fams["segkv_manifest_commit_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); got != 1 {
		t.Errorf("manifest commits %v, want 1 (the seal's)", got)
	}
	if l := fams["segkv_segments"].GetMetric()[0].GetLabel(); len(l) != 0 {
		t.Errorf("labels without an option: %v", l)
	}
}
