package storage_test

import (
	"testing"

	"github.com/longshore/longshore/storage"
)

// notInPlace is a store that says its range reads are requests, as a
// directory on NFS does.
type notInPlace struct{ storage.Store }

func (notInPlace) ReadsInPlace() bool { return false }

func (n notInPlace) Unwrap() storage.Store { return n.Store }

// TestReadsInPlace: a directory on this machine's local disk reads in
// place, through the counting wrapper too; an object store does not; the
// first store that answers, from the outside in, decides.
func TestReadsInPlace(t *testing.T) {
	dir, err := storage.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    storage.Store
		want bool
	}{
		{"directory", dir, true},
		{"counted directory", storage.NewCountingStore(dir), true},
		{"memory store (as an object store)", storage.NewMemStore("m"), false},
		{"a wrapper that says no, over a directory", storage.NewCountingStore(notInPlace{dir}), false},
		{"nil", nil, false},
	} {
		if got := storage.ReadsInPlace(tc.s); got != tc.want {
			t.Errorf("%s: ReadsInPlace %v, want %v", tc.name, got, tc.want)
		}
	}
}
