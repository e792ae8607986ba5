package storage_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/longshore/longshore/storage"
)

// plainStore hides a store's GetLimit, for the fallback.
type plainStore struct{ storage.Store }

func TestGetLimit(t *testing.T) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("x"), 1000)
	dir, err := storage.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mem := storage.NewMemStore("m")
	for name, s := range map[string]storage.Store{"dir": dir, "mem": mem, "fallback": plainStore{mem}} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Put(ctx, "a/big.jpg", data, storage.Cond{}); err != nil && !errors.Is(err, storage.ErrPrecondition) {
				t.Fatal(err)
			}
			buf := make([]byte, 0, 10)
			got, err := storage.GetLimit(ctx, s, "a/big.jpg", 999, buf)
			if !errors.Is(err, storage.ErrTooLarge) || !strings.Contains(err.Error(), "1000 bytes, over the limit of 999") || len(got) != 0 {
				t.Errorf("over the limit: %d bytes, %v; want ErrTooLarge with the sizes", len(got), err)
			}
			if cap(got) != 10 {
				t.Errorf("a refusal grew the buffer to %d", cap(got))
			}
			for _, limit := range []int64{1000, -1} {
				if got, err := storage.GetLimit(ctx, s, "a/big.jpg", limit, nil); err != nil || !bytes.Equal(got, data) {
					t.Errorf("limit %d: %d bytes, %v", limit, len(got), err)
				}
			}
			if _, err := storage.GetLimit(ctx, s, "a/none.jpg", 10, nil); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("missing key: %v", err)
			}
		})
	}
}
