package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/testports"
)

// readyz GETs addr's /readyz: its status and body.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestReadyz: the coordinator's /readyz says 503 while it is still
// joining the gossip (its journal loaded, its control port serving),
// then 200 once it is coordinating.
func TestReadyz(t *testing.T) {
	data := t.TempDir()
	writeManifest(t, data, 16, false)
	// A recorded member that refuses every join: the coordinator retries
	// it (for 5 s) before it starts a gossip of its own.
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	tried := make(chan struct{}, 1)
	go func() {
		for {
			c, err := peer.Accept()
			if err != nil {
				return
			}
			c.Close()
			select {
			case tried <- struct{}{}:
			default:
			}
		}
	}()
	metrics := testports.Addr(t, "127.0.0.1") // for the coordinator to bind
	w := &startWatch{started: make(chan struct{})}
	o, err := parseFlags([]string{"--dataset", data, "--listen", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--join", peer.Addr().String(),
		"--metrics", metrics, "--epochs", "1", "--batch-size", "4", "--log-format", "text"}, w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- coordinate(ctx, o, w) }()
	defer func() { cancel(); <-done }()
	backstop := time.After(time.Minute) // ends a failing test only
	select {
	case <-tried:
	case err := <-done:
		t.Fatalf("coordinator ended: %v\n%s", err, w)
	case <-backstop:
		t.Fatalf("the coordinator never tried to join its peer:\n%s", w)
	}
	if code, body := readyz(t, metrics); code != http.StatusServiceUnavailable || !strings.Contains(body, "gossip") {
		t.Errorf("GET /readyz while joining the gossip: %d %q, want 503 saying so", code, body)
	}
	select {
	case <-w.started:
	case err := <-done:
		t.Fatalf("coordinator ended: %v\n%s", err, w)
	case <-backstop:
		t.Fatalf("the coordinator never started coordinating:\n%s", w)
	}
	if code, body := readyz(t, metrics); code != http.StatusOK || body != "ready\n" {
		t.Errorf("GET /readyz when coordinating: %d %q, want 200 \"ready\\n\"", code, body)
	}
}
