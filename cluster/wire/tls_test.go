package wire_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/longshore/longshore/cluster/certs"
	"github.com/longshore/longshore/cluster/wire"
)

// pki is a test CA and the host certificates it signs.
type pki struct {
	t  testing.TB
	ca *certs.CA
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	ca, err := certs.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, ca: ca}
}

func (p *pki) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	return pool
}

// host is a certificate for name valid at 127.0.0.1.
func (p *pki) host(name string) tls.Certificate {
	p.t.Helper()
	crt, key, err := p.ca.Issue(certs.Host{Name: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		p.t.Fatal(err)
	}
	return keyPair(p.t, crt, key)
}

// attacker is a client configuration that trusts roots and presents
// cert whatever the server asks for (crypto/tls would otherwise send no
// certificate the server's CA did not sign).
func attacker(roots *x509.CertPool, cert ...tls.Certificate) *tls.Config {
	c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	if len(cert) > 0 {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert[0], nil }
	}
	return c
}

func keyPair(t testing.TB, crt, key []byte) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
}

// echoServer starts, in a child process (this test binary re-executed:
// protoactor's remote.Start sets grpc's global logger, which races with a
// remote already running in the same process, and TestRemoteRoundTrip has
// this process's one), a remote on 127.0.0.1 with mutual TLS under a test
// CA, admitting peers named node-*, with an actor "echo" that answers
// each NodeEvents with itself. It returns the CA and the address; the
// child is killed when the test ends.
func echoServer(t *testing.T) (*pki, string) {
	t.Helper()
	p := newPKI(t)
	dir := t.TempDir()
	crt, key, err := p.ca.Issue(certs.Host{Name: "coordinator", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteHost(dir, crt, key, p.ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTLSEchoProc$")
	cmd.Env = append(os.Environ(), tlsEchoEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "echo-address "); ok {
			go io.Copy(io.Discard, out)
			return p, a
		}
	}
	t.Fatal("the echo server did not report its address")
	return nil, ""
}

const tlsEchoEnv = "LONGSHORE_TLS_ECHO" // the echo server's certificate directory

// TestTLSEchoProc is echoServer's child: it serves until it is killed.
func TestTLSEchoProc(t *testing.T) {
	dir := os.Getenv(tlsEchoEnv)
	if dir == "" {
		t.Skip("run by echoServer")
	}
	cfg, err := wire.LoadTLS(wire.TLSFiles{Cert: filepath.Join(dir, certs.HostCert), Key: filepath.Join(dir, certs.HostKey),
		CA: filepath.Join(dir, certs.CACert), PeerName: "node-*"})
	if err != nil {
		t.Fatal(err)
	}
	sys := quietSystem()
	_, addr, err := wire.StartRemote(sys, "127.0.0.1:0", "", cfg.RemoteOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*wire.NodeEvents); ok {
			c.Respond(m)
		}
	}), "echo"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("echo-address " + addr)
	select {} // until the parent kills this process
}

const tlsPeerEnv = "LONGSHORE_TLS_PEER" // the certificate directory; the echo address in tlsPeerAddrEnv
const tlsPeerAddrEnv = "LONGSHORE_TLS_PEER_ADDR"

