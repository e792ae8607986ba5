package observetest

import (
	"encoding/json"
	"regexp"
	"testing"
)

// metricName matches a metric name in a PromQL expression: ours and the
// Go runtime's and process's that the dashboard uses.
var metricName = regexp.MustCompile(`\b(longshore|process|go)_[a-z0-9_]+\b`)

// DashboardExprs returns every PromQL expression ("expr") of a Grafana
// dashboard's JSON, failing t if it does not parse or has none.
func DashboardExprs(t *testing.T, dashboard []byte) []string {
	t.Helper()
	var d any
	if err := json.Unmarshal(dashboard, &d); err != nil {
		t.Fatalf("the dashboard: %v", err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "expr" {
					exprs = append(exprs, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(d)
	if len(exprs) == 0 {
		t.Fatal("the dashboard has no expressions")
	}
	return exprs
}

// MetricNames returns the metric names expr uses, in order, each once.
func MetricNames(expr string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range metricName.FindAllString(expr, -1) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
