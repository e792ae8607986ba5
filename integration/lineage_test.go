package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// lineageAnswer is the part of longshore-lineage --json this test reads.
type lineageAnswer struct {
	Job struct {
		Mode       string `json:"mode"`
		Generation uint64 `json:"generation"`
	} `json:"job"`
	Steps []struct {
		Epoch     int    `json:"epoch"`
		RankName  string `json:"rank_name"`
		Session   string `json:"session"`
		Step      int64  `json:"step"`
		Uncertain bool   `json:"uncertain"`
		Samples   []struct {
			Slot   int    `json:"slot"`
			Key    string `json:"key"`
			Pad    bool   `json:"pad"`
			Pixels string `json:"pixels"`
			Crop   *struct{ X, Y, W, H int }
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

// TestLineageClusterMatchesDeliveryLog: a cluster job (2 nodes of 2
// ranks, equal steps, commits every 2 steps, the train transform's random
// crops, --log-pixels) has a node killed and started again in epoch 0
// and its coordinator killed and restarted in epoch 1. Then
// longshore-lineage, given the job's journal (--checkpoint) and the
// node's decode flags only, must answer for every (epoch, rank) exactly
// the steps of committed history, each with the session that delivered
// it, the same keys in the same slots, the same padding and the same
// pixel digests as the delivery logs; and --key must find every place a
// key appeared in committed history, and no other.
func TestLineageClusterMatchesDeliveryLog(t *testing.T) {
	dir, keys := makeDataset(t, 480)
	journalDir := filepath.Join(t.TempDir(), "journal")
	c := startCluster(t, restartJob(dir, 2, journalDir))
	decodeFlags := []string{"--transform", "train", "--size", "16", "--log-pixels"}
	c.addNode(decodeFlags...)
	c.addNode(decodeFlags...)
	c.midEpoch()
	victim := c.nodes[1]
	victim.kill(t)
	c.restartNode(1)
	// Into epoch 1, then the coordinator dies and comes back.
	waitLines(t, c.nodeLogs[0], regexp.MustCompile(`(?m)^1\tn1/0\t2\t`), 1, 2*time.Minute)
	c.coord.kill(t)
	c.restartCoordinator()
	c.finish(victim)
	h := c.history(keys)
	c.checkLives(h, 2)

	// Committed history from the logs: per (epoch, rank), each committed
	// step's session and samples.
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
	ranks := map[int]map[string]int64{} // epoch -> rank -> largest committed step
	for k, ss := range h.delivered {
		if a, ok := h.acked[k.sessionEpoch]; !ok || k.step > a {
			continue
		}
		id := at{k.epoch, k.rank, k.step}
		committed[id] = append(committed[id], committedStep{k.session, ss})
		if ranks[k.epoch] == nil {
			ranks[k.epoch] = map[string]int64{}
		}
		ranks[k.epoch][k.rank] = max(ranks[k.epoch][k.rank], k.step)
	}
	sessions := map[string]bool{}
	for k := range h.acked {
		sessions[k.rank+"@"+k.session] = true
	}
	twice := 0
	for _, cs := range committed {
		if len(cs) > 1 {
			twice++
		}
	}
	t.Logf("committed history: %d (epoch, rank, step)s over %d rank sessions", len(committed), len(sessions))
	if twice > 0 {
		// A trainer's steps of an epoch go on across sessions, a restarted
		// node's included (docs/feed-protocol.md, "Steps").
		t.Errorf("%d (epoch, rank, step)s committed by two sessions: the restarted node numbered its steps again", twice)
	}

	bin := lineageBinary(t)
	job := []string{"--checkpoint", journalDir, "--dataset", dir, "--transform", "train", "--size", "16", "--json"}
	ask := func(args ...string) lineageAnswer {
		t.Helper()
		cmd := exec.Command(bin, append(append([]string(nil), job...), args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("longshore-lineage %s: %v\n%s", strings.Join(args, " "), err, errb.String())
		}
		var a lineageAnswer
		if err := json.Unmarshal(out.Bytes(), &a); err != nil {
			t.Fatalf("longshore-lineage %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return a
	}

	answered := 0
	for e := range 2 {
		for rank, last := range ranks[e] {
			a := ask("--epoch", strconv.Itoa(e), "--rank", rank, "--steps", "0-"+strconv.FormatInt(last, 10))
			if a.Job.Mode != "cluster" {
				t.Fatalf("job mode %q, want cluster", a.Job.Mode)
			}
			got := map[at]int{}
			for _, s := range a.Steps {
				id := at{s.Epoch, s.RankName, s.Step}
				got[id]++
				var want *committedStep
				for i, cs := range committed[id] {
					if cs.session == s.Session {
						want = &committed[id][i]
					}
				}
				if want == nil {
					t.Errorf("lineage answers epoch %d rank %s step %d of session %s, which committed history does not hold (%d there)", s.Epoch, s.RankName, s.Step, s.Session, len(committed[id]))
					continue
				}
				if s.Uncertain {
					// Never the case here: every stream end's commit
					// reached the coordinator. Said, not hidden.
					t.Errorf("epoch %d rank %s step %d is marked uncertain", s.Epoch, s.RankName, s.Step)
				}
				if len(s.Samples) != len(want.samples) {
					t.Errorf("epoch %d rank %s step %d: lineage has %d samples, the log %d", s.Epoch, s.RankName, s.Step, len(s.Samples), len(want.samples))
					continue
				}
				for i, x := range s.Samples {
					w := want.samples[i]
					if x.Key != w.key || x.Pad != w.pad || x.Pixels != w.px || x.Error != "" || x.Crop == nil {
						t.Errorf("epoch %d rank %s step %d slot %d: lineage %s pad=%v px:%s crop %v %s, the log %s pad=%v px:%s",
							s.Epoch, s.RankName, s.Step, i, x.Key, x.Pad, x.Pixels, x.Crop, x.Error, w.key, w.pad, w.px)
					}
				}
				answered++
			}
			for id, cs := range committed {
				if id.epoch == e && id.rank == rank && got[id] != len(cs) {
					t.Errorf("epoch %d rank %s step %d: lineage answers it %d time(s), committed history holds it %d", id.epoch, id.rank, id.step, got[id], len(cs))
				}
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
	t.Logf("lineage matched %d committed steps (keys, slots, padding, pixel digests)", answered)

	// A real query's text, for the record.
	out, err := exec.Command(bin, "--checkpoint", journalDir, "--dataset", dir, "--transform", "train", "--size", "16",
		"--epoch", "0", "--rank", "n2/0", "--steps", "0-1").CombinedOutput()
	if err != nil {
		t.Fatalf("text query: %v\n%s", err, out)
	}
	t.Logf("longshore-lineage --checkpoint JOURNAL --dataset DIR --transform train --size 16 --epoch 0 --rank n2/0 --steps 0-1:\n%s", out)

	// The reverse: every 8th key, each place in committed history.
	where := map[string][]string{}
	for id, cs := range committed {
		for _, c := range cs {
			for slot, s := range c.samples {
				where[s.key] = append(where[s.key], fmt.Sprintf("%d %s@%s %d %d %v", id.epoch, id.rank, c.session, id.step, slot, s.pad))
			}
		}
	}
	for i := 0; i < len(keys); i += 8 {
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

// lineageBinary builds longshore-lineage once per test binary, beside the
// coordinator and the node.
func lineageBinary(t *testing.T) string {
	t.Helper()
	binaries(t)
	bin := filepath.Join(binDir, "longshore-lineage")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/longshore-lineage").CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/longshore-lineage: %v\n%s", err, out)
	}
	return bin
}
