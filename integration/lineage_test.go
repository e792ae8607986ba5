package integration

import (
	"bytes"
	"context"
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

	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/storage"
)

// lineageAnswer is the part of longshore-lineage --json the lineage
// tests read.
type lineageAnswer struct {
	Job struct {
		Mode       string `json:"mode"`
		Generation uint64 `json:"generation"`
		Mixture    *struct {
			Sources []struct{ Name string } `json:"sources"`
		} `json:"mixture"`
	} `json:"job"`
	Steps       []lineageStep `json:"steps"`
	Appearances []struct {
		Epoch    int    `json:"epoch"`
		RankName string `json:"rank_name"`
		Session  string `json:"session"`
		Step     int64  `json:"step"`
		Slot     int    `json:"slot"`
		Pad      bool   `json:"pad"`
	} `json:"appearances"`
	// UntracedEpochs: the epochs of a --key question with committed
	// positions in no trail (where the key's places are not answered).
	UntracedEpochs []json.RawMessage `json:"untraced_epochs"`
}

// lineageStep is one step of a lineage answer.
type lineageStep struct {
	Epoch     int             `json:"epoch"`
	RankName  string          `json:"rank_name"`
	Session   string          `json:"session"`
	Step      int64           `json:"step"`
	Uncertain bool            `json:"uncertain"`
	Samples   []lineageSample `json:"samples"`
}

// lineageSample is one slot of a lineage step.
type lineageSample struct {
	Slot   int    `json:"slot"`
	Key    string `json:"key"`
	Source string `json:"source"`
	Pad    bool   `json:"pad"`
	Pixels string `json:"pixels"`
	Crop   *struct{ X, Y, W, H int }
	Error  string `json:"error"`
}

// lineageAt is a step of committed history: its epoch, rank and number.
type lineageAt struct {
	epoch int
	rank  string
	step  int64
}

// committedStep is a committed step's session and samples (a step can be
// committed by more than one session).
type committedStep struct {
	session string
	samples []sample
}

// committedHistory is h's committed history: each committed step's
// sessions and samples, and per epoch each rank's largest committed step.
func committedHistory(h *history) (committed map[lineageAt][]committedStep, last map[int]map[string]int64) {
	committed = map[lineageAt][]committedStep{}
	last = map[int]map[string]int64{}
	for k, ss := range h.delivered {
		if a, ok := h.acked[k.sessionEpoch]; !ok || k.step > a {
			continue
		}
		id := lineageAt{k.epoch, k.rank, k.step}
		committed[id] = append(committed[id], committedStep{k.session, ss})
		if last[k.epoch] == nil {
			last[k.epoch] = map[string]int64{}
		}
		last[k.epoch][k.rank] = max(last[k.epoch][k.rank], k.step)
	}
	return committed, last
}

