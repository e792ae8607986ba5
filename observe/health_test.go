package observe

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// TestHealthz: the metrics server answers a liveness probe (Kubernetes'
// livenessProbe httpGet /healthz) without the metrics token.
func TestHealthz(t *testing.T) {
	srv := httptest.NewServer(Handler(Registry(), nil))
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "ok\n" {
		t.Fatalf("GET /healthz: %d %q, want 200 \"ok\\n\"", res.StatusCode, b)
	}
}

// TestHealthzWithoutToken: a probe carries no bearer token; /healthz
// answers it while /metrics still asks for the token.
func TestHealthzWithoutToken(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(ServerConfig{Addr: "127.0.0.1:0", TokenFile: tok}, Handler(Registry(), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	for path, want := range map[string]int{"/healthz": 200, "/metrics": 401} {
		res, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s without a token: %d, want %d", path, res.StatusCode, want)
		}
	}
}

// TestReadyz: /readyz answers 503 with the reason until the daemon is
// ready, then 200, without the metrics token (a kubelet's readinessProbe
// carries none).
func TestReadyz(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := NewReadiness("not welcomed by a coordinator yet")
	s, err := Listen(ServerConfig{Addr: "127.0.0.1:0", TokenFile: tok}, Handler(Registry(), map[string]http.Handler{ReadyPath: Readyz(r.Check)}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	get := func() (int, string) {
		res, err := http.Get("http://" + s.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(b)
	}
	if code, body := get(); code != 503 || body != "not ready: not welcomed by a coordinator yet\n" {
		t.Fatalf("GET /readyz before ready: %d %q, want 503 and the reason", code, body)
	}
	if !r.Ready() || r.Ready() {
		t.Error("Ready: want true on the change only")
	}
	if code, body := get(); code != 200 || body != "ready\n" {
		t.Fatalf("GET /readyz when ready: %d %q, want 200 \"ready\\n\"", code, body)
	}
	r.NotReady("the job is done")
	if code, body := get(); code != 503 || body != "not ready: the job is done\n" {
		t.Fatalf("GET /readyz after NotReady: %d %q, want 503 and the reason", code, body)
	}
}
