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
