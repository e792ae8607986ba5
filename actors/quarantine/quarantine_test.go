package quarantine

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/dataset"
)

// TestQuarantinable: a sample's own failures are quarantined, the
// store's and the run's are not.
func TestQuarantinable(t *testing.T) {
	for _, tc := range []struct {
		stage actors.Stage
		class string
		want  bool
	}{
		{actors.StageFetch, "not_found", true},
		{actors.StageFetch, "access_denied", true},
		{actors.StageFetch, "too_large", true},
		{actors.StageFetch, "range", true},
		{actors.StageFetch, "io", false},
		{actors.StageFetch, "timeout", false},
		{actors.StageFetch, "bad_response", false},
		{actors.StageFetch, "canceled", false},
		{actors.StageDecode, "corrupt", true},
		{actors.StageDecode, "unsupported", true},
		{actors.StageDecode, "timeout", true},
		{actors.StageDecode, "canceled", false},
	} {
		if got := Quarantinable(actors.Failure{Stage: tc.stage, Class: tc.class}); got != tc.want {
			t.Errorf("%v/%s: quarantinable %v, want %v", tc.stage, tc.class, got, tc.want)
		}
	}
}

func readKeys(t *testing.T, path string) dataset.Exclusions {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ex, err := dataset.ReadExclusions(f)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// TestFile: each quarantinable key is written once with its reason, even
// from many goroutines; keys the file held before are not written again;
// a nil File records nothing; a file that is not a key list is refused.
func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.jsonl")
	q, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.Record(actors.Failure{Key: "a.jpg", Stage: actors.StageDecode, Class: "corrupt", Reason: "bad huffman"})
			q.Record(actors.Failure{Key: "b.jpg", Stage: actors.StageFetch, Class: "not_found", Reason: "gone"})
			q.Record(actors.Failure{Key: "c.jpg", Stage: actors.StageFetch, Class: "io", Reason: "reset"})
		}()
	}
	wg.Wait()
	if n, err := q.Close(); n != 2 || err != nil {
		t.Fatalf("Close: %d, %v; want 2 keys added", n, err)
	}
	b, _ := os.ReadFile(path)
	if lines := strings.Count(string(b), "\n"); lines != 2 || !strings.Contains(string(b), "bad huffman") || !strings.Contains(string(b), `"class":"not_found"`) {
		t.Errorf("file:\n%s\nwant a.jpg and b.jpg once each, with their reasons", b)
	}
	if ex := readKeys(t, path); len(ex) != 2 {
		t.Errorf("keys %v; want a.jpg, b.jpg", ex)
	}
	// A second run with the same file adds only new keys.
	q, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	q.Record(actors.Failure{Key: "a.jpg", Stage: actors.StageDecode, Class: "corrupt"})
	q.Record(actors.Failure{Key: "d.jpg", Stage: actors.StageDecode, Class: "unsupported"})
	if q.Added() != 1 {
		t.Errorf("Added %d after a known and a new key; want 1", q.Added())
	}
	if n, err := q.Close(); n != 1 || err != nil {
		t.Fatalf("second Close: %d, %v", n, err)
	}
	if ex := readKeys(t, path); len(ex) != 3 {
		t.Errorf("keys %v; want a, b, d", ex)
	}
	// None.
	var none *File
	if q, err := Open(""); q != nil || err != nil {
		t.Errorf(`Open(""): %v, %v; want nil, nil`, q, err)
	}
	none.Record(actors.Failure{Key: "x", Stage: actors.StageDecode, Class: "corrupt"})
	if none.Added() != 0 || none.OnFailure() != nil || none.Path() != "" {
		t.Error("a nil File records")
	}
	if n, err := none.Close(); n != 0 || err != nil {
		t.Errorf("nil Close: %d, %v", n, err)
	}
	// Not a key list.
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("{not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), "holds something else") {
		t.Errorf("Open(a file of something else): %v", err)
	}
}
