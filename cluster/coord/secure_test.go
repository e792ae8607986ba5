package coord_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/certs"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/storage"
)

// tlsRemote is this test binary's one remote (protoactor's remote.Start
// races with a remote already serving in the same process): mutual TLS
// under ca, on 127.0.0.1.
var tlsRemote = sync.OnceValues(func() (*tlsSetup, error) {
	ca, err := certs.NewCA("coord test CA", time.Hour)
	if err != nil {
		return nil, err
	}
	crt, key, err := ca.Issue(certs.Host{Name: "longshore-coordinator", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cfg, err := wire.NewTLS(pair, pool, "longshore-*")
	if err != nil {
		return nil, err
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	_, addr, err := wire.StartRemote(sys, "127.0.0.1:0", "", cfg.RemoteOptions()...)
	if err != nil {
		return nil, err
	}
	return &tlsSetup{ca: ca, pool: pool, sys: sys, addr: addr}, nil
})

type tlsSetup struct {
	ca   *certs.CA
	pool *x509.CertPool
	sys  *actor.ActorSystem
	addr string
}

// records is a slog handler that hands each record's message to a channel.
type records chan string

func (c records) Enabled(context.Context, slog.Level) bool { return true }
func (c records) Handle(_ context.Context, r slog.Record) error {
	select {
	case c <- r.Message:
	default:
	}
	return nil
}
func (c records) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c records) WithGroup(string) slog.Handler      { return c }

// forge sends events as node's over protoactor's wire protocol to the
// coordinator actor at addr, speaking TLS as creds says, the way a
// stranger who read the fences off the network would. It returns the
// error that stopped it before the batch was read, nil once the server
// has read it.
func forge(addr string, creds credentials.TransportCredentials, node string, inc uint64, events ...cluster.Event) error {
	ne := &wire.NodeEvents{Node: node, Incarnation: inc}
	for _, ev := range events {
		we, err := wire.EventOf(ev)
		if err != nil {
			return err
		}
		ne.Events = append(ne.Events, we)
	}
	data, typeName, err := remote.Serialize(ne, 0)
	if err != nil {
		return err
	}
	conn, err := grpc.Dial(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "forger", Address: "127.0.0.1:1"}},
	}}}); err != nil {
		return err
	}
	if m, err := stream.Recv(); err != nil {
		return err
	} else if m.GetConnectResponse() == nil {
		return errors.New("no connect response")
	}
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
		TypeNames: []string{typeName},
		Targets:   []*actor.PID{actor.NewPID(addr, wire.CoordinatorActor)},
		Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: data, Target: 0}},
	}}}); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	// The server reads the batch, hands it to the actor, then sees the
	// end of the stream and ends its side: wait for that, or closing the
	// connection could drop the batch unread.
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// clientTLS presents cert (if any) whatever the server asks for.
func clientTLS(roots *x509.CertPool, cert ...tls.Certificate) *tls.Config {
	c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	if len(cert) > 0 {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert[0], nil }
	}
	return c
}

