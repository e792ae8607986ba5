package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/feed"
)

// shortPattern is PatternDecoder that marks objects whose key ends in an
// odd digit as shorter than their window.
type shortPattern struct{ actorstest.PatternDecoder }

func (d shortPattern) DecodeWindow(data []byte, seed uint64, dst []byte) (bool, error) {
	actorstest.Pattern(dst, data, seed)
	return (data[len(data)-1]-'0')%2 == 1, nil
}

// TestAudioSpecOverFeed: a float32 [N,C,S] stream reaches a version-3
// trainer with its spec, shape, dtype and short marks, zero copy and with
// the in-process pipeline's bytes; a version-2 trainer is refused with a
// version error rather than handed batches it would misread.
func TestAudioSpecOverFeed(t *testing.T) {
	e := newEnv(t, 30)
	e.cfg.Epochs = 1
	e.cfg.Sample = actors.Shape{Kind: actors.KindAudio, AudioChannels: 2, AudioSamples: 50}
	e.deps.NewDecoder = func() (actors.SampleDecoder, error) { return shortPattern{}, nil }
	want := e.reference(t, 1, 0)
	s := e.serve(t, 1)

	nc, err := net.Dial("unix", s.SocketPath(0))
	if err != nil {
		t.Fatal(err)
	}
	nc.Write(frame(feed.MsgHello, `{"version":2}`))
	nc.SetReadDeadline(time.Now().Add(time.Minute)) // a failure backstop: the server closes first
	typ, payload, _, err := feed.ReadFrame(nc, feed.MaxServerFrame, nil)
	nc.Close()
	if err != nil || typ != feed.MsgError {
		t.Fatalf("version-2 hello to an audio node: %v %v", typ, err)
	}
	if m, _ := parseErrorForTest(payload); m.Code != feed.CodeVersion || !strings.Contains(m.Message, "version 3") {
		t.Fatalf("version-2 hello to an audio node: %+v", m)
	}
	sessionEnded(t, s, 0)

	c := dial(t, s.SocketPath(0), nil)
	defer c.Close()
	w := c.Welcome()
	if w.Spec == nil || w.Spec.Kind != "audio" || w.Spec.DType != "float32" || !slices.Equal(w.Spec.Shape, []int{2, 50}) || w.Spec.Layout != "NCS" || w.DType != "float32" {
		t.Fatalf("welcome spec %+v dtype %s", w.Spec, w.DType)
	}
	got := map[sumKey]uint32{}
	shorts := 0
	eachBatch(t, c, func(b *feed.Batch) {
		n := b.Len()
		if !slices.Equal(b.Shape, []int{n, 2, 50}) || b.DType != "float32" || b.Layout != "NCS" || len(b.Float32s()) != n*100 || len(b.Short) != n {
			t.Fatalf("batch shape %v dtype %s layout %s floats %d short %v", b.Shape, b.DType, b.Layout, len(b.Float32s()), b.Short)
		}
		if !c.Mapped(b.Images) {
			t.Fatal("audio batch not in the shared mapping")
		}
		for j, k := range b.Keys {
			if b.Short[j] != ((k[len(k)-1]-'0')%2 == 1) {
				t.Fatalf("%s: short %v", k, b.Short[j])
			}
			if b.Short[j] {
				shorts++
			}
		}
		addSums(got, b.Epoch, b.Step, b.Images, n)
	})
	if len(got) != len(want) || shorts != 15 {
		t.Fatalf("%d samples (want %d), %d short (want 15)", len(got), len(want), shorts)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("sample %+v: checksum %08x, want %08x", k, got[k], v)
		}
	}
}

