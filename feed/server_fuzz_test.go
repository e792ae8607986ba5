package feed

import (
	"bytes"
	"encoding/json"
	"testing"
	"unsafe"
)

// FuzzServerFrames feeds arbitrary bytes to the client's side of the
// protocol: the frame reader and the decoding of every message a server
// sends. No input may panic, and a batch accepted lies inside a mapped
// region (here one of 4 KiB).
func FuzzServerFrames(f *testing.F) {
	f.Add(frame(MsgWelcome, `{"version":1,"job":"j","rank":0,"resume":{"epoch":0,"step":0}}`))
	f.Add(frame(MsgBatch, `{"id":1,"epoch":0,"step":0,"region":7,"offset":0,"nbytes":1024,"dims":[1,3,16,16],"labels":[1],"keys":["a"]}`))
	f.Add(frame(MsgBatch, `{"id":2,"region":7,"offset":4000,"nbytes":1000}`))
	f.Add(frame(MsgRollback, `{"committed":true,"token":"dA==","epoch":1,"step":2}`))
	f.Add(frame(MsgError, `{"code":"forbidden","message":"no","fatal":true}`))
	f.Add(frame(MsgRegion, `{"id":7,"size":4096}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		region := make([]byte, 4096)
		c := &Client{regions: map[uint64][]byte{7: region}}
		r := bytes.NewReader(data)
		var buf []byte
		for {
			typ, payload, nb, err := ReadFrame(r, MaxServerFrame, buf)
			buf = nb
			if err != nil {
				return
			}
			switch typ {
			case MsgBatch:
				b, err := c.batch(payload)
				if err != nil {
					continue
				}
				if n := len(b.Images); n > 0 {
					at := int(uintptr(unsafe.Pointer(&b.Images[0])) - uintptr(unsafe.Pointer(&region[0])))
					if at < 0 || at+n > len(region) || cap(b.Images) != n {
						t.Fatalf("batch %d's images [%d,+%d) do not lie inside its region", b.ID, at, n)
					}
				}
			case MsgWelcome:
				var w Welcome
				json.Unmarshal(payload, &w)
			case MsgRollback:
				var rb Rollback
				json.Unmarshal(payload, &rb)
			case MsgError:
				var e ErrorMsg
				json.Unmarshal(payload, &e)
			case MsgRegion:
				var rg Region
				json.Unmarshal(payload, &rg)
			}
		}
	})
}
