package delivery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/decode/spec"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/storage"
)

// rawDecoder writes raw rows as decode.Raw does (spec.PutRaw), without
// linking the FFmpeg decoders into this package's tests.
type rawDecoder struct{}

func (rawDecoder) Decode(data []byte, _ uint64, dst []byte) error { return spec.PutRaw(dst, data) }
func (rawDecoder) Close() error                                   { return nil }

// Raw batches (--media raw) reach the Go client as each row's object
// bytes: lengths in the batch message, Batch.Data views of the shared
// memory; a sample over the row's size is a failure whose row is filled
// with the next row's bytes and length.
func TestRawBatchesCarryEachObjectsBytes(t *testing.T) {
	e := newEnv(t, 30)
	root := t.TempDir()
	for _, s := range e.ds.Samples {
		data := []byte(s.Key)
		if s.Key == "obj-0011" {
			data = []byte(strings.Repeat("x", 40)) // over the row
		} else if s.Key == "obj-0003" {
			data = nil // an empty object is a sample of no bytes
		}
		if err := os.WriteFile(filepath.Join(root, s.Key), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e = rawEnv(t, e, root)
	s := e.serve(t, 1)
	c := dial(t, s.SocketPath(0), nil)
	defer c.Close()
	if sp := c.Welcome().Spec; sp == nil || sp.Kind != feed.KindRaw || sp.Layout != "NB" || len(sp.Shape) != 1 || sp.Shape[0] != 8+32 {
		t.Fatalf("welcome spec %+v", c.Welcome().Spec)
	}
	got, filled := map[[2]any]int{}, 0
	eachBatch(t, c, func(b *feed.Batch) {
		if len(b.Data) != b.Len() {
			t.Fatalf("batch %d/%d: %d rows of data for %d samples", b.Epoch, b.Step, len(b.Data), b.Len())
		}
		for r, key := range b.Keys {
			want := key
			if key == "obj-0003" {
				want = ""
			}
			if string(b.Data[r]) != want {
				t.Fatalf("batch %d/%d row %d (%s): %q", b.Epoch, b.Step, r, key, b.Data[r])
			}
			if b.Filled[r] {
				filled++
				continue
			}
			got[[2]any{b.Epoch, key}]++
		}
	})
	if filled != 2 { // obj-0011, once an epoch
		t.Errorf("%d filled rows, want 2", filled)
	}
	for ep := range 2 {
		for _, smp := range e.ds.Samples {
			want := 1
			if smp.Key == "obj-0011" {
				want = 0
			}
			if n := got[[2]any{ep, smp.Key}]; n != want {
				t.Errorf("epoch %d: %s delivered %d times, want %d", ep, smp.Key, n, want)
			}
		}
	}
}

func rawEnv(t *testing.T, e testEnv, root string) testEnv {
	t.Helper()
	st, err := storage.NewDirStore(root)
	if err != nil {
		t.Fatal(err)
	}
	e.deps.Store = st
	e.deps.NewDecoder = func() (actors.SampleDecoder, error) { return rawDecoder{}, nil }
	e.cfg.Sample = actors.Shape{Kind: actors.KindRaw, RawBytes: 32}
	e.cfg.MaxFailures = actors.MaxFailureCount(10)
	return e
}
