package feed

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzClientFrames feeds arbitrary bytes to the server's frame reader and
// message parser: they must return errors, never panic or over-allocate.
func FuzzClientFrames(f *testing.F) {
	f.Add(frame(MsgHello, `{"version":1,"token":"TFNUSw=="}`))
	f.Add(frame(MsgRelease, `{"ids":[1,2,3]}`))
	f.Add(frame(MsgCommit, `{"req":1,"epoch":0,"step":3}`))
	f.Add(frame(MsgBye, ``))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var buf []byte
		for {
			typ, payload, nb, err := ReadFrame(r, MaxClientFrame, buf)
			buf = nb
			if err != nil {
				return
			}
			if cap(buf) > MaxClientFrame {
				t.Fatalf("buffer of %d bytes", cap(buf))
			}
			m, err := ParseClientMsg(typ, payload)
			if err == nil && m.Hello == nil && m.Release == nil && m.Commit == nil && typ != MsgBye && typ != MsgEnded {
				t.Fatalf("type %d accepted with no message", typ)
			}
		}
	})
}

func frame(t MsgType, payload string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)+1))
	return append(append(b, byte(t)), payload...)
}

// TestBatchFilled: a batch's filled marks (docs/feed-protocol.md, Filled
// places) come through as Batch.Filled, all false when the node sent
// none, and marks of another length than the batch are refused.
func TestBatchFilled(t *testing.T) {
	c := &Client{}
	for _, tc := range []struct {
		payload string
		want    []bool
		err     bool
	}{
		{`{"id":1,"labels":[1,2,3],"keys":["a","b","a"],"filled":[false,false,true]}`, []bool{false, false, true}, false},
		{`{"id":2,"labels":[1,2],"keys":["a","b"]}`, []bool{false, false}, false},
		{`{"id":3,"labels":[1,2],"keys":["a","b"],"filled":[true]}`, nil, true},
	} {
		b, err := c.batch([]byte(tc.payload))
		if tc.err {
			if err == nil {
				t.Errorf("%s: accepted", tc.payload)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.payload, err)
		}
		if len(b.Filled) != len(tc.want) {
			t.Fatalf("%s: filled %v, want %v", tc.payload, b.Filled, tc.want)
		}
		for i := range tc.want {
			if b.Filled[i] != tc.want[i] {
				t.Errorf("%s: filled %v, want %v", tc.payload, b.Filled, tc.want)
			}
		}
	}
}
