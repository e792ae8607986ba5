package journal

import (
	"context"
	"errors"
	"testing"

	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/stores"
)

// TestMinIO runs the race, the corrupt newest generation's refusal and
// --journal-fallback against a real MinIO
// (If-None-Match: * on PutObject), and checks that a missing bucket and
// refused credentials are errors at Open, never a fresh start.
func TestMinIO(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO")
	}
	srv := miniotest.Start(t)
	ctx := context.Background()
	newStore := func(t *testing.T) storage.Store {
		s, err := stores.Open(ctx, srv.URL(srv.NewBucket(t), "jobs/j1"), srv.Options())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	testRace(t, newStore, 5)

	store := newStore(t)
	j, _ := open(t, quick(store), StartOptions{})
	for k := range int64(2) {
		if _, err := j.Write(ctx, state(1, 10*(k+1)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Put(ctx, genKey(2), []byte("LSJ\x01garbage"), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	jr, err := Open(ctx, quick(store))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jr.Start(ctx, StartOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt newest generation: %v, want ErrCorrupt", err)
	}
	if _, e := open(t, quick(store), StartOptions{Fallback: true}); e.Gen != 1 {
		t.Fatalf("fell back to %d, want 1", e.Gen)
	}

	if _, err := stores.Open(ctx, srv.URL("no-such-bucket", "jobs/j1"), srv.Options()); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("missing bucket: err %v, want ErrNotFound", err)
	}
	bad := srv.Options()
	bad.SecretKey = "wrong-secret-key"
	bad.MaxRetries = 0
	if _, err := stores.Open(ctx, srv.URL(srv.NewBucket(t), "jobs/j1"), bad); !errors.Is(err, storage.ErrAccess) {
		t.Errorf("wrong credentials: err %v, want ErrAccess", err)
	}
}
