package coord_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/longshore/longshore/cluster/certs"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/storage"
)

// ctlPeerEnv runs TestControlPortPeer as the attacked process: "plain",
// or "tls:DIR" with DIR holding certs.WriteHost's files.
const ctlPeerEnv = "LONGSHORE_CTLPORT_PEER"

// spyName is the actor the forged Watches name as their watcher: it
// hears of every watched actor's end.
const spyName = "ctlport-spy"

// TestControlPortPeer is the process TestControlPortOnlyProtocol
// attacks: a coordinator and a node with two trainers in one actor
// system, behind protoactor remote (mutual TLS if asked). It prints its
// control address, waits for the parent to say "go" (after the attack),
// then runs a one-epoch job and checks it finished exactly once, and
// that no forged Watch took: stopping the coordinator and the node
// afterwards tells the spy nothing.
func TestControlPortPeer(t *testing.T) {
	mode := os.Getenv(ctlPeerEnv)
	if mode == "" {
		t.Skip("run by TestControlPortOnlyProtocol")
	}
	h := newHarness(t, 40)
	defer h.sys.Shutdown()
	var opts []remote.ConfigOption
	if dir, ok := strings.CutPrefix(mode, "tls:"); ok {
		cfg, err := wire.LoadTLS(wire.TLSFiles{Cert: filepath.Join(dir, certs.HostCert), Key: filepath.Join(dir, certs.HostKey),
			CA: filepath.Join(dir, certs.CACert), PeerName: "longshore-*"})
		if err != nil {
			t.Fatal(err)
		}
		opts = cfg.RemoteOptions()
	}
	rem, addr, err := wire.StartRemote(h.sys, "127.0.0.1:0", "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Shutdown(false)
	co := h.startCoordinator(1, 0, openJournal(t, storage.NewMemStore("journal")), nil)
	defer co.Shutdown(context.Background())
	nd := h.startNode("n0")
	defer nd.Shutdown(context.Background())
	told := make(chan string, 16) // what the spy heard, in order
	if _, err := h.sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *actor.Terminated:
			told <- "terminated " + m.Who.Id
		case string:
			told <- m
		}
	}), spyName); err != nil {
		t.Fatal(err)
	}

	fmt.Printf("control-address %s\n", addr)
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		t.Fatalf("the parent said %q (%v), want go", line, err)
	}
	h.introduce(co, nd)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a failure backstop
	defer cancel()
	h.train(ctx, nd, co)
	h.check(1)
	if t.Failed() {
		return
	}
	// A watcher is told when the watched actor stops (StopFuture's own
	// watch comes after any forged one, so a forged watcher is told
	// before Shutdown returns), and a system message is handled before a
	// user message posted after it.
	if err := co.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := nd.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	h.sys.Root.Send(actor.NewPID(addr, spyName), "marker")
	for {
		select {
		case m := <-told:
			if m == "marker" {
				b, err := json.Marshal(wire.ControlPortCounts())
				if err != nil {
					t.Fatal(err)
				}
				fmt.Printf("job-done\ncontrol-counts %s\n", b)
				return
			}
			t.Errorf("the spy was told %q: a forged Watch took", m)
		case <-ctx.Done():
			t.Fatal("the spy never got the marker")
		}
	}
}

// TestControlPortOnlyProtocol: the control port of a process running a
// coordinator and a node serves protoactor's message stream and nothing
// else, with and without mutual TLS (the client holding a certificate
// the cluster's CA signed: what any member, or a stolen member key, can
// do). Every other method of the Remoting service, enumerated from its
// descriptor, is refused with an error; message batches that name
// system messages (Stop, PoisonPill, Watch, Unwatch, Terminated, Touch)
// to the coordinator's and the node's actors are refused, and junk
// batches (indices out of range, unknown types, garbage bytes) end their
// stream with an error. The process survives all of it, and a job run
// afterwards finishes exactly once with neither actor watched.
func TestControlPortOnlyProtocol(t *testing.T) {
	if os.Getenv(ctlPeerEnv) != "" {
		t.Skip("this process is the peer")
	}
	// protoactor's remote.Start sets grpc's global logger, which this
	// test's grpc clients read: the binary's one remote starts first.
	if _, err := tlsRemote(); err != nil {
		t.Fatal(err)
	}
	t.Run("plaintext", func(t *testing.T) { attackControlPort(t, "plain", insecure.NewCredentials()) })
	t.Run("mutual-TLS", func(t *testing.T) {
		ca, err := certs.NewCA("ctlport test CA", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		crt, key, err := ca.Issue(certs.Host{Name: "longshore-coordinator", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "host")
		if err := certs.WriteHost(dir, crt, key, ca.CertPEM); err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(ca.Cert)
		client := hostPair(t, ca, "longshore-n9")
		attackControlPort(t, "tls:"+dir, credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, Certificates: []tls.Certificate{client}}))
	})
}

