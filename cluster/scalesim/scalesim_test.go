package scalesim

import "testing"

// TestScaleSmall runs the scale simulation at a size make test affords,
// with churn high enough that nodes die and come back mid-epoch, and
// checks what Run promises: the job finishes with every sample committed
// exactly once, the journal was written, and the dead nodes' work was
// leased again.
func TestScaleSmall(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Nodes, cfg.RanksPerNode = 64, 4
	cfg.Samples, cfg.Epochs = 300_000, 2
	cfg.Batch, cfg.ShardSize = 32, 64
	cfg.Rate = 40
	cfg.ChurnPerHour = 20 // so a few-minute job sees a dozen kills
	cfg.RestartSeconds = 60
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes × %d ranks, %d samples × %d epochs: %d simulated s, %d kills, %d joins, %d generations (max %d B), %d events, %.0f events/s, reissue max %d s",
		cfg.Nodes, cfg.RanksPerNode, cfg.Samples, cfg.Epochs, rep.SimSeconds, rep.Kills, rep.Joins, rep.Generations, rep.MaxGenBytes,
		rep.Events, rep.EventsPerSecond(), rep.MaxReissueSeconds)
	if rep.Committed != cfg.Samples*int64(cfg.Epochs) {
		t.Errorf("committed %d positions, want %d", rep.Committed, cfg.Samples*int64(cfg.Epochs))
	}
	t.Logf("stats %+v", rep.Stats)
	if rep.Kills == 0 || rep.Returned == 0 {
		t.Errorf("%d kills returned %d positions: the run exercised no failure", rep.Kills, rep.Returned)
	}
	if rep.Generations == 0 || rep.MaxGenBytes == 0 {
		t.Errorf("no journal generation written")
	}
}

// TestScaleLossy runs a small job over a lossy network: every frame
// between the coordinator and a node is lost with LossP, and nodes'
// connections are cut (everything in flight and all that is sent for a
// while, both ways) - with nodes killed as well. The control messages
// ride cluster.Links as the shells carry them. Safety: every sample
// committed exactly once. Liveness with a bound: once faults stop, no
// stretch of RecoverySeconds goes by without a commit acknowledged.
// One seed bounds the links tightly so that cut peers are declared lost
// (the coordinator evicts the node life, the node rejoins as a new one).
func TestScaleLossy(t *testing.T) {
	for _, c := range []struct {
		seed       uint64
		loss       float64
		maxPending int
	}{{1, 0.05, 0}, {2, 0.2, 0}, {3, 0.1, 4}, {4, 0.01, 0}} {
		cfg := DefaultConfig()
		cfg.Seed = c.seed
		cfg.Nodes, cfg.RanksPerNode = 16, 2
		cfg.Samples, cfg.Epochs = 80_000, 2
		cfg.Batch, cfg.ShardSize = 16, 64
		cfg.Rate = 40
		cfg.ChurnPerHour, cfg.RestartSeconds = 20, 60
		cfg.LossP, cfg.CutPerHour, cfg.CutSeconds = c.loss, 30, 20
		cfg.FaultsUntil, cfg.RecoverySeconds = 150, 60
		cfg.LinkMaxPending = c.maxPending
		rep, err := Run(cfg)
		if err != nil {
			t.Fatalf("seed %d: %v", c.seed, err)
		}
		t.Logf("seed %d loss %.2f: %d simulated s, %d frames lost, %d cuts, %d resent, %d peers lost, %d kills, longest stall after faults %d s",
			c.seed, c.loss, rep.SimSeconds, rep.FramesLost, rep.Cuts, rep.Links.Resent, rep.Links.Lost, rep.Kills, rep.MaxStallSeconds)
		if rep.Committed != cfg.Samples*int64(cfg.Epochs) {
			t.Errorf("seed %d: committed %d positions, want %d", c.seed, rep.Committed, cfg.Samples*int64(cfg.Epochs))
		}
		if rep.FramesLost == 0 || rep.Cuts == 0 || rep.Links.Resent == 0 {
			t.Errorf("seed %d: %d frames lost, %d cuts, %d resent: the run exercised no loss", c.seed, rep.FramesLost, rep.Cuts, rep.Links.Resent)
		}
		if c.maxPending > 0 && rep.Links.Lost == 0 {
			t.Errorf("seed %d: no link declared its peer lost at MaxPending %d", c.seed, c.maxPending)
		}
	}
}
