//go:build slurmcheck

// Package slurm_test runs deploy/slurm/longshore.sbatch, unchanged, on a
// real Slurm cluster started on this machine (scripts/slurm-cluster.sh:
// munged, slurmctld, two slurmd with eight gres GPUs each) and checks the
// promise from what the trainers did: every sample of every epoch in
// exactly one committed step of one rank. `make slurm-check` runs it
// (the build tag keeps it out of `go test ./...`, which has no Slurm).
package slurm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	hosts   = 2
	samples = 256
	epochs  = 2
)

func TestSbatch(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	for _, b := range []string{"longshore-node", "longshore-coordinator", "longshore-certs"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s: run make build first (make slurm-check does)", err)
		}
	}
	dir := t.TempDir()
	train := filepath.Join(dir, "go_train")
	if out, err := exec.Command("go", "build", "-o", train, filepath.Join(root, "examples/go_train")).CombinedOutput(); err != nil {
		t.Fatalf("go build examples/go_train: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(root, "scripts/dataset.sh"), strconv.Itoa(samples)).Output()
	if err != nil {
		t.Fatalf("scripts/dataset.sh: %v", err)
	}
	dataset := strings.TrimSpace(string(out))

	// The cluster: its state under a short path (slurmd's socket names).
	cl, err := os.MkdirTemp("", "lsslurm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := exec.Command(filepath.Join(root, "scripts/slurm-cluster.sh"), "stop", cl).CombinedOutput(); err != nil {
			t.Errorf("slurm-cluster.sh stop: %v\n%s", err, b)
		}
		if !t.Failed() {
			os.RemoveAll(cl)
		} else {
			t.Logf("the cluster's logs are in %s/log", cl)
		}
	})
	t0 := time.Now()
	start := exec.Command(filepath.Join(root, "scripts/slurm-cluster.sh"), "start", cl, strconv.Itoa(hosts))
	start.Stderr = os.Stderr
	if _, err := start.Output(); err != nil {
		t.Fatalf("slurm-cluster.sh start: %v", err)
	}
	t.Logf("Slurm up: %d nodes in %v", hosts, time.Since(t0).Round(time.Millisecond))

	rec := filepath.Join(dir, "rec")
	if err := os.MkdirAll(rec, 0o755); err != nil {
		t.Fatal(err)
	}
	jobOut := filepath.Join(dir, "job.out")
	// The backstop only ends a hung job; the job ends on its own.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sb := exec.CommandContext(ctx, "sbatch", "--wait", "--nodes", strconv.Itoa(hosts), "--chdir", dir,
		"--output", jobOut, filepath.Join(root, "deploy/slurm/longshore.sbatch"))
	sb.Env = append(os.Environ(),
		"SLURM_CONF="+filepath.Join(cl, "slurm.conf"),
		"DATASET="+dataset,
		"CHECKPOINT="+filepath.Join(dir, "journal"),
		"BIN="+bin,
		"EPOCHS="+strconv.Itoa(epochs),
		"BATCH_SIZE=4",
		// One trainer a rank: eight a host (the gres GPUs), each
		// recording what it trained and committing every other step.
		"TRAINER="+train+" --steps 1000000 --commit-every 2 --num-classes 10"+
			" --ckpt "+dir+"/ckpt/$RANK --record "+rec+"/$RANK.jsonl",
	)
	t1 := time.Now()
	b, err := sb.CombinedOutput()
	job, _ := os.ReadFile(jobOut)
	if err != nil {
		t.Fatalf("sbatch --wait: %v\n%s\n--- the job's output:\n%s", err, b, tail(string(job), 60))
	}
	t.Logf("the job ran in %v: %s", time.Since(t1).Round(time.Millisecond), strings.TrimSpace(string(b)))
	t.Logf("--- the job's output (last lines):\n%s", tail(string(job), 15))

	// The job dir of keys is removed at the end; the feed dirs too.
	if left, _ := filepath.Glob(filepath.Join(dir, ".longshore-job-*")); len(left) > 0 {
		t.Errorf("the job's keys were left behind: %v", left)
	}

	world := hosts * 8
	seen := make([]map[string]int, epochs)
	for e := range seen {
		seen[e] = map[string]int{}
	}
	for r := 0; r < world; r++ {
		for _, h := range committed(t, filepath.Join(rec, strconv.Itoa(r)+".jsonl")) {
			if h.Epoch < 0 || h.Epoch >= epochs {
				t.Errorf("rank %d: epoch %d", r, h.Epoch)
				continue
			}
			for _, k := range h.Keys {
				seen[h.Epoch][k]++
			}
		}
	}
	for e, s := range seen {
		if len(s) != samples {
			t.Errorf("epoch %d: %d distinct samples in committed history, want %d", e, len(s), samples)
		}
		bad := 0
		for k, n := range s {
			if _, err := os.Stat(filepath.Join(dataset, k)); err != nil {
				t.Errorf("epoch %d: %s is not in the dataset", e, k)
			}
			if n != 1 {
				if bad++; bad <= 10 {
					t.Errorf("epoch %d: %s in committed history %d times", e, k, n)
				}
			}
		}
	}
	t.Logf("exactly once: %d epochs × %d samples over %d ranks on %d hosts", epochs, samples, world, hosts)
}

type event struct {
	Ev    string   `json:"ev"`
	Epoch int      `json:"epoch"`
	Step  int64    `json:"step"`
	Keys  []string `json:"keys"`
}

// committed replays a trainer's record: batches trained, cut back to the
// last commit at each rollback and at the end; it must reach the end.
func committed(t *testing.T, path string) []event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Errorf("rank record: %v", err)
		return nil
	}
	defer f.Close()
	var hist []event
	kept, ended := 0, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		switch e.Ev {
		case "batch":
			hist = append(hist, e)
		case "ack":
			kept = len(hist)
		case "rollback":
			hist = hist[:kept]
		case "end":
			ended = true
		}
	}
	if !ended {
		t.Errorf("%s: the trainer did not reach the end of the job", path)
	}
	return hist[:kept]
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
