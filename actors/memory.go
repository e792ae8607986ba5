package actors

import (
	"errors"
	"fmt"
)

// The shares of a node's memory budget (the node's --memory-budget): the
// batch slots (shared memory the trainers map: what the trainer holds
// and what is being assembled) take at most half, the fetched bytes of
// every rank a quarter, a packed dataset's chunk cache in memory at most
// a quarter (dataset.PackPlanConfig.MemoryCap). The Go runtime's soft
// limit is the budget less the slots, which live outside the Go heap:
// the garbage collector works harder as the heap nears it instead of
// letting garbage double the heap.
const (
	MemorySlotShare  = 0.5
	MemoryFetchShare = 0.25
	MemoryPackShare  = 0.25
	memoryMinSlots   = 2 // one the trainer holds, one being assembled
)

// ErrMemoryBudget is PlanMemory's error: the budget cannot hold the
// batch slots the ranks need.
var ErrMemoryBudget = errors.New("actors: memory budget below the batch slots")

// MemoryShare is share of budget bytes.
func MemoryShare(budget int64, share float64) int64 { return int64(float64(budget) * share) }

// MemoryPlan is what a memory budget sets.
type MemoryPlan struct {
	Slots      int   // per rank (Config.Slots)
	FetchBytes int64 // per rank (Config.FetchBytes)
	// GoLimit is the Go heap's soft limit (debug.SetMemoryLimit); 0:
	// leave the runtime's.
	GoLimit int64
	// SlotBytes is what the batch slots take over the ranks.
	SlotBytes int64
}

// PlanMemory fits c (one rank's configuration, ranks of them) into
// budget bytes: the slots (unless the user set them: slotsSet) as many
// as half the budget holds, up to c's, at least 2; a quarter of the
// budget for the ranks' fetched bytes; the rest of the budget, less the
// slots, as the Go heap's soft limit unless GOMEMLIMIT is set
// (envLimit). ErrMemoryBudget says when the budget cannot hold the
// slots the batches need (more than three quarters of it).
func PlanMemory(budget int64, c Config, ranks int, slotsSet bool, envLimit string) (MemoryPlan, error) {
	slotBytes := int64(c.BatchSize) * int64(c.Sample.SampleBytes())
	per := slotBytes * int64(ranks)
	p := MemoryPlan{Slots: c.Slots}
	if !slotsSet {
		p.Slots = min(c.Slots, max(memoryMinSlots, int(float64(budget)*MemorySlotShare/float64(max(per, 1)))))
	}
	p.SlotBytes = per * int64(p.Slots)
	if p.SlotBytes > budget*3/4 {
		return p, fmt.Errorf("%w: the batch slots alone take %s (%d rank(s) x %d slot(s) x %s a batch)",
			ErrMemoryBudget, bytesHuman(p.SlotBytes), ranks, p.Slots, bytesHuman(slotBytes))
	}
	p.FetchBytes = max(1, MemoryShare(budget, MemoryFetchShare)/int64(ranks))
	if envLimit == "" {
		p.GoLimit = budget - p.SlotBytes
	}
	return p, nil
}

// Apply sets c's slots and fetched bytes to p's.
func (p MemoryPlan) Apply(c *Config) { c.Slots, c.FetchBytes = p.Slots, p.FetchBytes }