// TestTLSPeer is TestTLSRoundTrip's other end, run in a child process:
// a remote with the host certificate in $LONGSHORE_TLS_PEER (read with
// LoadTLS) asks the parent's echo actor and prints the answer.
func TestTLSPeer(t *testing.T) {
	dir := os.Getenv(tlsPeerEnv)
	if dir == "" {
		t.Skip("run by TestTLSRoundTrip")
	}
	cfg, err := wire.LoadTLS(wire.TLSFiles{Cert: filepath.Join(dir, certs.HostCert), Key: filepath.Join(dir, certs.HostKey),
		CA: filepath.Join(dir, certs.CACert), PeerName: "coord*"})
	if err != nil {
		t.Fatal(err)
	}
	sys := quietSystem()
	if _, _, err := wire.StartRemote(sys, "127.0.0.1:0", "", cfg.RemoteOptions()...); err != nil {
		t.Fatal(err)
	}
	res, err := sys.Root.RequestFuture(actor.NewPID(os.Getenv(tlsPeerAddrEnv), "echo"), &wire.NodeEvents{Node: "n1", Incarnation: 3}, 30*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := res.(*wire.NodeEvents); !ok || m.Node != "n1" || m.Incarnation != 3 {
		t.Fatalf("answer %T %v", res, res)
	}
	fmt.Println("tls-peer: answered")
}

// TestTLSRoundTrip: two remotes with certificates of one CA exchange a
// request and its answer; the answer travels on a connection the server
// dialed back to the requester, so both directions are mutual TLS.
func TestTLSRoundTrip(t *testing.T) {
	if os.Getenv(tlsPeerEnv) != "" {
		t.Skip("this process is the peer")
	}
	p, addr := echoServer(t)
	dir := t.TempDir()
	crt, key, err := p.ca.Issue(certs.Host{Name: "node-b", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteHost(dir, crt, key, p.ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	peer := exec.Command(os.Args[0], "-test.run=^TestTLSPeer$", "-test.v")
	peer.Env = append(os.Environ(), tlsPeerEnv+"="+dir, tlsPeerAddrEnv+"="+addr)
	out, err := peer.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "tls-peer: answered") {
		t.Fatalf("peer: %v\n%s", err, out)
	}
}

// connect opens protoactor's remoting stream to addr with creds and does
// what an endpoint writer does first: a connect request, then waits for
// the answer. It returns the error that stopped it, nil if the server
// accepted the connection.
func connect(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.Dial(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "x", Address: "127.0.0.1:1"}},
	}}}); err != nil {
		return err
	}
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	if m.GetConnectResponse() == nil {
		return errors.New("no connect response")
	}
	return nil
}

// handshake dials addr with cfg and reads: under TLS 1.3 a client learns
// that the server refused its certificate on its first read.
func handshake(addr string, cfg *tls.Config) error {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

// TestTLSRefusesStrangers: against a remote that requires a certificate
// of its CA (and a peer name), a client with no TLS, no certificate, a
// self-signed one, one signed by another CA, and one of the right CA with
// a name the pattern refuses all fail the handshake; a proper client
// connects.
func TestTLSRefusesStrangers(t *testing.T) {
	p, addr := echoServer(t)
	self, selfKey, err := certs.SelfSigned(certs.Host{Name: "node-x"})
	if err != nil {
		t.Fatal(err)
	}
	other := newPKI(t)
	base := func(cert ...tls.Certificate) *tls.Config {
		return attacker(p.pool(), cert...)
	}
	for _, c := range []struct {
		name  string
		creds credentials.TransportCredentials
		tls   *tls.Config
		want  string // in the handshake's error
	}{
		{"plaintext", insecure.NewCredentials(), nil, ""},
		{"no certificate", nil, base(), "certificate required"},
		{"self-signed", nil, base(keyPair(t, self, selfKey)), "unknown certificate authority"},
		{"another CA", nil, base(other.host("node-x")), "unknown certificate authority"},
		{"refused name", nil, base(p.host("stranger")), "bad certificate"},
	} {
		creds := c.creds
		if creds == nil {
			creds = credentials.NewTLS(c.tls)
		}
		err := connect(t, addr, creds)
		if err == nil {
			t.Errorf("%s: connected", c.name)
			continue
		}
		t.Logf("%s: refused: %v", c.name, err)
		if c.tls != nil {
			err := handshake(addr, c.tls)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: TLS handshake: %v, want %q", c.name, err, c.want)
			}
		}
	}
	if err := connect(t, addr, credentials.NewTLS(base(p.host("node-1")))); err != nil {
		t.Errorf("a certified peer: %v", err)
	}
	// And a certified server is checked by the client: a client that
	// trusts another CA refuses this one.
	if err := handshake(addr, attacker(other.pool(), other.host("node-x"))); err == nil ||
		!strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("client trusting another CA: %v", err)
	}
}

func TestTLSFilesValidate(t *testing.T) {
	if err := (wire.TLSFiles{Cert: "c"}).Validate(); err == nil {
		t.Error("a certificate without key and CA accepted")
	}
	if err := (wire.TLSFiles{Cert: "c", Key: "k", CA: "a", PeerName: "[bad"}).Validate(); err == nil {
		t.Error("a bad pattern accepted")
	}
	if _, err := wire.LoadTLS(wire.TLSFiles{Cert: "/nonexistent/c", Key: "/nonexistent/k", CA: "/nonexistent/a"}); err == nil {
		t.Error("missing files accepted")
	}
}
