package node

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

func useNothing(*actors.Config, *actors.Deps) error { return nil }

// TestAssemble: the assembly gives every pipeline one actor system and
// the quarantine, runs the media's decoder setup on the config, and
// refuses what it cannot build.
func TestAssemble(t *testing.T) {
	q := filepath.Join(t.TempDir(), "q.jsonl")
	cfg := AssemblyConfig{Ranks: 2, Pipeline: actors.DefaultConfig(), Deps: actors.Deps{Store: storage.NewMemStore("m")}, Quarantine: q,
		UseDecoder: func(c *actors.Config, d *actors.Deps) error { c.BatchSize = 7; return nil }}
	a, err := Assemble(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.Deps.System == nil || a.Deps.OnFailure == nil || a.Quarantine == nil || a.Pipeline.BatchSize != 7 {
		t.Errorf("assembly: system %v, quarantine %v, batch %d; want a system, the quarantine recording, the decoder's config", a.Deps.System, a.Quarantine, a.Pipeline.BatchSize)
	}
	a.Deps.OnFailure(actors.Failure{Key: "bad.jpg", Stage: actors.StageDecode, Class: "corrupt"})
	if n, err := a.Close(); n != 1 || err != nil {
		t.Errorf("Close: %d quarantined, %v; want 1", n, err)
	}
	cfg.Quarantine = ""
	if a, err := Assemble(cfg); err != nil || a.Deps.OnFailure != nil {
		t.Errorf("no quarantine: OnFailure set (%v)", err)
	} else {
		a.Close()
	}
	cfg.UseDecoder = func(*actors.Config, *actors.Deps) error { return errors.New("no such decoder") }
	if _, err := Assemble(cfg); err == nil {
		t.Error("a decoder setup that fails: assembled")
	}
	cfg.UseDecoder, cfg.Ranks = useNothing, 0
	if _, err := Assemble(cfg); err == nil {
		t.Error("0 ranks: assembled")
	}
}

// TestClusterConfig: the cluster source shares the node's decoders out
// among its ranks and applies the job's order and store budget to the
// dataset's store before the caller's callbacks.
func TestClusterConfig(t *testing.T) {
	inner := &budgeted{Store: storage.NewMemStore("s3-like")}
	ps, err := dataset.NewPackedStore(storage.NewCountingStore(inner), &dataset.Dataset{}, dataset.PackedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pc := actors.DefaultConfig()
	pc.Decoders = 8
	a, err := Assemble(AssemblyConfig{Ranks: 4, Pipeline: pc, Deps: actors.Deps{Store: ps}, UseDecoder: useNothing})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var jobs []Job
	var budgets []float64
	c := a.ClusterConfig(Config{Node: "n", OnJob: func(j Job) {
		if ps.Block() != j.Block {
			t.Errorf("the caller's OnJob before the store adopted the job's block")
		}
		jobs = append(jobs, j)
	}, OnStoreBudget: func(rps float64) { budgets = append(budgets, rps) }}, 0, func() string { return "detail" })
	if c.Ranks != 4 || c.Pipeline.Decoders != 2 || c.Deps.System == nil {
		t.Errorf("config: %d ranks, %d decoders a rank; want 4, 2 (8 shared out)", c.Ranks, c.Pipeline.Decoders)
	}
	c.OnJob(Job{Block: 128, Window: 4})
	if ps.Block() != 128 || ps.Window() != 4 || len(jobs) != 1 {
		t.Errorf("after the job: block %d, window %d, %d jobs passed on; want 128, 4, 1", ps.Block(), ps.Window(), len(jobs))
	}
	c.OnStoreBudget(25)
	c.OnStoreBudget(25)
	if len(inner.got) != 1 || inner.got[0] != 25 || len(budgets) != 2 {
		t.Errorf("store budgets applied %v, passed on %v; want [25] applied once, both passed on", inner.got, budgets)
	}
}
