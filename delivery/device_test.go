package delivery

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
)

// serveDevice serves one rank whose pipelines upload to device 0 of tw
// and export the device slots.
func (e testEnv) serveDevice(t *testing.T, tw *gpu.Twin) (*Server, gpu.Device) {
	t.Helper()
	dev, err := tw.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	e.deps.NewUploader = func(_ int, pool *gpu.HostPool) (gpu.Uploader, error) {
		return gpu.NewDeviceUploader(dev, pool, gpu.UploaderConfig{Export: true})
	}
	dir, err := os.MkdirTemp("", "lsf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rd := &RankDevice{Info: dev.Info(), Export: true}
	s, err := New(Config{Dir: dir, Ranks: 1, Job: "test", RankDevice: func(int) *RankDevice { return rd }}, Standalone(e.cfg, e.ds, 1, e.deps))
	if err != nil {
		t.Fatal(err)
	}
	return s, dev
}

// rawTrainer speaks the protocol by hand: what the Python client does for
// device batches, with the twin's IPC standing in for cuIpcOpenMemHandle.
type rawTrainer struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func (r *rawTrainer) send(typ feed.MsgType, v any) {
	b, err := feed.AppendFrame(nil, typ, v)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.conn.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawTrainer) read() (feed.MsgType, []byte) {
	r.conn.SetReadDeadline(time.Now().Add(time.Minute)) // a failure backstop only
	typ, payload, _, err := feed.ReadFrame(r.br, feed.MaxServerFrame, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	return typ, append([]byte(nil), payload...)
}

// Device batches through the feed: the welcome names the rank's device,
// each device region comes once before its first batch, each batch's
// device bytes are the reference pixels, releases free the slots, and the
// trainer closing its import before it leaves keeps the IPC lifetime rule
// (the twin refuses to free device memory still imported).
func TestDeviceBatchesThroughTheFeed(t *testing.T) {
	for _, askDevice := range []bool{true, false} {
		t.Run(fmt.Sprint("device=", askDevice), func(t *testing.T) {
			e := newEnv(t, 40)
			want := e.reference(t, 1, 0)
			tw := gpu.NewTwin(gpu.TwinConfig{})
			s, dev := e.serveDevice(t, tw)
			conn, err := net.Dial("unix", s.SocketPath(0))
			if err != nil {
				t.Fatal(err)
			}
			tr := &rawTrainer{t: t, conn: conn, br: bufio.NewReader(conn)}
			hello := feed.Hello{Version: feed.Version, Client: "test"}
			if askDevice {
				hello.Device = "cuda"
			}
			tr.send(feed.MsgHello, hello)
			typ, p := tr.read()
			var w feed.Welcome
			if typ != feed.MsgWelcome || json.Unmarshal(p, &w) != nil {
				t.Fatalf("first message %s %s", typ, p)
			}
			wantDelivery := map[bool]string{true: feed.DeliveryCUDAIPC, false: feed.DeliveryHost}[askDevice]
			if w.Delivery != wantDelivery || w.Device == nil || w.Device.UUID != dev.Info().UUID {
				t.Fatalf("welcome delivery %q device %+v", w.Delivery, w.Device)
			}
			imports := map[uint64]gpu.DevicePtr{} // device region -> base, as opened
			got := map[sumKey]uint32{}
			for done := false; !done; {
				typ, p := tr.read()
				switch typ {
				case feed.MsgRegion, feed.MsgEpochEnd:
				case feed.MsgDeviceRegion:
					var dr feed.DeviceRegion
					json.Unmarshal(p, &dr)
					if !askDevice {
						t.Fatal("device region sent to a host trainer")
					}
					if _, ok := imports[dr.Region]; ok {
						t.Fatalf("device region %d announced twice", dr.Region)
					}
					if len(dr.Handle) != len(gpu.IPCHandle{}) || dr.Device.UUID != w.Device.UUID {
						t.Fatalf("device region %+v", dr)
					}
					_, base, err := tw.OpenIPC(gpu.IPCHandle(dr.Handle))
					if err != nil {
						t.Fatal(err)
					}
					imports[dr.Region] = base
				case feed.MsgBatch:
					var bd feed.BatchDesc
					json.Unmarshal(p, &bd)
					if !askDevice {
						if bd.DeviceRegion != 0 {
							t.Fatalf("device fields for a host trainer: %+v", bd)
						}
						tr.send(feed.MsgRelease, feed.Release{IDs: []uint64{bd.ID}})
						continue
					}
					base, ok := imports[bd.DeviceRegion]
					if !ok {
						t.Fatalf("batch %d names device region %d, not announced", bd.ID, bd.DeviceRegion)
					}
					img, err := tw.ReadDevice(0, base+gpu.DevicePtr(bd.DeviceOffset), int(bd.NBytes))
					if err != nil {
						t.Fatal(err)
					}
					addSums(got, bd.Epoch, bd.Step, img, len(bd.Labels))
					tr.send(feed.MsgRelease, feed.Release{IDs: []uint64{bd.ID}})
				case feed.MsgEnd:
					done = true
				default:
					t.Fatalf("unexpected %s %s", typ, p)
				}
			}
			if askDevice {
				if len(got) != len(want) {
					t.Fatalf("%d samples, want %d", len(got), len(want))
				}
				for k, v := range want {
					if got[k] != v {
						t.Fatalf("sample %+v: device checksum %08x, want %08x", k, got[k], v)
					}
				}
			}
			for _, base := range imports { // the trainer closes its imports, then leaves
				if err := tw.CloseIPC(base); err != nil {
					t.Fatal(err)
				}
			}
			tr.send(feed.MsgBye, struct{}{})
			conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if st := tw.Stats(); st.Live() != 1 { // the test's device context
				t.Fatalf("twin holds %+v after shutdown", st)
			}
			if v := tw.Violations(); len(v) > 0 {
				t.Fatalf("violations %q", v)
			}
			dev.Close()
		})
	}
}

// A trainer that asks for device batches from a node that does not
// export them is told so in the welcome and gets host batches.
func TestDeviceAskedButNotExported(t *testing.T) {
	e := newEnv(t, 16)
	dir, err := os.MkdirTemp("", "lsf")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rd := &RankDevice{Info: gpu.DeviceInfo{Ordinal: 0, UUID: "GPU-x"}}
	s, err := New(Config{Dir: dir, Ranks: 1, RankDevice: func(int) *RankDevice { return rd }}, Standalone(e.cfg, e.ds, 1, e.deps))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	conn, err := net.Dial("unix", s.SocketPath(0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tr := &rawTrainer{t: t, conn: conn, br: bufio.NewReader(conn)}
	tr.send(feed.MsgHello, feed.Hello{Version: feed.Version, Device: "cuda"})
	_, p := tr.read()
	var w feed.Welcome
	json.Unmarshal(p, &w)
	if w.Delivery != feed.DeliveryHost || w.Device == nil || w.Device.UUID != "GPU-x" {
		t.Fatalf("welcome delivery %q device %+v", w.Delivery, w.Device)
	}
	for {
		typ, p := tr.read()
		if typ == feed.MsgDeviceRegion {
			t.Fatal("device region without an export")
		}
		if typ == feed.MsgBatch {
			var bd feed.BatchDesc
			json.Unmarshal(p, &bd)
			if bd.DeviceRegion != 0 {
				t.Fatalf("device fields without an export: %+v", bd)
			}
			return
		}
	}
}
