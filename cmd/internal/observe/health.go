package observe

import "net/http"

// HealthPath is the liveness endpoint beside /metrics: 200 "ok" while
// the process serves HTTP. It needs no bearer token (a kubelet's probe
// carries none) and tells nothing but that the process is alive.
const HealthPath = "/healthz"

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}
