package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/testports"
)

// stalledS3 is an S3 endpoint on loopback that says the bucket exists
// and holds every other request until the test ends: a store from which
// a coordinator's start never finishes loading. held receives each held
// request's method and path.
func stalledS3(t *testing.T) (url string, held <-chan string) {
	t.Helper()
	ch := make(chan string, 64)
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0 {
			return // HEAD /bucket: it exists
		}
		select {
		case ch <- r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
		http.Error(w, "stalled", http.StatusServiceUnavailable)
	}))
	t.Cleanup(func() { once.Do(func() { close(release) }); srv.Close() })
	return srv.URL, ch
}

// get GETs addr's path: its status and body (err: nothing answered).
func get(addr, path string) (int, string, error) {
	res, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), nil
}

// TestHealthzWhileLoading: a coordinator still reading its dataset's
// manifest (index) or its journal from a slow store answers /healthz
// (a kubelet's liveness probe must not kill it for loading) and says on
// /readyz what it is loading. Before, its metrics server started only
// once both were loaded: a load longer than the liveness probe's
// budget (60 s in deploy/k8s) had the coordinator killed and restarted
// into the same load, for ever.
func TestHealthzWhileLoading(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    func(data, s3 string) []string
		loading string // in /readyz's 503
	}{
		{"journal", func(data, s3 string) []string {
			return []string{"--dataset", data, "--checkpoint", "s3://jobs/j1", "--s3-endpoint", s3}
		}, "journal"},
		{"manifest", func(data, s3 string) []string {
			return []string{"--dataset", "s3://data/train", "--s3-endpoint", s3}
		}, "dataset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("AWS_ACCESS_KEY_ID", "longshore")
			t.Setenv("AWS_SECRET_ACCESS_KEY", "longshore-secret")
			t.Setenv("AWS_REGION", "us-east-1")
			data := t.TempDir()
			writeManifest(t, data, 16, false)
			endpoint, held := stalledS3(t)
			metrics := testports.Addr(t, "127.0.0.1") // for the coordinator to bind
			w := &startWatch{started: make(chan struct{})}
			args := append(tc.args(data, endpoint), "--s3-credentials", "env", "--listen", "127.0.0.1:0", "--gossip", "127.0.0.1:0",
				"--metrics", metrics, "--epochs", "1", "--batch-size", "4", "--log-format", "text")
			o, err := parseFlags(args, w)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- coordinate(ctx, o, w) }()
			defer func() { cancel(); <-done }()
			backstop := time.After(time.Minute) // ends a failing test only
			select {
			case req := <-held:
				t.Logf("the store holds %s", req)
			case err := <-done:
				t.Fatalf("coordinator ended: %v\n%s", err, w)
			case <-backstop:
				t.Fatalf("the coordinator never asked the store:\n%s", w)
			}
			code, body, err := get(metrics, "/healthz")
			if err != nil || code != http.StatusOK || body != "ok\n" {
				t.Errorf("GET /healthz while loading the %s: %d %q %v, want 200 \"ok\\n\"", tc.name, code, body, err)
			}
			code, body, err = get(metrics, "/readyz")
			if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, tc.loading) {
				t.Errorf("GET /readyz while loading the %s: %d %q %v, want 503 naming the %s", tc.name, code, body, err, tc.loading)
			}
			select {
			case err := <-done:
				t.Fatalf("the coordinator ended while its store was stalled: %v\n%s", err, w)
			default:
			}
		})
	}
}
