package gossip

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkScale measures memberlist at cluster sizes one machine can hold
// in one process, on the in-memory network, for each profile: how long a
// join takes to reach every member, how long until every member has
// dropped a member killed without leaving, and what each member sends per
// second in steady state (probes, gossip and push-pull state syncs). One
// iteration is one whole measurement; run with -benchtime=1x. The figures
// are wall-clock ones, so run it on a quiet machine (they are in
// docs/scale.md, "Gossip at scale", with the load at the time).
//
// A thousand members in one process are a thousand hosts' work on this
// machine's cores: on two cores, memberlist's own probes time out, and
// false suspicions feed more gossip than the cores can answer (the views
// shrink instead of converging). So past 256 members the members run
// slowed (Config.slow): every interval and timeout is slow times longer,
// each member has slow times the CPU time per round, and the reported
// times are divided by slow (bytes and packets per second multiplied).
// The slow=4 runs at 256 members, beside the real-time ones, check that
// slowing does not change the figures. 1,024 members did not converge at
// slow=4 on two cores (docs/scale.md), hence slow=16 as well.
//
//	go test -run '^$' -bench BenchmarkScale -benchtime=1x -timeout 180m ./cluster/gossip
func BenchmarkScale(b *testing.B) {
	for _, c := range []struct{ n, slow int }{{32, 1}, {256, 1}, {256, 4}, {1024, 4}, {1024, 16}} {
		for _, profile := range []string{"local", "lan", "large"} {
			name := fmt.Sprintf("members=%d/profile=%s", c.n, profile)
			if c.slow > 1 {
				name = fmt.Sprintf("members=%d/slow=%d/profile=%s", c.n, c.slow, profile)
			}
			b.Run(name, func(b *testing.B) {
				for range b.N {
					scaleOnce(b, c.n, profile, c.slow)
				}
			})
		}
	}
}

func scaleOnce(b *testing.B, n int, profile string, slow int) {
	// Joining members one by one and letting them all see each other
	// is not measured, and takes longer the more there are: 10 minutes,
	// plus a minute for every 32 members past 256 (1,024: 34 minutes),
	// and as many times that again as slow is past 4, since a slowed
	// member's rounds come that much later (1,024 at slow=16: 136).
	limit := (10*time.Minute + time.Duration(max(n-256, 0)/32)*time.Minute) * time.Duration(max(slow/4, 1))
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	net := &Network{Inbox: 150} // a default UDP socket buffer's packets
	start := func(i int, join []string) *Membership {
		m, err := Start(ctx, Config{
			Meta:     Meta{ID: fmt.Sprintf("n%04d", i), Role: RoleNode, ActorAddr: "127.0.0.1:1", Ranks: rankNames(fmt.Sprintf("n%04d", i), 8)},
			BindAddr: "10.0.0.1:0", Network: net, Join: join, Profile: profile, slow: slow,
		})
		if err != nil {
			b.Fatalf("member %d: %v", i, err)
		}
		// Read its events, as a node's daemon does: unread, each
		// member's queue would hold every other member's join (a
		// million events at 1,024 members).
		go func() {
			for range m.Events() {
			}
		}()
		return m
	}
	ms := []*Membership{start(0, nil)}
	seed := []string{ms[0].Addr()}
	for i := 1; i < n; i++ {
		// Each joins through an earlier member, as nodes joining through
		// a headless Service would, so no one member serves every
		// join's full state sync.
		ms = append(ms, start(i, []string{ms[(i*7919)%i].Addr()}))
	}
	defer func() {
		// All at once: each waits up to a second for its leave to be
		// heard, which one after another is minutes at 1,024.
		var wg sync.WaitGroup
		for _, m := range ms {
			if m != nil {
				wg.Go(func() { m.Shutdown(context.Background()) })
			}
		}
		wg.Wait()
	}()
	// Say how the setup goes every minute (the smallest and the median
	// view), so that a run that does not converge shows how far it got.
	setup, done, reported := time.Now(), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(reported)
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			views := make([]int, 0, len(ms))
			for _, m := range ms {
				views = append(views, count(m))
			}
			slices.Sort(views)
			fmt.Fprintf(os.Stderr, "gossip scale: %d members, %v after the last started: views smallest %d, median %d\n",
				n, time.Since(setup).Round(time.Second), views[0], views[len(views)/2])
		}
	}()
	converged := waitAll(ctx, ms, func(m *Membership) bool { return count(m) == n })
	close(done)
	<-reported // ms changes below
	if !converged {
		b.Fatalf("%d members never all saw each other", n)
	}

	// Steady state: what members send per second with nothing changing.
	window := 20 * time.Second * time.Duration(slow)
	p0, b0 := net.Sent()
	time.Sleep(window)
	p1, b1 := net.Sent()
	perSecond := float64(slow) / window.Seconds() / float64(n) // per member, per unslowed second

	// A join: until every member has it.
	t0 := time.Now()
	joined := start(n, seed)
	ms = append(ms, joined)
	name := joined.cfg.Meta.ID
	if !waitAll(ctx, ms, func(m *Membership) bool { return has(m, name) }) {
		b.Fatalf("the join of %s never reached every member", name)
	}
	join := time.Since(t0)

	// A kill: the member's transport and memberlist stop, no leave.
	victim := ms[n/2]
	vname := victim.cfg.Meta.ID
	t0 = time.Now()
	victim.ml.Shutdown() // no Leave: to the others it died
	ms[n/2] = nil
	rest := append(append([]*Membership(nil), ms[:n/2]...), ms[n/2+1:]...)
	if !waitAll(ctx, rest, func(m *Membership) bool { return !has(m, vname) }) {
		b.Fatalf("the death of %s never reached every member", vname)
	}
	detect := time.Since(t0)

	b.ReportMetric(join.Seconds()/float64(slow), "join-s")
	b.ReportMetric(detect.Seconds()/float64(slow), "detect-s")
	b.ReportMetric(float64(b1-b0)*perSecond, "B/s/member")
	b.ReportMetric(float64(p1-p0)*perSecond, "pkts/s/member")
}

func rankNames(id string, k int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = fmt.Sprintf("%s/%d", id, i)
	}
	return out
}

// has and count read m's view without Members' copy: polled across a
// thousand members, the copies would be the benchmark.
func has(m *Membership, name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.mu.members[name]
	return ok
}

func count(m *Membership) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.members)
}

// waitAll polls until ok holds for every member, or ctx ends.
func waitAll(ctx context.Context, ms []*Membership, ok func(*Membership) bool) bool {
	for {
		all := true
		for _, m := range ms {
			if m != nil && !ok(m) {
				all = false
				break
			}
		}
		if all {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}
