package wire_test

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/wire"
)

const peerEnv = "LONGSHORE_WIRE_PEER"

func quiet() actor.ConfigOption {
	return actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) })
}

func fence(i, s uint64) cluster.Fence { return cluster.Fence{Incarnation: i, Seq: s} }

func testEvents() []cluster.Event {
	return []cluster.Event{
		cluster.Request{Rank: "n1/0", Session: fence(1, 2), Epoch: 3, Through: 512},
		cluster.Progress{Rank: "n1/0", Session: fence(1, 2), Lease: fence(1, 9), Through: 77},
		cluster.LeaseDone{Rank: "n1/1", Session: fence(1, 3), Lease: fence(1, 10), Through: 90},
		cluster.Commit{Rank: "n1/1", Session: fence(1, 3), Epoch: 2, Lease: fence(1, 10), Through: 88, Offset: 300, Step: 9},
		cluster.Commit{Rank: "n1/0", Session: fence(1, 2), Epoch: 2, Lease: fence(1, 9), Through: 80, Offset: 310, Step: 40,
			Cuts: []int64{150, 301}, CutsTold: true},
		cluster.Commit{Rank: "n1/0", Session: fence(1, 2), Epoch: 1, Lease: fence(1, 8), Through: 8, Offset: 8, Step: 1, CutsTold: true},
		cluster.Reset{Rank: "n1/1", Session: fence(1, 3)},
	}
}

var testLease = cluster.Lease{Rank: "n1/0", Session: fence(1, 2), Fence: fence(1, 11), Epoch: 1, Index: 4, Start: 16, End: 32, Pad: true}

func testMail() *wire.NodeMail {
	return &wire.NodeMail{
		Welcomes: []*wire.Welcome{wire.WelcomeOf(cluster.Welcome{Node: "n1", Incarnation: 42,
			Ranks: []cluster.RankSession{{Rank: "n1/0", Session: fence(1, 2), FirstEpoch: 1,
				Committed: []cluster.RankCommit{{Rank: "n1/0", Session: fence(0, 7), Epoch: 1, Step: 3, Offset: 32, Gen: 9}}}}},
			&wire.Job{Samples: 300, Seed: 7, Block: 1, Epochs: 2, ShardSize: 16, BatchSize: 8, ManifestDigest: "300:ab", Balance: "dynamic"},
			func(rc cluster.RankCommit) string { return fmt.Sprintf("tok-%d", rc.Gen) })},
		Evictions: []*wire.Eviction{wire.EvictionOf(cluster.Eviction{Node: "n2", Incarnation: 5})},
		Grants:    []*wire.Lease{wire.LeaseOf(testLease)},
		Revokes:   []*wire.Revoke{wire.RevokeOf(cluster.Revoke{Rank: "n1/0", Session: fence(1, 2), Lease: fence(1, 11), From: 20})},
		Ends:      []*wire.StreamEnd{wire.StreamEndOf(cluster.StreamEnd{Rank: "n1/0", Session: fence(1, 2), Epoch: 1, Length: 50, Leases: 4, Fence: fence(1, 12), EpochComplete: true})},
		Acks:      []*wire.Ack{wire.AckOf(cluster.Ack{Rank: "n1/0", Session: fence(1, 2), Epoch: 1, Offset: 48, Step: 5})},
		Fenced:    []*wire.Fence{wire.FenceOf(fence(1, 1))},
		Done:      true,
	}
}

// TestRemotePeer is the other end of TestRemoteRoundTrip, run in a child
// process: an actor that answers NodeEvents with testMail and echoes the
// events back.
func TestRemotePeer(t *testing.T) {
	if os.Getenv(peerEnv) == "" {
		t.Skip("run by TestRemoteRoundTrip")
	}
	sys := actor.NewActorSystem(quiet())
	rem, addr, err := wire.StartRemote(sys, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Shutdown(false)
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*wire.NodeEvents); ok {
			c.Respond(testMail())
			c.Send(c.Sender(), m)
		}
	}), "echo"); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("peer-address %s\n", addr)
	time.Sleep(30 * time.Second) // the parent kills this process when done
}

// parentRemote is TestRemoteRoundTrip's end, started once per process
// so that -count=N does not start a second remote (see below).
var parentRemote = sync.OnceValues(func() (*actor.ActorSystem, error) {
	sys := actor.NewActorSystem(quiet())
	_, _, err := wire.StartRemote(sys, "127.0.0.1:0", "")
	return sys, err
})

