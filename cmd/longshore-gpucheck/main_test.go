package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The copy check's plumbing on the twin: every host mode uploads, the
// round trips hold, and the report is the JSON gpu-check.sh reads. (The
// twin's GB/s are memcpy's, meaningless.)
func TestCopyCheckOnTheTwin(t *testing.T) {
	var out bytes.Buffer
	if err := copyCheck([]string{"--twin", "--peak-bytes", "1048576", "--slot-bytes", "300000", "--slots", "3", "--iters", "4"}, &out); err != nil {
		t.Fatal(err)
	}
	var rep CopyReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Driver != "twin" || rep.PinnedPeakGBs <= 0 || len(rep.Modes) != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, m := range rep.Modes {
		if m.Error != "" || !m.RoundTripsOK || m.RoundTrips != 6 || m.Uploads != 4 || m.GBs <= 0 {
			t.Fatalf("mode %+v", m)
		}
	}
}
