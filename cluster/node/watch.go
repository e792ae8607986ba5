package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/internal/clock"
)

// A restarted coordinator finds the nodes by rejoining the gossip members
// its journal recorded. That list can miss a node (the coordinator died
// before it wrote one naming it, or it restarted on another host whose
// journal copy is older), and a node that nobody contacts never hears of
// the new coordinator: it waits forever. So a node that has seen no live
// coordinator in gossip for a while re-joins its --join addresses — the
// coordinator's well-known gossip address — until one is back.

// CoordWatch decides when to re-join: once no coordinator has been alive
// for after, and then every every while that lasts. It is pure; the
// caller feeds it what gossip says and the time.
type CoordWatch struct {
	after time.Duration // silence before the first re-join
	every time.Duration // between re-joins while the silence lasts

	lastSeen time.Time // a coordinator was alive then (or the watch began)
	lastTry  time.Time // the last re-join; zero: none in this silence
}

func NewCoordWatch(now time.Time, after, every time.Duration) *CoordWatch {
	return &CoordWatch{after: after, every: every, lastSeen: now}
}

// observe records whether a coordinator is alive at now and says whether
// to re-join now.
func (w *CoordWatch) Observe(now time.Time, alive bool) bool {
	if alive {
		w.lastSeen, w.lastTry = now, time.Time{}
		return false
	}
	if now.Sub(w.lastSeen) < w.after {
		return false
	}
	if !w.lastTry.IsZero() && now.Sub(w.lastTry) < w.every {
		return false
	}
	w.lastTry = now
	return true
}

// CoordinatorAlive reports whether ms lists a coordinator that is not
// leaving.
func CoordinatorAlive(ms []gossip.Member) bool {
	for _, m := range ms {
		if m.Meta.Role == gossip.RoleCoordinator && !m.Meta.Leaving {
			return true
		}
	}
	return false
}

// Membership is what WatchCoordinator needs of a gossip.Membership.
type Membership interface {
	Members() []gossip.Member
	Join(ctx context.Context, addrs []string) error
}

// WatchCoordinator re-joins join whenever w says so, checking every
// `every` of clk, until ctx is done. A re-join waits at most w.every for
// an answer.
func WatchCoordinator(ctx context.Context, clk clock.Clock, every time.Duration, m Membership, join []string, w *CoordWatch, log *slog.Logger) {
	t, tick := clk.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		if !w.Observe(clk.Now(), CoordinatorAlive(m.Members())) {
			continue
		}
		log.Info("no coordinator in gossip; re-joining", "join", join, "silent_for", clk.Since(w.lastSeen).Round(time.Millisecond).String())
		jctx, cancel := context.WithTimeout(ctx, w.every)
		err := m.Join(jctx, join)
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Warn("re-join found nobody; trying again", "join", join, "in", w.every.String(), "err", err)
		}
	}
}

// JoinAddrs splits --join's comma-separated addresses.
func JoinAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// ErrGaveUp is why a node stops when no coordinator came back in time
// (WatchGiveUp's cause).
var ErrGaveUp = errors.New("no coordinator in gossip")

// WatchGiveUp calls giveUp once no coordinator has been alive in m for
// after (checked every second of clk): the job ended while this node was
// cut off (its coordinator and peers are gone), or the coordinator is
// down for good. Its journal holds what was committed; nothing is lost by
// leaving.
func WatchGiveUp(ctx context.Context, clk clock.Clock, m Membership, after time.Duration, giveUp context.CancelCauseFunc) {
	t, tick := clk.NewTicker(min(after, time.Second))
	defer t.Stop()
	last := clk.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick:
			if CoordinatorAlive(m.Members()) {
				last = now
			} else if now.Sub(last) >= after {
				giveUp(fmt.Errorf("%w for %v: giving up (the job may have ended while this node was cut off, or the coordinator is down; its journal keeps what was committed)", ErrGaveUp, after))
				return
			}
		}
	}
}
