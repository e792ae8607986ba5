package feed

import (
	"strings"
	"testing"
	"time"
)

func TestStallMeter(t *testing.T) {
	m := stallMeter{every: 2}
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	m.ask(at(0))            // first ask: nothing in hand
	m.handed(at(0), at(30)) // waited 30 ms
	if r := m.take(true); r != nil {
		t.Fatalf("a step reported before its next ask: %+v", r)
	}
	m.ask(at(40)) // computed 10 ms
	if r := m.take(false); r != nil {
		t.Fatalf("one step reported with every=2: %+v", r)
	}
	m.handed(at(40), at(45))
	m.ask(at(100)) // waited 5, computed 55
	m.ask(at(200)) // an ask that got no batch (an epoch's end): no step
	r := m.take(false)
	if r == nil || len(r.WaitUS) != 2 || r.WaitUS[0] != 30000 || r.ComputeUS[0] != 10000 || r.WaitUS[1] != 5000 || r.ComputeUS[1] != 55000 {
		t.Fatalf("report %+v, want waits [30000 5000] computes [10000 55000]", r)
	}
	if s := m.stall(); s.Steps != 2 || s.Wait != 35*time.Millisecond || s.Compute != 65*time.Millisecond || s.Share() != 0.35 {
		t.Fatalf("totals %+v (share %v)", s, s.Share())
	}
	if r := m.take(true); r != nil {
		t.Fatalf("reported twice: %+v", r)
	}
}

func TestStallMeterSplitsLongReports(t *testing.T) {
	m := stallMeter{every: 1}
	now := time.Unix(0, 0)
	for i := 0; i < MaxStallSteps+5; i++ {
		m.handed(now, now)
		m.ask(now)
	}
	if r := m.take(true); len(r.WaitUS) != MaxStallSteps {
		t.Fatalf("first report of %d steps, want %d", len(r.WaitUS), MaxStallSteps)
	}
	if r := m.take(true); len(r.WaitUS) != 5 {
		t.Fatalf("second report of %d steps, want 5", len(r.WaitUS))
	}
}

func TestParseReleaseStall(t *testing.T) {
	for _, tc := range []struct {
		payload, err string
	}{
		{`{"ids":[1]}`, ""},
		{`{"ids":[1],"stall":{"wait_us":[5,6],"compute_us":[7,8]}}`, ""},
		{`{"ids":[],"stall":{"wait_us":[5],"compute_us":[7]}}`, ""},
		{`{"ids":[1],"stall":{"wait_us":[5],"compute_us":[]}}`, "one of each per step"},
		{`{"ids":[1],"stall":{"wait_us":[-1],"compute_us":[2]}}`, "negative"},
		{`{"ids":[],"stall":{"wait_us":[],"compute_us":[],"headspace":{"steps":8,"compute_us":40000}}}`, ""},
		{`{"ids":[],"stall":{"wait_us":[],"compute_us":[],"headspace":{"steps":-8,"compute_us":40000}}}`, "negative"},
		{`{"ids":[1],"stall":{"wait_us":[` + strings.Repeat("1,", MaxStallSteps) + `1],"compute_us":[]}}`, "one of each"},
	} {
		m, err := ParseClientMsg(MsgRelease, []byte(tc.payload))
		if tc.err == "" && err != nil {
			t.Errorf("%s: %v", tc.payload, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%.60s: error %v, want one saying %q", tc.payload, err, tc.err)
		}
		if err == nil && strings.Contains(tc.payload, "stall") && m.Release.Stall == nil {
			t.Errorf("%s: stall report lost", tc.payload)
		}
	}
}