func attackControlPort(t *testing.T, mode string, creds credentials.TransportCredentials) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a failure backstop
	defer cancel()
	peer := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestControlPortPeer$", "-test.v")
	peer.Env = append(os.Environ(), ctlPeerEnv+"="+mode)
	stdin, err := peer.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := peer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	peer.Stderr = peer.Stdout // one stream: a panic's trace lands in the log below
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	linesDone := make(chan struct{})
	addrCh := make(chan string, 1)
	go func() {
		defer close(linesDone)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if a, ok := strings.CutPrefix(sc.Text(), "control-address "); ok {
				addrCh <- a
			}
		}
	}()
	waitPeer := func() error {
		<-linesDone
		return peer.Wait()
	}
	var addr string
	select {
	case addr = <-addrCh:
	case <-linesDone:
		err := peer.Wait()
		t.Fatalf("the peer ended before listening (%v):\n%s", err, strings.Join(lines, "\n"))
	}
	defer func() {
		if t.Failed() {
			peer.Process.Kill()
			waitPeer()
			t.Logf("the peer's output:\n%s", strings.Join(lines, "\n"))
		}
	}()

	conn, err := grpc.Dial(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	desc := remote.Remoting_ServiceDesc
	coordPID, nodePID := actor.NewPID(addr, wire.CoordinatorActor), actor.NewPID(addr, wire.NodeActor)
	spy := actor.NewPID(addr, spyName)

	// The message stream: system messages to our actors.
	sysMsgs := []proto.Message{
		&actor.Watch{Watcher: spy}, &actor.Unwatch{Watcher: spy}, &actor.Watch{Watcher: spy},
		&actor.Terminated{Who: coordPID}, &actor.Touch{}, &actor.PoisonPill{}, &actor.Stop{},
	}
	batch := &remote.MessageBatch{Targets: []*actor.PID{coordPID, nodePID}}
	for _, m := range sysMsgs {
		data, typeName, err := remote.Serialize(m, 0)
		if err != nil {
			t.Fatal(err)
		}
		batch.TypeNames = append(batch.TypeNames, typeName)
		for target := range batch.Targets {
			batch.Envelopes = append(batch.Envelopes, &remote.MessageEnvelope{
				TypeId: int32(len(batch.TypeNames) - 1), MessageData: data, Target: int32(target)})
		}
	}
	want := wire.ControlCounts{RefusedCalls: map[string]uint64{}, RefusedMessages: uint64(len(batch.Envelopes))}
	if err := sendBatches(ctx, conn, batch); err != nil {
		t.Errorf("system messages: the stream ended with %v, want the batch read and the stream closed", err)
	}

	// Junk: each batch on a stream of its own, since the first bad
	// one ends it.
	_, stopType, err := remote.Serialize(&actor.Stop{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ne, neType, err := remote.Serialize(&wire.NodeEvents{Node: "n0"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	targets := []*actor.PID{coordPID}
	for _, j := range []struct {
		name  string
		batch *remote.MessageBatch
		// malformed: the guard ends the stream (InvalidArgument);
		// dropped: the guard drops it, the stream goes on; bad data:
		// protoactor's reader ends the stream.
		outcome string
	}{
		{"type index out of range", &remote.MessageBatch{TypeNames: []string{neType}, Targets: targets,
			Envelopes: []*remote.MessageEnvelope{{TypeId: 7, MessageData: ne}}}, "malformed"},
		{"negative type index", &remote.MessageBatch{TypeNames: []string{neType}, Targets: targets,
			Envelopes: []*remote.MessageEnvelope{{TypeId: -1, MessageData: ne}}}, "malformed"},
		{"target index out of range", &remote.MessageBatch{TypeNames: []string{neType}, Targets: targets,
			Envelopes: []*remote.MessageEnvelope{{MessageData: ne, Target: 3}}}, "malformed"},
		{"no targets", &remote.MessageBatch{TypeNames: []string{neType},
			Envelopes: []*remote.MessageEnvelope{{MessageData: ne}}}, "malformed"},
		{"empty target", &remote.MessageBatch{TypeNames: []string{neType}, Targets: []*actor.PID{{}},
			Envelopes: []*remote.MessageEnvelope{{MessageData: ne}}}, "dropped"}, // not this process: dropped
		{"another process's target", &remote.MessageBatch{TypeNames: []string{neType}, Targets: []*actor.PID{actor.NewPID("127.0.0.1:1", wire.CoordinatorActor)},
			Envelopes: []*remote.MessageEnvelope{{MessageData: ne}}}, "dropped"}, // not relayed: dropped
		{"sender index out of range", &remote.MessageBatch{TypeNames: []string{neType}, Targets: targets,
			Envelopes: []*remote.MessageEnvelope{{MessageData: ne, Sender: 5}}}, "malformed"},
		{"negative sender index", &remote.MessageBatch{TypeNames: []string{neType}, Targets: targets,
			Envelopes: []*remote.MessageEnvelope{{MessageData: ne, Sender: -4}}}, "malformed"},
		{"unknown type", &remote.MessageBatch{TypeNames: []string{"longshore.wire.NoSuchMessage"}, Targets: targets,
			Envelopes: []*remote.MessageEnvelope{{MessageData: ne}}}, "malformed"},
		{"garbage bytes", &remote.MessageBatch{TypeNames: []string{neType}, Targets: targets,
			Envelopes: []*remote.MessageEnvelope{{MessageData: []byte{0xff, 0xff, 0xff}}}}, "bad data"},
		{"stop, JSON", &remote.MessageBatch{TypeNames: []string{stopType}, Targets: targets,
			Envelopes: []*remote.MessageEnvelope{{MessageData: []byte("{}"), SerializerId: 1}}}, "dropped"},
	} {
		err := sendBatches(ctx, conn, j.batch)
		switch j.outcome {
		case "malformed":
			want.MalformedBatches++
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("junk %q: the stream ended with %v, want InvalidArgument", j.name, err)
			}
		case "bad data":
			if err == nil {
				t.Errorf("junk %q: the stream ended cleanly, want an error", j.name)
			}
		case "dropped":
			want.RefusedMessages += uint64(len(j.batch.Envelopes))
			if err != nil {
				t.Errorf("junk %q: the stream ended with %v, want the batch dropped and the stream ended cleanly", j.name, err)
			}
		}
		t.Logf("junk %q: the stream ended with %v", j.name, err)
	}

	// Every other method: refused with an error, whatever the request.
	for _, m := range desc.Methods {
		method := "/" + desc.ServiceName + "/" + m.MethodName
		want.RefusedCalls[m.MethodName]++
		err := conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{})
		if c := status.Code(err); c != codes.Unimplemented && c != codes.PermissionDenied {
			t.Errorf("%s: %v (%s), want Unimplemented or PermissionDenied", method, err, c)
		} else {
			t.Logf("%s: refused: %v", method, err)
		}
	}
	for _, s := range desc.Streams {
		if s.StreamName == "Receive" {
			continue // the protocol's, above
		}
		method := "/" + desc.ServiceName + "/" + s.StreamName
		want.RefusedCalls[s.StreamName]++
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: s.StreamName, ServerStreams: true, ClientStreams: true}, method)
		if err == nil {
			if err = st.SendMsg(&emptypb.Empty{}); err == nil {
				err = st.RecvMsg(&emptypb.Empty{})
			}
		}
		if c := status.Code(err); c != codes.Unimplemented && c != codes.PermissionDenied {
			t.Errorf("%s: %v (%s), want Unimplemented or PermissionDenied", method, err, c)
		}
	}
	// The process survived (grpc does not recover a handler's panic):
	// the port still answers the protocol.
	if err := sendBatches(ctx, conn); err != nil {
		t.Fatalf("after the attack: the message stream: %v", err)
	}

	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	err = waitPeer()
	done := false
	var got wire.ControlCounts
	for _, l := range lines {
		done = done || l == "job-done"
		if c, ok := strings.CutPrefix(l, "control-counts "); ok {
			if err := json.Unmarshal([]byte(c), &got); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err != nil || !done {
		t.Fatalf("the peer: %v, job-done printed: %v", err, done)
	}
	if got.RefusedCalls == nil {
		t.Fatal("the peer printed no control-counts")
	}
	for m, n := range got.RefusedCalls {
		if n != want.RefusedCalls[m] {
			t.Errorf("refused calls of %s: %d, want %d", m, n, want.RefusedCalls[m])
		}
	}
	if got.RefusedMessages != want.RefusedMessages || got.MalformedBatches != want.MalformedBatches || got.Panics != 0 {
		t.Errorf("control counts %+v, want %+v", got, want)
	}
	t.Logf("control counts: %+v", got)
}

// sendBatches opens a message stream on conn, connects as a server
// would, sends batches, closes its side and waits for the server to end
// the stream: nil once the server has read them all and ended cleanly.
func sendBatches(ctx context.Context, conn *grpc.ClientConn, batches ...*remote.MessageBatch) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "attacker", Address: "127.0.0.1:1"}},
	}}}); err != nil {
		return err
	}
	if m, err := stream.Recv(); err != nil {
		return err
	} else if m.GetConnectResponse() == nil {
		return errors.New("no connect response")
	}
	for _, b := range batches {
		if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}); err != nil {
			return err
		}
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
