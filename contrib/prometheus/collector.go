// Package prometheus exports a segkv store's Metrics as Prometheus metrics:
// a prometheus.Collector that reads segstore.Store.Metrics once per scrape.
// It lives in a module of its own so that the library's go.mod does not
// depend on client_golang.
//
// Names start with segkv_; counters end in _total, byte figures in _bytes,
// the latency histograms in _duration_seconds (see NewCollector for the
// list, and docs/DESIGN.md for what each figure means).
package prometheus

import (
	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/segkv/segkv/segstore"
)

// Source is what the collector reads: a *segstore.Store, or anything else
// that returns its Metrics (a wrapper, a test's fake).
type Source interface {
	Metrics() segstore.Metrics
}

// Option configures a Collector.
type Option func(*config)

type config struct {
	labels prom.Labels
}

// WithStoreName adds the constant label store="name" to every metric, so
// that one process can export several stores.
func WithStoreName(name string) Option {
	return WithConstLabels(prom.Labels{"store": name})
}

// WithConstLabels adds constant labels to every metric.
func WithConstLabels(labels prom.Labels) Option {
	return func(c *config) {
		for k, v := range labels {
			c.labels[k] = v
		}
	}
}

// metric is one exported figure: a counter or a gauge read from Metrics.
type metric struct {
	desc  *prom.Desc
	typ   prom.ValueType
	value func(m *segstore.Metrics) float64
}

// histogram is one exported latency histogram.
type histogram struct {
	desc  *prom.Desc
	value func(m *segstore.Metrics) segstore.Histogram
}

// Collector is a prometheus.Collector over one store's Metrics. Each
// Collect calls Metrics once, so every figure of a scrape is from the same
// reading.
type Collector struct {
	src        Source
	metrics    []metric
	histograms []histogram
}

var _ prom.Collector = (*Collector)(nil)