// lineageAsker runs bin with the job's flags and args, and decodes its
// --json answer.
func lineageAsker(t *testing.T, bin string, job []string) func(args ...string) lineageAnswer {
	return func(args ...string) lineageAnswer {
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
}

// lineageSteps compares the steps a lineage answer holds with committed
// history: each must be a step committed by its session (stepOK, if
// set, checks more of it), with the log's samples slot by slot: the same
// keys, padding and pixel digests, no error, and what sampleOK says. It
// counts the steps answered for each place in got and returns how many
// matched.
func lineageSteps(t *testing.T, committed map[lineageAt][]committedStep, steps []lineageStep, got map[lineageAt]int,
	stepOK func(lineageStep), sampleOK func(lineageSample) bool) int {
	t.Helper()
	matched := 0
	for _, s := range steps {
		id := lineageAt{s.Epoch, s.RankName, s.Step}
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
		if stepOK != nil {
			stepOK(s)
		}
		if len(s.Samples) != len(want.samples) {
			t.Errorf("epoch %d rank %s step %d: lineage has %d samples, the log %d", s.Epoch, s.RankName, s.Step, len(s.Samples), len(want.samples))
			continue
		}
		for i, x := range s.Samples {
			w := want.samples[i]
			if x.Key != w.key || x.Pad != w.pad || x.Pixels != w.px || x.Error != "" || !sampleOK(x) {
				t.Errorf("epoch %d rank %s step %d slot %d: lineage %s (source %q) pad=%v px:%s crop %v %s, the log %s pad=%v px:%s",
					s.Epoch, s.RankName, s.Step, i, x.Key, x.Source, x.Pad, x.Pixels, x.Crop, x.Error, w.key, w.pad, w.px)
			}
		}
		matched++
	}
	return matched
}

// lineageAnsweredAll checks that answered, the steps lineage matched, are
// all of committed history's.
func lineageAnsweredAll(t *testing.T, committed map[lineageAt][]committedStep, answered int) {
	t.Helper()
	want := 0
	for _, cs := range committed {
		want += len(cs)
	}
	if answered != want {
		t.Errorf("lineage matched %d committed steps, committed history has %d", answered, want)
	}
}

// lineageKeys checks --key for every stride-th of keys: lineage must
// name every place the key has in committed history, and no other.
func lineageKeys(t *testing.T, committed map[lineageAt][]committedStep, keys []string, stride int, ask func(args ...string) lineageAnswer) {
	t.Helper()
	where := map[string][]string{}
	for id, cs := range committed {
		for _, c := range cs {
			for slot, s := range c.samples {
				where[s.key] = append(where[s.key], fmt.Sprintf("%d %s@%s %d %d %v", id.epoch, id.rank, c.session, id.step, slot, s.pad))
			}
		}
	}
	for i := 0; i < len(keys); i += stride {
		a := ask("--key", keys[i])
		if len(a.UntracedEpochs) > 0 {
			t.Errorf("--key %s: untraced epochs %s; want every committed position in a trail", keys[i], a.UntracedEpochs)
		}
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
	committed, ranks := committedHistory(h) // ranks: epoch -> rank -> largest committed step
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
	ask := lineageAsker(t, bin, []string{"--checkpoint", journalDir, "--dataset", dir, "--transform", "train", "--size", "16", "--json"})

	answered := 0
	for e := range 2 {
		for rank, last := range ranks[e] {
			a := ask("--epoch", strconv.Itoa(e), "--rank", rank, "--steps", "0-"+strconv.FormatInt(last, 10))
			if a.Job.Mode != "cluster" {
				t.Fatalf("job mode %q, want cluster", a.Job.Mode)
			}
			got := map[lineageAt]int{}
			answered += lineageSteps(t, committed, a.Steps, got, func(s lineageStep) {
				if s.Uncertain {
					// Never the case here: every stream end's commit
					// reached the coordinator. Said, not hidden.
					t.Errorf("epoch %d rank %s step %d is marked uncertain", s.Epoch, s.RankName, s.Step)
				}
			}, func(x lineageSample) bool { return x.Crop != nil })
			for id, cs := range committed {
				if id.epoch == e && id.rank == rank && got[id] != len(cs) {
					t.Errorf("epoch %d rank %s step %d: lineage answers it %d time(s), committed history holds it %d", id.epoch, id.rank, id.step, got[id], len(cs))
				}
			}
		}
	}
	lineageAnsweredAll(t, committed, answered)
	t.Logf("lineage matched %d committed steps (keys, slots, padding, pixel digests)", answered)

	// A real query's text, for the record.
	out, err := exec.Command(bin, "--checkpoint", journalDir, "--dataset", dir, "--transform", "train", "--size", "16",
		"--epoch", "0", "--rank", "n2/0", "--steps", "0-1").CombinedOutput()
	if err != nil {
		t.Fatalf("text query: %v\n%s", err, out)
	}
	t.Logf("longshore-lineage --checkpoint JOURNAL --dataset DIR --transform train --size 16 --epoch 0 --rank n2/0 --steps 0-1:\n%s", out)

	// The reverse: every 8th key, each place in committed history.
	lineageKeys(t, committed, keys, 8, ask)

	// The nodes said where they cut their runs, over the wire and into
	// the journal: no step of any trail can be uncertain.
	journalTrailsTold(t, journalDir, 2)
	// The summary says so, and that every committed position of both
	// epochs is in a trail (the coordinator's restart loses none).
	journalSummaryTraced(t, bin, journalDir, 2)
}

// journalSummaryTraced checks that longshore-lineage --checkpoint's
// summary says, for each of the journal's first epochs, that each of its
// trails carries its node's cuts and that its trails hold every
// committed position.
func journalSummaryTraced(t *testing.T, bin, journalDir string, epochs int) {
	t.Helper()
	out, err := exec.Command(bin, "--checkpoint", journalDir, "--json").Output()
	if err != nil {
		t.Fatalf("longshore-lineage --checkpoint --json: %v", err)
	}
	var sum struct {
		Epochs []struct {
			Epoch       int   `json:"epoch"`
			Sessions    int   `json:"sessions"`
			WithCuts    int   `json:"trails_with_cuts"`
			WithoutCuts int   `json:"trails_without_cuts"`
			Untraced    int64 `json:"untraced"`
			Committed   int64 `json:"committed"`
		} `json:"epochs"`
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(sum.Epochs) < epochs {
		t.Fatalf("summary of %d epochs, want %d:\n%s", len(sum.Epochs), epochs, out)
	}
	for _, e := range sum.Epochs[:epochs] {
		if e.Sessions <= 0 || e.WithCuts != e.Sessions || e.WithoutCuts != 0 || e.Untraced != 0 || e.Committed == 0 {
			t.Errorf("summary of epoch %d: %+v; want every trail with cuts and no committed position untraced", e.Epoch, e)
		}
	}
}

// journalTrailsTold checks that every trail of the journal's first
// epochs says where its node cut its runs (cluster.Trail.CutsTold).
func journalTrailsTold(t *testing.T, journalDir string, epochs int) {
	t.Helper()
	ctx := context.Background()
	st, err := storage.NewDirStore(journalDir)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(ctx, journal.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	e, err := j.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ep := range epochs {
		ts, err := j.Trails(ctx, e, ep)
		if err != nil {
			t.Fatalf("epoch %d: %v", ep, err)
		}
		for _, tr := range ts {
			n++
			if !tr.CutsTold {
				t.Errorf("epoch %d: the trail of %s session %v does not say where its node cut its runs", ep, tr.Rank, tr.Session)
			}
		}
	}
	if n == 0 {
		t.Error("the journal holds no trails")
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
