package observe

import (
	"errors"
	"net/http"
	"sync/atomic"
)

// HealthPath is the liveness endpoint beside /metrics: 200 "ok" while
// the process serves HTTP. It needs no bearer token (a kubelet's probe
// carries none) and tells nothing but that the process is alive.
const HealthPath = "/healthz"

// ReadyPath is the readiness endpoint beside /metrics (Readyz): 200
// "ready" while the daemon can do its job, else 503 and one line saying
// what it waits for. Like HealthPath it needs no bearer token.
const ReadyPath = "/readyz"

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// Readyz serves ReadyPath from ready: 200 "ready" while it returns nil,
// else 503 with its error as the one line. A daemon passes it to Handler
// among its extra paths (ReadyPath: Readyz(r.Check)).
func Readyz(ready func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		w.Write([]byte("ready\n"))
	})
}

// Readiness is a daemon's answer to /readyz: not ready, for a reason,
// until Ready. Any goroutine may call its methods.
type Readiness struct{ why atomic.Pointer[string] }

// NewReadiness is a Readiness not ready for reason (what the daemon
// waits for: "not welcomed by a coordinator yet").
func NewReadiness(reason string) *Readiness {
	r := &Readiness{}
	r.NotReady(reason)
	return r
}

// NotReady says the daemon cannot do its job, for reason.
func (r *Readiness) NotReady(reason string) { r.why.Store(&reason) }

// Ready says the daemon can do its job; true if it could not before.
func (r *Readiness) Ready() bool { return r.why.Swap(nil) != nil }

// Check is nil when ready, else an error with the reason: Readyz's func.
func (r *Readiness) Check() error {
	if why := r.why.Load(); why != nil {
		return errors.New(*why)
	}
	return nil
}
