package observe

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports some of a table's rows from a snapshot taken at
// each scrape.
type collector struct {
	t     Table
	rows  []int
	descs []*prometheus.Desc
	snap  func() Snapshot
}

var _ prometheus.Collector = (*collector)(nil)

// Collector exports t's rows of groups, reading snap at each scrape
// (snap must be safe for concurrent use). consts are the values of the
// rows' Const labels (an HTTP server's name), in order.
func (t Table) Collector(snap func() Snapshot, groups []Group, consts ...string) prometheus.Collector {
	c := &collector{t: t, snap: snap}
	for i := range t {
		if !hasGroup(groups, t[i].Group) {
			continue
		}
		s := &t[i]
		if len(s.Const) != len(consts) {
			panic(fmt.Sprintf("observe: %s has %d constant labels, given %d values", s.FullName(), len(s.Const), len(consts)))
		}
		var cl prometheus.Labels
		if len(consts) > 0 {
			cl = prometheus.Labels{}
			for j, name := range s.Const {
				cl[name] = consts[j]
			}
		}
		c.rows = append(c.rows, i)
		c.descs = append(c.descs, prometheus.NewDesc(s.FullName(), s.Help, s.Labels, cl))
	}
	return c
}

// Describe implements prometheus.Collector: every series the collector
// may export.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap()
	for k, i := range c.rows {
		row := &c.t[i]
		o := Out{series: row}
		row.Read(&s, &o)
		for _, smp := range o.samples {
			ch <- metricOf(row, c.descs[k], smp)
		}
	}
}

func metricOf(row *Series, d *prometheus.Desc, s Sample) prometheus.Metric {
	switch row.Kind {
	case Histogram:
		h := s.Hist
		buckets := make(map[float64]uint64, len(h.Bounds))
		for i, b := range h.Bounds {
			buckets[b] = h.Cumulative[i]
		}
		return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets, s.Labels...)
	case Counter:
		return prometheus.MustNewConstMetric(d, prometheus.CounterValue, s.Value, s.Labels...)
	default:
		return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, s.Value, s.Labels...)
	}
}
