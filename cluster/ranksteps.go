package cluster

import "fmt"

// RankSteps numbers a rank's batches in the trainer's steps: the
// node-side piece beside RankLeases that turns stream offsets into steps
// and back. RankLeases hands out positions by stream offset, restarting
// at offset 0 in every session; a trainer counts steps per epoch across
// sessions, continuing after its last acknowledged commit. RankSteps
// holds what connects the two, for one rank in one node process life.
//
// A session's stream of an epoch is handed to the pipeline in runs (see
// actors.Work): usually one per epoch, more when the epoch's stream grew
// after the rank moved on (a departed rank's work came back). A run's
// first step is where the epoch's last run of the session ended or, for
// the session's first run of the epoch, the step after the last one
// acknowledged (0 if none): in this process life, or in an earlier one
// whose commits a Welcome hands the session (RankRuns.StartSession). Batch k of a run holds
// its offsets [Base+k*B, Base+(k+1)*B) and is step FirstStep+k.
//
// Pure; not safe for concurrent use.
type RankSteps struct {
	batch int64
	acked map[int]int64 // per epoch: last acknowledged step, any session
	next  map[int]int64 // per epoch: the step the session's next run starts at
	runs  []StepRun     // the session's runs, in the order they opened
	open  bool          // runs[len-1] is open
}

// StepRun is one run of an epoch's stream handed to the pipeline.
type StepRun struct {
	Epoch     int
	FirstStep int64
	Base      int64 // stream offset of the run's first position
	Length    int64 // positions given so far
	Ended     bool
	StreamEnd bool // ended because the rank's stream, as planned, ended
}

// Steps is how many steps the run covers (its last may be short).
func (r StepRun) Steps(batch int64) int64 { return (r.Length + batch - 1) / batch }

// NewRankSteps returns the steps of a rank whose job has batch size
// batch (>= 1).
func NewRankSteps(batch int64) *RankSteps {
	if batch < 1 {
		panic(fmt.Sprintf("cluster: NewRankSteps(%d): need a batch size >= 1", batch))
	}
	return &RankSteps{batch: batch, acked: map[int]int64{}, next: map[int]int64{}}
}

// BatchSize is the job's batch size.
func (s *RankSteps) BatchSize() int64 { return s.batch }

// StartSession forgets the runs of the last session: the new one numbers
// each epoch on from its last acknowledged step.
func (s *RankSteps) StartSession() {
	s.runs, s.open = nil, false
	clear(s.next)
	for e, st := range s.acked {
		s.next[e] = st + 1
	}
}

// Open opens a run of epoch at stream offset base (after ending the open
// one, if any, which must be ended first) and returns its first step.
func (s *RankSteps) Open(epoch int, base int64) int64 {
	if s.open {
		panic("cluster: RankSteps.Open with a run open")
	}
	r := StepRun{Epoch: epoch, FirstStep: s.next[epoch], Base: base}
	s.runs = append(s.runs, r)
	s.open = true
	return r.FirstStep
}

// Current returns the open run; nil if none. The pointer is valid until
// the next Open or StartSession.
func (s *RankSteps) Current() *StepRun {
	if !s.open {
		return nil
	}
	return &s.runs[len(s.runs)-1]
}

// Give records that the open run was given n more positions.
func (s *RankSteps) Give(n int64) { s.Current().Length += n }

// End ends the open run; streamEnd says the epoch's stream, as planned,
// ends with it (its last batch carries EndOfStream). The epoch's next run
// starts at the step after its last.
func (s *RankSteps) End(streamEnd bool) {
	r := s.Current()
	r.Ended, r.StreamEnd = true, streamEnd
	s.next[r.Epoch] = r.FirstStep + r.Steps(s.batch)
	s.open = false
}

// NextStep is the step the session's next run of epoch starts at.
func (s *RankSteps) NextStep(epoch int) int64 { return s.next[epoch] }

// Runs lists the session's runs in the order they opened.
func (s *RankSteps) Runs() []StepRun { return append([]StepRun(nil), s.runs...) }

// Through returns the stream offset just after step of epoch: where a
// trainer's commit of that step leaves the stream (RankLeases.Commit).
// It fails for a step this session has not given the pipeline whole: one
// before the session's first run of the epoch, or past what was given (a
// batch still open counts only once its run ended).
func (s *RankSteps) Through(epoch int, step int64) (int64, error) {
	for _, r := range s.runs {
		if r.Epoch != epoch || step < r.FirstStep {
			continue
		}
		end := (step - r.FirstStep + 1) * s.batch
		if r.Ended {
			if step >= r.FirstStep+r.Steps(s.batch) {
				continue
			}
			end = min(end, r.Length)
		} else if end > r.Length {
			break
		}
		return r.Base + end, nil
	}
	return 0, fmt.Errorf("cluster: step %d of epoch %d was not delivered in this session", step, epoch)
}

// Cuts returns where the session's runs of epoch were cut at or below
// stream offset through: the offsets, ascending, at which a run ended
// with a short batch. Every other batch of the session's stream is a
// full one counted from the run's base, so with them a commit's steps
// are a pure function of the stream (what the coordinator's trail keeps
// for lineage: Trail.Cuts).
func (s *RankSteps) Cuts(epoch int, through int64) []int64 {
	var out []int64
	for _, r := range s.runs {
		if r.Epoch != epoch || !r.Ended || r.Length%s.batch == 0 {
			continue
		}
		if end := r.Base + r.Length; end <= through {
			out = append(out, end)
		}
	}
	return out
}

// Acked records that the trainer's commit of step of epoch was
// acknowledged (in any session of this process life), or that a Welcome
// says the coordinator holds it durable (of an earlier process life). If the session has
// opened no run of epoch yet, its first one starts after step: a commit
// of an earlier session can become durable, and be acknowledged late,
// after the session started (a resent Welcome carries it).
func (s *RankSteps) Acked(epoch int, step int64) {
	if old, ok := s.acked[epoch]; !ok || step > old {
		s.acked[epoch] = step
	}
	for _, r := range s.runs {
		if r.Epoch == epoch {
			return
		}
	}
	s.next[epoch] = max(s.next[epoch], step+1)
}

// LastAcked returns the last acknowledged step of epoch; ok is false if
// none was.
func (s *RankSteps) LastAcked(epoch int) (step int64, ok bool) {
	step, ok = s.acked[epoch]
	return step, ok
}
