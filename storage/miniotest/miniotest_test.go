package miniotest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

func TestStartStopRestart(t *testing.T) {
	srv := Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	s, err := stores.Open(ctx, srv.URL(bucket, "p"), srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "k", []byte("kept"), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	if resp, err := http.Get(srv.Endpoint + "/minio/health/live"); err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after Stop")
	}
	srv.Restart(t)
	if got, err := s.Get(ctx, "k", nil); err != nil || string(got) != "kept" {
		t.Fatalf("after Restart: %q, %v (data should survive)", got, err)
	}

	// DefaultOptions from the server's Env reaches it too.
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if _, err := stores.Open(ctx, srv.URL(bucket, ""), s3.DefaultOptions()); err != nil {
		t.Fatalf("Open with DefaultOptions from Env(): %v", err)
	}
}

// fakeTB records a Fatal instead of failing the real test.
type fakeTB struct {
	testing.TB
	mu    sync.Mutex
	fatal string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatal(args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprint(args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }

func TestMissingBinaryFails(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(EnvBinary, filepath.Join(empty, "no-minio"))
	t.Setenv("HOME", empty)
	t.Setenv("PATH", empty)
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("Binary() = %v; want an error telling to run make deps", err)
	}
	ftb := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(ftb)
	}()
	<-done
	if !strings.Contains(ftb.fatal, "make deps") {
		t.Fatalf("Start without a binary: Fatal(%q); want a failure that says to run make deps", ftb.fatal)
	}
	if _, err := os.Stat(filepath.Join(empty, "no-minio")); err == nil {
		t.Fatal("test setup broken")
	}
}
