package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster/journal"
)

// The feed restart test runs a node with --sink feed and a real trainer
// process (examples/go_train) on its rank's socket, kills the coordinator
// with SIGKILL mid-epoch and starts it again with the same flags. The
// promise is checked from what the trainer recorded (go_train --record):
// every rollback names its last acknowledged commit, and every sample is
// in exactly one committed step of each epoch of the model's history.

var (
	trainerOnce sync.Once
	trainerBin  string
	trainerErr  error
)

// goTrainer builds examples/go_train once, beside the cluster binaries.
func goTrainer(t *testing.T) string {
	t.Helper()
	binaries(t) // makes binDir
	trainerOnce.Do(func() {
		trainerBin = filepath.Join(binDir, "go_train")
		if out, err := exec.Command("go", "build", "-o", trainerBin, "../examples/go_train").CombinedOutput(); err != nil {
			trainerErr = fmt.Errorf("go build ../examples/go_train: %v\n%s", err, out)
		}
	})
	if trainerErr != nil {
		t.Fatal(trainerErr)
	}
	return trainerBin
}

// trainerEvent is a line of go_train --record.
type trainerEvent struct {
	Ev        string   `json:"ev"`
	Epoch     int      `json:"epoch"`
	Step      int64    `json:"step"`
	Keys      []string `json:"keys"`
	Token     string   `json:"token"`
	Committed bool     `json:"committed"`
}

func readTrainerRecord(t *testing.T, path string) []trainerEvent {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []trainerEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e trainerEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil { // a torn last line is skipped
			evs = append(evs, e)
		}
	}
	return evs
}

// checkTrainerRecord replays a trainer's record as its model: batches
// trained, cut back to the last acknowledged commit at each rollback. It
// reports the acks and rollbacks seen.
func checkTrainerRecord(t *testing.T, evs []trainerEvent, keys []string, epochs int) (acks, rollbacks int) {
	t.Helper()
	type trained struct {
		epoch int
		step  int64
		keys  []string
	}
	var (
		hist      []trained
		committed int
		last      *trainerEvent
	)
	for i, e := range evs {
		switch e.Ev {
		case "batch":
			hist = append(hist, trained{e.Epoch, e.Step, e.Keys})
		case "ack":
			if _, err := journal.ParseToken(e.Token); err != nil {
				t.Errorf("ack %d: %v", acks, err)
			}
			committed, last = len(hist), &evs[i]
			acks++
		case "rollback":
			rollbacks++
			switch {
			case last == nil && e.Committed:
				t.Errorf("rollback to epoch %d step %d, but nothing was acknowledged", e.Epoch, e.Step)
			case last != nil && (!e.Committed || e.Epoch != last.Epoch || e.Step != last.Step || e.Token != last.Token):
				t.Errorf("rollback to %+v, but the last ack was epoch %d step %d token %s", e, last.Epoch, last.Step, last.Token)
			}
			hist = hist[:committed]
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].Ev != "end" {
		t.Fatalf("the trainer did not reach the end of the job")
	}
	if committed != len(hist) {
		t.Errorf("%d batches trained after the last commit", len(hist)-committed)
	}
	next := map[int]int64{}
	for _, h := range hist {
		if h.step != next[h.epoch] {
			t.Errorf("epoch %d: step %d follows step %d in the model's history", h.epoch, h.step, next[h.epoch]-1)
		}
		next[h.epoch] = h.step + 1
	}
	for ep := range epochs {
		seen := map[string]int{}
		for _, h := range hist {
			if h.epoch == ep {
				for _, k := range h.keys {
					seen[k]++
				}
			}
		}
		bad := 0
		for _, k := range keys {
			if seen[k] != 1 {
				if bad++; bad <= 10 {
					t.Errorf("epoch %d: %s in committed history %d times", ep, k, seen[k])
				}
			}
			delete(seen, k)
		}
		for k := range seen {
			t.Errorf("epoch %d: %s is not in the dataset", ep, k)
		}
	}
	return acks, rollbacks
}

// TestFeedRestartCoordinator: a node serving its rank to a go_train
// process over the feed; kill -9 the coordinator after a few acks and
// start it again. The trainer gets a rollback naming its last
// acknowledged commit, restores that checkpoint and trains to the end of
// the job; exactly once in committed history.
func TestFeedRestartCoordinator(t *testing.T) {
	dir, keys := makeDataset(t, 480)
	trainer := goTrainer(t)
	j := job{dataset: dir, epochs: 2, batch: 8, shard: 16, balance: "equal", commit: 2, minRanks: 1,
		extraCoord: []string{"--checkpoint", filepath.Join(t.TempDir(), "journal"), "--journal-keep", "100000"}}
	c := startCluster(t, j)
	feedDir := filepath.Join(c.dir, "feed")
	c.addNode("--ranks", "1", "--sink", "feed", "--feed-dir", feedDir)
	sock := filepath.Join(feedDir, "rank-0.sock")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node opened no feed socket:\n%s", tail(c.nodes[0].stderr, 30))
		}
	}
	record := filepath.Join(c.dir, "trainer.jsonl")
	tr := startProc(t, c.dir, "trainer", trainer, nil, "--socket", sock, "--record", record,
		"--ckpt", filepath.Join(c.dir, "ckpt"), "--commit-every", "3", "--steps", "1000000", "--num-classes", "3")
	started := time.Now()
	acks := func() int {
		n := 0
		for _, e := range readTrainerRecord(t, record) {
			if e.Ev == "ack" {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(time.Minute); acks() < 3; time.Sleep(10 * time.Millisecond) {
		select {
		case <-tr.done:
			t.Fatalf("trainer exited early (%v):\n%s", tr.err, tail(tr.stderr, 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trainer has no 3 acks after a minute:\n%s", tail(tr.stderr, 30))
		}
	}
	c.coord.kill(t)
	killed := time.Since(started)
	c.restartCoordinator()
	if err := tr.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("trainer: %v\n%s", err, tail(tr.stderr, 30))
	}
	c.finish()
	evs := readTrainerRecord(t, record)
	nacks, rollbacks := checkTrainerRecord(t, evs, keys, j.epochs)
	if rollbacks == 0 {
		t.Errorf("the trainer saw no rollback after the coordinator's kill -9")
	}
	var rb trainerEvent
	for _, e := range evs {
		if e.Ev == "rollback" {
			rb = e
			break
		}
	}
	t.Logf("coordinator kill -9 %.2f s into the job; first rollback to epoch %d step %d; %d acks, %d rollback(s); job done %.2f s after start",
		killed.Seconds(), rb.Epoch, rb.Step, nacks, rollbacks, time.Since(started).Seconds())
}
