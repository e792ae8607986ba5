package actors

import (
	"errors"
	"strings"
	"testing"
)

// TestPlanMemory: a memory budget's shares for 8 ranks of batch 32 at
// 224x224 (4.8 MB a slot).
func TestPlanMemory(t *testing.T) {
	c := DefaultConfig()
	const slot = 32 * 3 * 224 * 224
	for _, tc := range []struct {
		budget     int64
		slotsSet   bool
		env        string
		slots      int
		fetchBytes int64
		goLimit    int64
		err        string
	}{
		{budget: 1 << 30, slots: 4, fetchBytes: (1 << 28) / 8, goLimit: 1<<30 - 8*4*slot},
		{budget: 256 << 20, slots: 3, fetchBytes: (1 << 26) / 8, goLimit: 256<<20 - 8*3*slot},
		{budget: 256 << 20, slotsSet: true, slots: 4, fetchBytes: (1 << 26) / 8, goLimit: 256<<20 - 8*4*slot},
		{budget: 256 << 20, env: "300MiB", slots: 3, fetchBytes: (1 << 26) / 8},
		{budget: 64 << 20, err: "the batch slots alone take 73.5 MiB (8 rank(s) x 2 slot(s) x 4.6 MiB a batch)"},
	} {
		p, err := PlanMemory(tc.budget, c, 8, tc.slotsSet, tc.env)
		if tc.err != "" {
			if !errors.Is(err, ErrMemoryBudget) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("budget %d: error %v, want ErrMemoryBudget and %q", tc.budget, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("budget %d: %v", tc.budget, err)
			continue
		}
		want := MemoryPlan{Slots: tc.slots, FetchBytes: tc.fetchBytes, GoLimit: tc.goLimit, SlotBytes: 8 * int64(tc.slots) * slot}
		if p != want {
			t.Errorf("budget %d slotsSet %v env %q: %+v, want %+v", tc.budget, tc.slotsSet, tc.env, p, want)
		}
		got := c
		p.Apply(&got)
		if got.Slots != tc.slots || got.FetchBytes != tc.fetchBytes {
			t.Errorf("budget %d: applied slots %d, fetched bytes %d; the plan's %d, %d", tc.budget, got.Slots, got.FetchBytes, tc.slots, tc.fetchBytes)
		}
	}
}
