package observe

import (
	"time"

	"github.com/longshore/longshore/internal/clock"
)

// Ticker returns a tick channel of c every d and its stop function
// (d <= 0: a channel that never ticks; c nil: the real clock).
func Ticker(c clock.Clock, d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t, ch := clock.Or(c).NewTicker(d)
	return ch, t.Stop
}
