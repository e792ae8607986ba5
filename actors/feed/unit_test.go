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
			if err == nil && m.Hello == nil && m.Release == nil && m.Commit == nil && typ != MsgBye {
				t.Fatalf("type %d accepted with no message", typ)
			}
		}
	})
}

func frame(t MsgType, payload string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)+1))
	return append(append(b, byte(t)), payload...)
}
