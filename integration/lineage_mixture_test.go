package integration

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLineageClusterMixtureMatchesDeliveryLog: a cluster --mixture job
// (the three sources and schedule of the mixture tests, a journal, one
// node of two ranks, the train transform, --log-pixels). Then
// longshore-lineage, given the journal, the coordinator's --mixture flags
// and the node's decode flags, must answer every committed step of both
// epochs with its session, the same mixture keys in the same slots, the
// same padding and pixel digests, each sample's source; and --key must
// find every place a key appeared in committed history, with no epoch
// untraced (the mixture's positions checked against the trails), and the
// journal's summary finds every trail with its cuts.
func TestLineageClusterMixtureMatchesDeliveryLog(t *testing.T) {
	spec, keys := mixFixture(t)
	journalDir := filepath.Join(t.TempDir(), "journal")
	j := mixJob(spec, "--checkpoint", journalDir, "--journal-keep", "100000")
	j.minRanks = 2
	c := startCluster(t, j)
	c.addNode("--mixture", spec, "--mixture-schedule", mixSchedule, "--transform", "train", "--size", "16", "--log-pixels")
	c.finish()
	h, err := readHistory(c.nodeLogs, filepath.Join(c.dir, "coord.acks"))
	if err != nil {
		t.Fatal(err)
	}
	committed, last := committedHistory(h)
	if len(last) != 2 {
		t.Fatalf("committed history holds epochs %v, want 0 and 1", last)
	}

	ask := lineageAsker(t, lineageBinary(t), []string{"--checkpoint", journalDir, "--mixture", spec, "--mixture-schedule", mixSchedule,
		"--transform", "train", "--size", "16", "--json"})
	answered := 0
	for e := range 2 {
		for rank, end := range last[e] {
			a := ask("--epoch", strconv.Itoa(e), "--rank", rank, "--steps", "0-"+strconv.FormatInt(end, 10))
			if a.Job.Mode != "cluster" || a.Job.Mixture == nil || len(a.Job.Mixture.Sources) != 3 {
				t.Fatalf("job %+v: want a cluster mixture of 3 sources", a.Job)
			}
			answered += lineageSteps(t, committed, a.Steps, map[lineageAt]int{}, nil,
				func(x lineageSample) bool { return strings.HasPrefix(x.Key, x.Source+"/") })
		}
	}
	lineageAnsweredAll(t, committed, answered)
	t.Logf("lineage matched %d committed steps of a cluster mixture (keys, sources, slots, padding, pixel digests)", answered)
	lineageKeys(t, committed, keys, 17, ask)
	journalSummaryTraced(t, lineageBinary(t), journalDir, 2)
}
