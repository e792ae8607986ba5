// Package observetest reads a Prometheus registry in tests: the families
// by name, and a family's samples summed over matching labels. It imports
// nothing of the module, so observe's own tests and observe/pipeline's
// share it.
package observetest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Families gathers reg by name, failing t on an error.
func Families(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// Sum adds up a family's samples whose labels include want: counter
// and gauge values, a histogram's sample count; -1 when there is no
// family name.
func Sum(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var v float64
	mf := mfs[name]
	if mf == nil {
		return -1
	}
next:
	for _, m := range mf.GetMetric() {
		for k, w := range want {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == w {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v
}
