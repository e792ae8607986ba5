package cluster

import (
	"errors"
	"fmt"
)

// State is the coordinator's durable state: what a restarted coordinator
// needs so that nothing committed is issued again and nothing uncommitted
// is lost. It is O(leases) at worst and usually O(ranks) per open epoch:
// per epoch, the committed positions as merged ranges. Leases and
// sessions are not in it: a new incarnation fences them all, and the
// work they held (uncommitted by definition) goes back to the pool.
//
// Plain exported fields, so the journal can encode it as it likes.
type State struct {
	// Incarnation is the life that wrote the state; Seq its last fence.
	Incarnation uint64
	Seq         uint64
	// Samples, Seed, Block and Window identify the job: Restore refuses
	// a state whose dataset or order differ from the configuration's.
	// Window 0 (a state from before windows) is the order without them,
	// as is any window with Block 1.
	Samples int64
	Seed    uint64
	Block   int
	Window  int
	// Epochs lists every started epoch, by number.
	Epochs []EpochState
}

// EpochState is one started epoch's durable state.
type EpochState struct {
	Complete bool
	// Committed are the real positions committed, merged and sorted.
	// Empty once Complete.
	Committed []Range
	// Dropped are the positions DropRemainder removed from the epoch.
	Dropped []Range
	// Commits are the ranks' last commits in the epoch, one per rank
	// name, sorted by it: kept while the epoch is open and, for the epoch
	// that completed last, after (see RankCommit).
	Commits []RankCommit
	// Trails are what each rank session committed of the epoch, sorted
	// by rank and session (see Trail): kept while the epoch is open and,
	// for the epoch that completed last, after (as Commits).
	Trails []Trail
}

// Snapshot returns the durable state. It costs O(leases of open epochs).
func (c *Coordinator) Snapshot() State {
	s := State{
		Incarnation: c.cfg.Incarnation, Seq: c.seq,
		Samples: c.cfg.Samples, Seed: c.cfg.Seed, Block: c.cfg.Block, Window: c.cfg.Window,
		Epochs: make([]EpochState, len(c.epochs)),
	}
	for i, ep := range c.epochs {
		es := &s.Epochs[i]
		es.Complete = ep.complete
		es.Dropped = append([]Range(nil), ep.dropped...)
		es.Commits = c.commitsOf(ep)
		if !ep.complete || len(ep.trails) > 0 {
			es.Trails = c.trailsOf(ep)
		}
		if ep.complete {
			continue
		}
		cr := append([]Range(nil), ep.departedCommitted...)
		for _, r := range c.rankOrder {
			if st := r.streams[ep.n]; st != nil {
				cr = append(cr, st.committedRanges()...)
			}
		}
		es.Committed = mergeRanges(cr)
	}
	return s
}

// ErrState is wrapped by Restore's errors: the state does not fit the
// configuration or contradicts itself.
var ErrState = errors.New("cluster: unusable state")

// Restore returns a coordinator that continues from s in a new life: its
// incarnation is above s's, so every session and lease of the old life is
// fenced. Nodes must rejoin; the epochs' uncommitted positions are issued
// again, and EqualSteps quotas are planned afresh for the ranks that join
// (the order does not depend on them, so any number will do).
func Restore(cfg Config, s State) (*Coordinator, error) {
	if cfg.Incarnation <= s.Incarnation {
		cfg.Incarnation = s.Incarnation + 1
	}
	c, err := NewCoordinator(cfg)
	if err != nil {
		return nil, err
	}
	sw, cw := EffectiveWindow(s.Block, s.Window), EffectiveWindow(cfg.Block, cfg.Window)
	if s.Samples != cfg.Samples || s.Seed != cfg.Seed || s.Block != cfg.Block || sw != cw {
		return nil, fmt.Errorf("%w: state is for samples=%d seed=%d block=%d window=%d, config says %d, %d, %d, %d",
			ErrState, s.Samples, s.Seed, s.Block, sw, cfg.Samples, cfg.Seed, cfg.Block, cw)
	}
	if len(s.Epochs) > cfg.Epochs {
		return nil, fmt.Errorf("%w: %d epochs started, config has %d", ErrState, len(s.Epochs), cfg.Epochs)
	}
	for n, es := range s.Epochs {
		ep := &epoch{n: n, complete: es.Complete}
		c.placeGrid(ep)
		c.epochs = append(c.epochs, ep)
		ep.dropped = append([]Range(nil), es.Dropped...)
		for _, r := range es.Dropped {
			ep.dropN += r.Len()
		}
		if err := ep.restoreCommits(es.Commits); err != nil {
			return nil, err
		}
		if err := ep.restoreTrails(es.Trails); err != nil {
			return nil, err
		}
		if es.Complete {
			if len(es.Commits) > 0 {
				if c.lastClosed >= 0 {
					c.epochs[c.lastClosed].commits = nil
					c.unpersisted = append(c.unpersisted, c.lastClosed)
				}
				c.lastClosed = n
			}
			c.completed++
			if c.firstOpen == n {
				c.firstOpen++
			}
			continue
		}
		taken := append(append([]Range(nil), es.Committed...), es.Dropped...)
		var sum int64
		for _, r := range taken {
			if r.Start < 0 || r.End > cfg.Samples || r.Len() <= 0 {
				return nil, fmt.Errorf("%w: epoch %d range %v outside [0, %d)", ErrState, n, r, cfg.Samples)
			}
			sum += r.Len()
		}
		taken = mergeRanges(taken)
		var merged int64
		next := int64(0)
		for _, r := range taken {
			merged += r.Len()
			ep.pool.add(Range{next, r.Start})
			next = r.End
		}
		ep.pool.add(Range{next, cfg.Samples})
		if merged != sum {
			return nil, fmt.Errorf("%w: epoch %d has overlapping committed or dropped ranges", ErrState, n)
		}
		ep.departedCommitted = append([]Range(nil), es.Committed...)
		for _, r := range es.Committed {
			ep.departedCommittedN += r.Len()
		}
		ep.committedN = ep.departedCommittedN
		c.checkComplete(ep)
	}
	return c, nil
}

// EpochStatus describes one epoch, for tests, metrics and logs.
type EpochStatus struct {
	Started, Complete bool
	Members           int   // live ranks with a stream in the epoch
	Quota             int64 // EqualSteps: each member's stream length
	Unleased          int64 // positions in the pool
	Committed         int64 // real positions committed
	Dropped           []Range
	Padding           int64 // padding positions issued
}

// Epoch returns the status of epoch n.
func (c *Coordinator) Epoch(n int) EpochStatus {
	if n < 0 || n >= len(c.epochs) {
		return EpochStatus{}
	}
	ep := c.epochs[n]
	return EpochStatus{
		Started: true, Complete: ep.complete, Members: c.members(ep), Quota: ep.quota,
		Unleased: ep.pool.len(), Committed: ep.committedN,
		Dropped: append([]Range(nil), ep.dropped...), Padding: ep.padNext,
	}
}

// Ranks returns the live ranks in join order.
func (c *Coordinator) Ranks() []string {
	out := make([]string, len(c.rankOrder))
	for i, r := range c.rankOrder {
		out[i] = r.id
	}
	return out
}
