package observe

import (
	"slices"
	"testing"
)

// TestRegistryHasControlMetrics: every daemon's registry exports the
// control port's counters, with a refused-calls series per method of
// protoactor's Remoting service.
func TestRegistryHasControlMetrics(t *testing.T) {
	mfs, err := Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				got[mf.GetName()] = append(got[mf.GetName()], l.GetValue())
			}
			if len(m.GetLabel()) == 0 {
				got[mf.GetName()] = append(got[mf.GetName()], "")
			}
		}
	}
	for _, name := range []string{"longshore_control_refused_messages_total", "longshore_control_malformed_batches_total", "longshore_control_panics_total"} {
		if len(got[name]) != 1 {
			t.Errorf("%s: %q, want one series", name, got[name])
		}
	}
	methods := got["longshore_control_refused_calls_total"]
	for _, m := range []string{"ListProcesses", "GetProcessDiagnostics", "Receive", "other"} {
		if !slices.Contains(methods, m) {
			t.Errorf("longshore_control_refused_calls_total has methods %q, want %s among them", methods, m)
		}
	}
}
