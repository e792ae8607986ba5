package observe

import (
	"regexp"
	"strings"
	"testing"
)

// TestTableIsWellFormed: every row of the table has a unique name of
// Prometheus's alphabet, help, a reader, and labels its kind allows; each
// figure the report and the status page read names one row.
func TestTableIsWellFormed(t *testing.T) {
	name := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	seen := map[string]bool{}
	figures := map[string]string{}
	for _, s := range Metrics {
		if seen[s.Name] {
			t.Errorf("%s: two rows of that name", s.Name)
		}
		seen[s.Name] = true
		if !name.MatchString(s.Name) || strings.HasPrefix(s.Name, Namespace) {
			t.Errorf("%q: not a name after the namespace", s.Name)
		}
		if s.Help == "" || s.Read == nil {
			t.Errorf("%s: no help or no reader", s.Name)
		}
		if s.Kind == Counter != strings.HasSuffix(s.Name, "_total") {
			t.Errorf("%s: a counter's name ends in _total, and only a counter's", s.Name)
		}
		if (len(s.Const) > 0) != (s.Group == GroupConns) {
			t.Errorf("%s: constant labels are the HTTP servers' alone", s.Name)
		}
		if s.Figure != "" {
			if other, ok := figures[s.Figure]; ok {
				t.Errorf("figure %s is read from %s and %s", s.Figure, other, s.Name)
			}
			figures[s.Figure] = s.Name
		}
	}
	for _, f := range []string{FigRankSamples, FigRankSeconds, FigRankEpoch, FigRankStep, FigRankSlotsInUse, FigRankTrainerWait,
		FigRankTrainerCompute, FigFailures, FigStatusLeases, FigStatusTotal, FigStatusEpoch, FigStatusEpochsComplete,
		FigStatusCommitted, FigStatusRatio, FigStatusMixture} {
		if _, ok := figures[f]; !ok {
			t.Errorf("figure %s: no row gives it", f)
		}
	}
	if len(Metrics) < 90 {
		t.Errorf("the table has %d rows: some series are missing", len(Metrics))
	}
}