// TestRemoteRoundTrip sends every message kind between two actor systems
// over protoactor remote on loopback and checks they arrive intact and
// convert back to the same cluster values. The peer runs in a child
// process (this test binary, re-executed): protoactor's remote.Start sets
// grpc's global logger, which races with a server already running in the
// same process, so two remotes in one process are not race-clean.
func TestRemoteRoundTrip(t *testing.T) {
	if os.Getenv(peerEnv) != "" {
		t.Skip("this process is the peer")
	}
	sys, err := parentRemote()
	if err != nil {
		t.Fatal(err)
	}
	peer := exec.Command(os.Args[0], "-test.run=^TestRemotePeer$")
	peer.Env = append(os.Environ(), peerEnv+"=1")
	out, err := peer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	peer.Stderr = os.Stderr
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { peer.Process.Kill(); peer.Wait() }()
	sc := bufio.NewScanner(out)
	peerAddr := ""
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "peer-address "); ok {
			peerAddr = a
			break
		}
	}
	if peerAddr == "" {
		t.Fatal("the peer did not report its address")
	}

	events := testEvents()
	ne := &wire.NodeEvents{Node: "n1", Incarnation: 42}
	for _, ev := range events {
		we, err := wire.EventOf(ev)
		if err != nil {
			t.Fatal(err)
		}
		ne.Events = append(ne.Events, we)
	}
	got := make(chan any, 4)
	sink := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *wire.NodeEvents, *wire.NodeMail:
			got <- m
		}
	}))
	defer sys.Root.Stop(sink)
	sys.Root.RequestWithCustomSender(actor.NewPID(peerAddr, "echo"), ne, sink)

	var gotMail *wire.NodeMail
	var gotEvents *wire.NodeEvents
	for gotMail == nil || gotEvents == nil {
		select {
		case m := <-got:
			switch m := m.(type) {
			case *wire.NodeMail:
				gotMail = m
			case *wire.NodeEvents:
				gotEvents = m
			}
		case <-time.After(time.Minute): // a failure backstop only
			t.Fatal("no reply over remote within a minute")
		}
	}
	if want := testMail(); !proto.Equal(gotMail, want) {
		t.Errorf("mail changed in transit:\n got %v\nwant %v", gotMail, want)
	}
	if !proto.Equal(gotEvents, ne) {
		t.Errorf("events changed in transit:\n got %v\nwant %v", gotEvents, ne)
	}
	for i, we := range gotEvents.Events {
		if back := we.Cluster(); !reflect.DeepEqual(back, events[i]) {
			t.Errorf("event %d: %+v, want %+v", i, back, events[i])
		}
	}
	w := gotMail.Welcomes[0].Cluster()
	if w.Node != "n1" || w.Incarnation != 42 || len(w.Ranks) != 1 || w.Ranks[0].Session != fence(1, 2) || w.Ranks[0].FirstEpoch != 1 {
		t.Errorf("welcome %+v", w)
	}
	if rc := w.Ranks[0].Committed; len(rc) != 1 || rc[0] != (cluster.RankCommit{Rank: "n1/0", Session: fence(0, 7), Epoch: 1, Step: 3, Offset: 32}) {
		t.Errorf("welcome's commit records %+v", rc)
	}
	if a := gotMail.Welcomes[0].Ranks[0].Committed[0].Cluster(); a.Token != "tok-9" || a.Session != fence(0, 7) {
		t.Errorf("welcome's commit record as an ack: %+v", a)
	}
	if l := gotMail.Grants[0].Cluster(); l != testLease {
		t.Errorf("lease %+v", l)
	}
	if e := gotMail.Ends[0].Cluster(); e.Length != 50 || e.Leases != 4 || !e.EpochComplete || e.Fence != fence(1, 12) {
		t.Errorf("stream end %+v", e)
	}
	if a := gotMail.Acks[0].Cluster(); a.Offset != 48 || a.Step != 5 || a.Epoch != 1 {
		t.Errorf("ack %+v", a)
	}
	if r := gotMail.Revokes[0].Cluster(); r.From != 20 || r.Lease != fence(1, 11) {
		t.Errorf("revoke %+v", r)
	}
	if e := gotMail.Evictions[0].Cluster(); e != (cluster.Eviction{Node: "n2", Incarnation: 5}) {
		t.Errorf("eviction %+v", e)
	}
}

func TestConvertRoundTrip(t *testing.T) {
	j := cluster.Join{Node: "n", Incarnation: 3, Ranks: []string{"n/0"}}
	if back := wire.JoinOf(j).Cluster(); back.Node != j.Node || back.Incarnation != 3 || back.Ranks[0] != "n/0" {
		t.Errorf("join %+v", back)
	}
	if back := wire.LeaveOf(cluster.Leave{Node: "n", Incarnation: 3}).Cluster(); back != (cluster.Leave{Node: "n", Incarnation: 3}) {
		t.Errorf("leave %+v", back)
	}
	if back := wire.FailOf(cluster.Fail{Node: "n", Incarnation: 3}).Cluster(); back != (cluster.Fail{Node: "n", Incarnation: 3}) {
		t.Errorf("fail %+v", back)
	}
	if _, err := wire.EventOf(cluster.Tick{}); err == nil {
		t.Error("EventOf(Tick) succeeded; a tick never travels")
	}
	if ev := (&wire.Event{}).Cluster(); ev != nil {
		t.Errorf("empty event converts to %+v, want nil", ev)
	}
	var nilFence *wire.Fence
	if !nilFence.Cluster().IsZero() {
		t.Error("nil fence is not the zero fence")
	}
}