func hostPair(t *testing.T, ca *certs.CA, name string) tls.Certificate {
	t.Helper()
	crt, key, err := ca.Issue(certs.Host{Name: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// journalObjects is the journal's objects and their ETags.
func journalObjects(t *testing.T, st storage.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := st.List(context.Background(), "", func(o storage.ObjectInfo) error { out[o.Key] = o.ETag; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestForgedControlRefused: a coordinator whose remote requires mutual
// TLS, with node n1 joined. Clients with no TLS, no certificate, a
// self-signed one and one signed by another CA connect to its port and
// send n1's forged request, commit and lease-done (its session fences
// guessed right): each is refused at the TLS handshake, and neither the
// journal, the commit log nor the coordinator's counters change. The
// same forgery from a client the CA certified does reach the coordinator
// and starts the epoch: without TLS, that is what anyone could do.
func TestForgedControlRefused(t *testing.T) {
	setup, err := tlsRemote()
	if err != nil {
		t.Fatal(err)
	}
	jstore := storage.NewMemStore("journal")
	jn := openJournal(t, jstore)
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Seed, cfg.Incarnation = 64, 1, 8, 5, jn.Incarnation()
	logs := make(records, 1024)
	var commitLog strings.Builder
	co, err := coord.Start(setup.sys, coord.Config{Cluster: cfg, BatchSize: 4, Digest: "64:test",
		TickEvery: time.Hour, Journal: jn, CommitLog: &commitLog, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Shutdown(context.Background())
	// n1's mail goes to an actor that does not exist on this system:
	// nothing is dialed, it is dropped.
	co.Membership(gossip.Event{Kind: gossip.Joined, Name: "n1", Meta: gossip.Meta{ID: "n1", Role: gossip.RoleNode,
		ActorAddr: setup.addr, Ranks: []string{"n1/0"}, Incarnation: 7}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := co.Status(ctx) // answered after the join was stepped
	if err != nil {
		t.Fatal(err)
	}
	journalBefore := journalObjects(t, jstore)

	session := cluster.Fence{Incarnation: cfg.Incarnation, Seq: 1} // the first fence this life hands out
	lease := cluster.Fence{Incarnation: cfg.Incarnation, Seq: 2}
	forged := []cluster.Event{
		cluster.Request{Rank: "n1/0", Session: session, Epoch: 0, Through: 64},
		cluster.Commit{Rank: "n1/0", Session: session, Epoch: 0, Lease: lease, Through: 8, Offset: 8, Step: 1},
		cluster.LeaseDone{Rank: "n1/0", Session: session, Lease: lease, Through: 8},
	}
	self, selfKey, err := certs.SelfSigned(certs.Host{Name: "longshore-x"})
	if err != nil {
		t.Fatal(err)
	}
	selfPair, err := tls.X509KeyPair(self, selfKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		tls  *tls.Config // nil: plaintext
		want string      // the TLS alert the handshake ends with
	}{
		{"plaintext", nil, ""},
		{"no certificate", clientTLS(setup.pool), "certificate required"},
		{"self-signed", clientTLS(setup.pool, selfPair), "unknown certificate authority"},
		{"another CA", clientTLS(setup.pool, hostPair(t, other, "longshore-x")), "unknown certificate authority"},
	} {
		creds := insecure.NewCredentials()
		if c.tls != nil {
			creds = credentials.NewTLS(c.tls)
		}
		err := forge(setup.addr, creds, "n1", 7, forged...)
		if err == nil {
			t.Errorf("%s: the forged batch was written", c.name)
			continue
		}
		if c.tls != nil {
			conn, herr := tls.Dial("tcp", setup.addr, c.tls)
			if herr == nil {
				conn.SetReadDeadline(time.Now().Add(time.Minute))
				_, herr = conn.Read(make([]byte, 1)) // TLS 1.3: the server's verdict comes with the first read
				conn.Close()
			}
			if herr == nil || !strings.Contains(herr.Error(), c.want) {
				t.Errorf("%s: handshake ended with %v, want %q", c.name, herr, c.want)
			}
		}
		t.Logf("%s: refused: %v", c.name, err)
	}
	after, err := co.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Stats != before.Stats || len(after.Epochs) != len(before.Epochs) {
		t.Errorf("the coordinator's state changed: %+v → %+v", before.Stats, after.Stats)
	}
	if got := journalObjects(t, jstore); fmt.Sprint(got) != fmt.Sprint(journalBefore) {
		t.Errorf("the journal changed: %v → %v", journalBefore, got)
	}
	if commitLog.Len() > 0 {
		t.Errorf("the commit log changed: %q", commitLog.String())
	}

	// The same forgery over a certified connection is stepped.
	if err := forge(setup.addr, credentials.NewTLS(clientTLS(setup.pool, hostPair(t, setup.ca, "longshore-n9"))), "n1", 7, forged...); err != nil {
		t.Fatalf("a certified client: %v", err)
	}
	for granted := false; !granted; {
		select {
		case msg := <-logs:
			granted = msg == "first lease"
		case <-ctx.Done():
			t.Fatal("the certified client's forged request was not stepped")
		}
	}
	st, err := co.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Stats.Grants == 0 {
		t.Errorf("the certified client's forged request granted nothing: %+v", st.Stats)
	}
	t.Logf("certified client: the forged request was stepped (%d leases granted)", st.Stats.Grants)
}