// NewCollector returns a collector of src's metrics; register it with
// prometheus.MustRegister (or a registry of your own).
func NewCollector(src Source, opts ...Option) *Collector {
	cfg := config{labels: prom.Labels{}}
	for _, o := range opts {
		o(&cfg)
	}
	c := &Collector{src: src}
	desc := func(name, help string) *prom.Desc {
		return prom.NewDesc("segkv_"+name, help, nil, cfg.labels)
	}
	counter := func(name, help string, v func(m *segstore.Metrics) int64) {
		c.metrics = append(c.metrics, metric{desc(name, help), prom.CounterValue,
			func(m *segstore.Metrics) float64 { return float64(v(m)) }})
	}
	gauge := func(name, help string, v func(m *segstore.Metrics) float64) {
		c.metrics = append(c.metrics, metric{desc(name, help), prom.GaugeValue, v})
	}

	counter("writes_total", "Acknowledged Put, Delete, DeleteRange and Apply calls.", func(m *segstore.Metrics) int64 { return m.Writes })
	counter("write_bytes_total", "Bytes of acknowledged writes appended to the live file (records, before the group's frame header).", func(m *segstore.Metrics) int64 { return m.WriteBytes })
	counter("write_stalls_total", "Writes that waited for a seal's switch of live files.", func(m *segstore.Metrics) int64 { return m.WriteStalls })
	counter("gets_total", "Get calls of the store and its snapshots (hits, misses and errors).", func(m *segstore.Metrics) int64 { return m.Gets })
	counter("get_hits_total", "Gets that found a value.", func(m *segstore.Metrics) int64 { return m.GetHits })
	counter("get_misses_total", "Gets that returned not found.", func(m *segstore.Metrics) int64 { return m.GetMisses })
	counter("bloom_negatives_total", "Sealed segments a Get skipped because their bloom filter ruled the key out.", func(m *segstore.Metrics) int64 { return m.BloomNegatives })
	counter("read_bytes_total", "Record bytes Get read and verified.", func(m *segstore.Metrics) int64 { return m.ReadBytes })
	counter("seals_total", "Live files sealed into segments.", func(m *segstore.Metrics) int64 { return m.Seals })
	counter("sealed_bytes_total", "Data bytes sealed into segments.", func(m *segstore.Metrics) int64 { return m.SealedBytes })
	counter("seal_data_syncs_total", "Seals that had to fdatasync the sealed file themselves.", func(m *segstore.Metrics) int64 { return m.SealDataSyncs })
	counter("spares_made_total", "Live files made ahead of need.", func(m *segstore.Metrics) int64 { return m.SparesMade })
	counter("spare_misses_total", "Seals that found no spare live file ready.", func(m *segstore.Metrics) int64 { return m.SpareMisses })
	counter("merges_total", "Merge steps committed.", func(m *segstore.Metrics) int64 { return m.Merges })
	counter("rewrites_total", "Merge steps that rewrote one segment alone, for its garbage or into key order.", func(m *segstore.Metrics) int64 { return m.Rewrites })
	counter("merged_in_bytes_total", "Data bytes read by merges.", func(m *segstore.Metrics) int64 { return m.MergedBytesIn })
	counter("merged_out_bytes_total", "Data bytes written by merges.", func(m *segstore.Metrics) int64 { return m.MergedBytesOut })
	counter("imports_total", "Import calls that committed at least one segment.", func(m *segstore.Metrics) int64 { return m.Imports })
	counter("imported_segments_total", "Segments adopted by Import.", func(m *segstore.Metrics) int64 { return m.Imported })
	counter("imported_bytes_total", "Data bytes of the segments adopted by Import.", func(m *segstore.Metrics) int64 { return m.ImportedBytes })
	counter("range_dropped_segments_total", "Sealed segments dropped whole under a newer range tombstone.", func(m *segstore.Metrics) int64 { return m.RangeDropped })
	counter("files_removed_total", "Data files removed after their last reader.", func(m *segstore.Metrics) int64 { return m.FilesRemoved })
	counter("index_rebuilds_total", "Indexes rebuilt from their data file, at Open or later.", func(m *segstore.Metrics) int64 { return m.IndexRebuilds })
	counter("background_errors_total", "Failures of background work (seal, interval sync, merge, spare, index write).", func(m *segstore.Metrics) int64 { return m.BackgroundErrors })

	gauge("segments", "Sealed segments.", func(m *segstore.Metrics) float64 { return float64(m.Segments) })
	gauge("segment_bytes", "Bytes of sealed data files.", func(m *segstore.Metrics) float64 { return float64(m.SegmentBytes) })
	gauge("live_bytes", "Bytes appended to the live file.", func(m *segstore.Metrics) float64 { return float64(m.LiveBytes) })
	gauge("index_bytes", "Bytes of the sealed segments' index files.", func(m *segstore.Metrics) float64 { return float64(m.IndexBytes) })
	gauge("manifest_bytes", "Size of the current manifest log file.", func(m *segstore.Metrics) float64 { return float64(m.ManifestBytes) })
	gauge("disk_bytes", "Bytes of the store's files: segments, indexes, manifest and live file (preallocation not counted).", func(m *segstore.Metrics) float64 { return float64(m.DiskBytes) })
	gauge("files", "Files the store keeps in its directory (LOCK not counted).", func(m *segstore.Metrics) float64 { return float64(m.Files) })
	gauge("open_files", "Sealed segment files held open for reads.", func(m *segstore.Metrics) float64 { return float64(m.OpenFiles) })
	gauge("open_snapshots", "Snapshots and iterators not yet closed.", func(m *segstore.Metrics) float64 { return float64(m.OpenSnapshots) })
	gauge("merge_backlog_segments", "Segments the background merge would take in its next step.", func(m *segstore.Metrics) float64 { return float64(m.MergeBacklog) })
	gauge("garbage_bytes", "Estimated bytes of sealed segments that no read can reach (superseded or deleted records).", func(m *segstore.Metrics) float64 { return float64(m.GarbageBytes) })
	gauge("manifest_seq", "Sequence number of the last manifest commit.", func(m *segstore.Metrics) float64 { return float64(m.ManifestSeq) })
	gauge("failed", "1 once the store stopped accepting writes after an I/O error (until reopened), else 0.", func(m *segstore.Metrics) float64 {
		if m.Failed {
			return 1
		}
		return 0
	})

	c.histograms = []histogram{
		{desc("manifest_commit_duration_seconds", "Latency of manifest commits (append and fdatasync of the manifest log)."),
			func(m *segstore.Metrics) segstore.Histogram { return m.ManifestCommits }},
		{desc("data_sync_duration_seconds", "Latency of fdatasyncs of data files (live file, merge and import outputs, new live files)."),
			func(m *segstore.Metrics) segstore.Histogram { return m.DataSyncs }},
	}
	return c
}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prom.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
	for _, h := range c.histograms {
		ch <- h.desc
	}
}

// Collect reads the store's Metrics once and sends every metric.
func (c *Collector) Collect(ch chan<- prom.Metric) {
	m := c.src.Metrics()
	for _, mt := range c.metrics {
		ch <- prom.MustNewConstMetric(mt.desc, mt.typ, mt.value(&m))
	}
	for _, h := range c.histograms {
		ch <- constHistogram(h.desc, h.value(&m))
	}
}

// constHistogram converts a segstore.Histogram (per-bucket counts) to a
// Prometheus histogram (cumulative counts by upper bound, in seconds). The
// store's last bucket has no bound: it is Prometheus's implicit +Inf one,
// whose count is the total.
func constHistogram(d *prom.Desc, h segstore.Histogram) prom.Metric {
	buckets := make(map[float64]uint64, segstore.HistogramBuckets-1)
	var cum uint64
	for i := range segstore.HistogramBuckets - 1 {
		cum += uint64(h.Buckets[i])
		buckets[h.UpperBound(i).Seconds()] = cum
	}
	return prom.MustNewConstHistogram(d, uint64(h.Count), h.Sum.Seconds(), buckets)
}