// TestImageVersion2Unchanged: an image node answers a version-2 trainer
// as before: no spec, uint8 dims, no shape.
func TestImageVersion2Unchanged(t *testing.T) {
	e := newEnv(t, 10)
	s := e.serve(t, 1)
	nc, err := net.Dial("unix", s.SocketPath(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write(frame(feed.MsgHello, `{"version":2}`))
	nc.SetReadDeadline(time.Now().Add(time.Minute)) // a failure backstop
	var sawBatch bool
	for !sawBatch {
		typ, payload, _, err := feed.ReadFrame(nc, feed.MaxServerFrame, nil)
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]json.RawMessage
		json.Unmarshal(payload, &raw)
		switch typ {
		case feed.MsgWelcome:
			if _, ok := raw["spec"]; ok || string(raw["dtype"]) != `"uint8"` || string(raw["layout"]) != `"NCHW"` || string(raw["version"]) != "2" {
				t.Fatalf("version-2 welcome: %s", payload)
			}
		case feed.MsgBatch:
			if _, ok := raw["shape"]; ok || string(raw["dims"]) != "[8,3,16,16]" {
				t.Fatalf("version-2 batch: %s", payload)
			}
			sawBatch = true
		}
	}
}

// TestAudioResume: a float32 audio stream resumes from a commit token with
// the same samples (bytes and short marks) the uninterrupted run has.
func TestAudioResume(t *testing.T) {
	e := newEnv(t, 50)
	e.cfg.Epochs = 1
	e.cfg.Sample = actors.Shape{Kind: actors.KindAudio, AudioChannels: 1, AudioSamples: 30}
	e.deps.NewDecoder = func() (actors.SampleDecoder, error) { return shortPattern{}, nil }
	want := e.reference(t, 1, 0)
	s := e.serve(t, 1)
	c := dial(t, s.SocketPath(0), nil)
	var tok []byte
	for i := 0; i < 4; i++ {
		b := next(t, c)
		if i == 1 {
			var err error
			if tok, err = c.Commit(context.Background(), b.Epoch, b.Step); err != nil {
				t.Fatal(err)
			}
		}
		b.Release()
	}
	c.Abort()
	c = dial(t, s.SocketPath(0), tok)
	defer c.Close()
	for step := int64(2); ; step++ {
		b, err := c.Next(context.Background())
		if errors.Is(err, io.EOF) {
			if step != 7 {
				t.Fatalf("resumed stream ended at step %d, want 7", step)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if b.Step != step || b.DType != "float32" || !slices.Equal(b.Shape, []int{b.Len(), 1, 30}) {
			t.Fatalf("resumed batch step %d (want %d) dtype %s shape %v", b.Step, step, b.DType, b.Shape)
		}
		got := map[sumKey]uint32{}
		addSums(got, b.Epoch, b.Step, b.Images, b.Len())
		for k, v := range got {
			if want[k] != v {
				t.Fatalf("resumed sample %+v differs from the uninterrupted run", k)
			}
		}
		for j, k := range b.Keys {
			if b.Short[j] != ((k[len(k)-1]-'0')%2 == 1) {
				t.Fatalf("%s: short %v after resume", k, b.Short[j])
			}
		}
		b.Release()
	}
}

// TestFloatImagesOverFeed: images converted to float16 or bfloat16 in the
// decoder reach a version-3 trainer as that dtype (the welcome's spec and
// dtype, each batch's dtype, shape and dims), zero copy and with the
// in-process pipeline's bytes; a version-2 trainer, which reads image
// batches as uint8, is refused with a version error.
func TestFloatImagesOverFeed(t *testing.T) {
	for _, dt := range []actors.DType{actors.Float16, actors.BFloat16} {
		e := newEnv(t, 20)
		e.cfg.Epochs = 1
		e.cfg.Sample = actors.Shape{Height: 6, Width: 6, Layout: actors.NCHW, Elem: dt}
		want := e.reference(t, 1, 0)
		s := e.serve(t, 1)

		nc, err := net.Dial("unix", s.SocketPath(0))
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(frame(feed.MsgHello, `{"version":2}`))
		nc.SetReadDeadline(time.Now().Add(time.Minute)) // a failure backstop: the server closes first
		typ, payload, _, err := feed.ReadFrame(nc, feed.MaxServerFrame, nil)
		nc.Close()
		if err != nil || typ != feed.MsgError {
			t.Fatalf("%v: version-2 hello: %v %v", dt, typ, err)
		}
		if m, _ := parseErrorForTest(payload); m.Code != feed.CodeVersion || !strings.Contains(m.Message, dt.String()) {
			t.Fatalf("%v: version-2 hello: %+v", dt, m)
		}
		sessionEnded(t, s, 0)

		c := dial(t, s.SocketPath(0), nil)
		w := c.Welcome()
		if w.Spec == nil || w.Spec.Kind != "image" || w.Spec.DType != dt.String() || !slices.Equal(w.Spec.Shape, []int{3, 6, 6}) || w.DType != dt.String() || w.SlotBytes != e.cfg.BatchSize*2*3*36 {
			t.Fatalf("%v: welcome spec %+v dtype %s slot %d", dt, w.Spec, w.DType, w.SlotBytes)
		}
		got := map[sumKey]uint32{}
		eachBatch(t, c, func(b *feed.Batch) {
			n := b.Len()
			if !slices.Equal(b.Shape, []int{n, 3, 6, 6}) || b.Dims != [4]int{n, 3, 6, 6} || b.DType != dt.String() || b.Layout != "NCHW" || len(b.Images) != n*2*3*36 {
				t.Fatalf("%v: batch shape %v dims %v dtype %s layout %s, %d bytes", dt, b.Shape, b.Dims, b.DType, b.Layout, len(b.Images))
			}
			if !c.Mapped(b.Images) {
				t.Fatal("batch not in the shared mapping")
			}
			addSums(got, b.Epoch, b.Step, b.Images, n)
		})
		c.Close()
		if len(got) != len(want) {
			t.Fatalf("%v: %d samples, want %d", dt, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%v: sample %+v: checksum %08x, want %08x", dt, k, got[k], v)
			}
		}
	}
}
