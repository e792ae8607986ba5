package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
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
// find every place a key appeared in committed history.
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
	type at struct {
		epoch int
		rank  string
		step  int64
	}
	type committedStep struct {
		session string
		samples []sample
	}
	committed := map[at][]committedStep{}
	last := map[int]map[string]int64{}
	for k, ss := range h.delivered {
		if a, ok := h.acked[k.sessionEpoch]; !ok || k.step > a {
			continue
		}
		id := at{k.epoch, k.rank, k.step}
		committed[id] = append(committed[id], committedStep{k.session, ss})
		if last[k.epoch] == nil {
			last[k.epoch] = map[string]int64{}
		}
		last[k.epoch][k.rank] = max(last[k.epoch][k.rank], k.step)
	}
	if len(last) != 2 {
		t.Fatalf("committed history holds epochs %v, want 0 and 1", last)
	}

	type answer struct {
		Job struct {
			Mode    string `json:"mode"`
			Mixture *struct {
				Sources []struct{ Name string } `json:"sources"`
			} `json:"mixture"`
		} `json:"job"`
		Steps []struct {
			Epoch    int    `json:"epoch"`
			RankName string `json:"rank_name"`
			Session  string `json:"session"`
			Step     int64  `json:"step"`
			Samples  []struct {
				Key    string `json:"key"`
				Source string `json:"source"`
				Pad    bool   `json:"pad"`
				Pixels string `json:"pixels"`
				Error  string `json:"error"`
			} `json:"samples"`
		} `json:"steps"`
		Appearances []struct {
			Epoch    int    `json:"epoch"`
			RankName string `json:"rank_name"`
			Session  string `json:"session"`
			Step     int64  `json:"step"`
			Slot     int    `json:"slot"`
			Pad      bool   `json:"pad"`
		} `json:"appearances"`
	}
	bin := lineageBinary(t)
	job := []string{"--checkpoint", journalDir, "--mixture", spec, "--mixture-schedule", mixSchedule, "--transform", "train", "--size", "16", "--json"}
	ask := func(args ...string) answer {
		t.Helper()
		cmd := exec.Command(bin, append(append([]string(nil), job...), args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("longshore-lineage %s: %v\n%s", strings.Join(args, " "), err, errb.String())
		}
		var a answer
		if err := json.Unmarshal(out.Bytes(), &a); err != nil {
			t.Fatalf("longshore-lineage %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return a
	}
	answered := 0
	for e := range 2 {
		for rank, end := range last[e] {
			a := ask("--epoch", strconv.Itoa(e), "--rank", rank, "--steps", "0-"+strconv.FormatInt(end, 10))
			if a.Job.Mode != "cluster" || a.Job.Mixture == nil || len(a.Job.Mixture.Sources) != 3 {
				t.Fatalf("job %+v: want a cluster mixture of 3 sources", a.Job)
			}
			for _, s := range a.Steps {
				var want *committedStep
				for i, cs := range committed[at{s.Epoch, s.RankName, s.Step}] {
					if cs.session == s.Session {
						want = &committed[at{s.Epoch, s.RankName, s.Step}][i]
					}
				}
				if want == nil || len(want.samples) != len(s.Samples) {
					t.Errorf("epoch %d rank %s step %d session %s: not in committed history as answered (%d samples)", s.Epoch, s.RankName, s.Step, s.Session, len(s.Samples))
					continue
				}
				for i, x := range s.Samples {
					w := want.samples[i]
					if x.Key != w.key || x.Pad != w.pad || x.Pixels != w.px || x.Error != "" || !strings.HasPrefix(x.Key, x.Source+"/") {
						t.Errorf("epoch %d rank %s step %d slot %d: lineage %s (source %s) pad=%v px:%s %s, the log %s pad=%v px:%s",
							s.Epoch, s.RankName, s.Step, i, x.Key, x.Source, x.Pad, x.Pixels, x.Error, w.key, w.pad, w.px)
					}
				}
				answered++
			}
		}
	}
	want := 0
	for _, cs := range committed {
		want += len(cs)
	}
	if answered != want {
		t.Errorf("lineage matched %d committed steps, committed history has %d", answered, want)
	}
	t.Logf("lineage matched %d committed steps of a cluster mixture (keys, sources, slots, padding, pixel digests)", answered)

	where := map[string][]string{}
	for id, cs := range committed {
		for _, c := range cs {
			for slot, s := range c.samples {
				where[s.key] = append(where[s.key], fmt.Sprintf("%d %s@%s %d %d %v", id.epoch, id.rank, c.session, id.step, slot, s.pad))
			}
		}
	}
	for i := 0; i < len(keys); i += 17 {
		a := ask("--key", keys[i])
		var got []string
		for _, h := range a.Appearances {
			got = append(got, fmt.Sprintf("%d %s@%s %d %d %v", h.Epoch, h.RankName, h.Session, h.Step, h.Slot, h.Pad))
		}
		sort.Strings(got)
		sort.Strings(where[keys[i]])
		if strings.Join(got, "; ") != strings.Join(where[keys[i]], "; ") {
			t.Errorf("--key %s: lineage\n  %s\ncommitted history\n  %s", keys[i], strings.Join(got, "; "), strings.Join(where[keys[i]], "; "))
		}
	}
}
