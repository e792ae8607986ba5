package storage_test

import (
	"context"
	"testing"

	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/stores"
	"github.com/longshore/longshore/storage/storetest"
)

func TestConformanceMem(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storage.Store { return storage.NewMemStore(t.Name()) })
}

func TestConformanceDir(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storage.Store {
		s, err := storage.NewDirStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestConformanceS3 runs the suite on a real MinIO, one bucket per
// behaviour, half of them behind a key prefix.
func TestConformanceS3(t *testing.T) {
	srv := miniotest.Start(t)
	n := 0
	storetest.Run(t, func(t *testing.T) storage.Store {
		bucket := srv.NewBucket(t)
		prefix := ""
		if n++; n%2 == 0 {
			prefix = "some/prefix"
		}
		s, err := stores.Open(context.Background(), srv.URL(bucket, prefix), srv.Options())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformanceCounting(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storage.Store { return storage.NewCountingStore(storage.NewMemStore(t.Name())) })
}
