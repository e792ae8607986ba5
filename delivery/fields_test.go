package delivery

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/feed"
)

// withFields gives e's samples a caption naming their key (absent on
// every 7th), their index as an int and a list of tags.
func withFields(t testing.TB, e testEnv) {
	b := dataset.NewFieldsBuilder()
	for i, s := range e.ds.Samples {
		if i%7 != 0 {
			b.Set("caption", dataset.StringValue("caption of "+s.Key))
		}
		b.Set("n", dataset.IntValue(int64(i)))
		b.Set("tags", dataset.StringsValue([]string{s.Key, fmt.Sprint(i % 3)}))
		b.EndSample()
	}
	e.ds.Fields = b.Finish()
}

func (e testEnv) serveFields(t testing.TB, ranks int) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "lsf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cat := dataset.DatasetCatalog(e.ds)
	s, err := New(Config{Dir: dir, Ranks: ranks, Job: "test", Fields: func(int) dataset.Catalog { return cat }}, Standalone(e.cfg, e.ds, ranks, e.deps))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

// Every batch's fields are its own rows', filled rows and all, for a
// trainer that asks for them.
func TestFieldsRideWithTheirSamples(t *testing.T) {
	e := newEnv(t, 45)
	withFields(t, e)
	const world = 2
	s := e.serveFields(t, world)
	for r := range world {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		c, err := feed.DialContext(ctx, s.SocketPath(r), feed.DialConfig{Fields: true})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(c.Welcome().Fields); got != "[{caption string} {n int} {tags list<string>}]" {
			t.Fatalf("welcome schema %s", got)
		}
		rows := 0
		eachBatch(t, c, func(b *feed.Batch) {
			if b.Fields == nil || b.Fields.Rows != b.Len() {
				t.Fatalf("batch %d/%d: fields %+v for %d rows", b.Epoch, b.Step, b.Fields, b.Len())
			}
			caption, n, tags := b.Fields.Get("caption"), b.Fields.Get("n"), b.Fields.Get("tags")
			for i, key := range b.Keys {
				idx := b.Indices[i]
				if n.Ints[i] != idx || !n.Present[i] || tags.StringLists[i][0] != key {
					t.Fatalf("row %d (%s, index %d): n %d, tags %q", i, key, idx, n.Ints[i], tags.StringLists[i])
				}
				if want := idx%7 != 0; caption.Present[i] != want || (want && string(caption.Bytes[i]) != "caption of "+key) {
					t.Fatalf("row %d (%s): caption %q present %v", i, key, caption.Bytes[i], caption.Present[i])
				}
				rows++
			}
		})
		if rows == 0 {
			t.Fatal("no rows")
		}
		c.Close()
	}
}

// A trainer that does not ask for fields (every client before them)
// gets no schema and no fields frame: only the messages it knows.
func TestNoFieldsForOldClients(t *testing.T) {
	e := newEnv(t, 20)
	withFields(t, e)
	s := e.serveFields(t, 1)
	conn, err := net.Dial("unix", s.SocketPath(0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute)) // a failure backstop only
	if _, err := conn.Write(frame(feed.MsgHello, `{"version":3}`)); err != nil {
		t.Fatal(err)
	}
	batches := 0
	for batches < 3 {
		var hdr [4]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, binary.LittleEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(conn, body); err != nil {
			t.Fatal(err)
		}
		switch feed.MsgType(body[0]) {
		case feed.MsgFields:
			t.Fatal("a fields frame to a client that did not ask")
		case feed.MsgWelcome:
			if strings.Contains(string(body), `"fields"`) {
				t.Fatalf("welcome with fields: %s", body[1:])
			}
		case feed.MsgBatch:
			batches++
		}
	}

	// And the Go client without DialConfig.Fields: batches without fields.
	conn.Close()
	c := dial(t, s.SocketPath(0), nil)
	defer c.Close()
	if b := next(t, c); b.Fields != nil || len(c.Welcome().Fields) != 0 {
		t.Fatalf("fields %+v, schema %v", b.Fields, c.Welcome().Fields)
	}
}
