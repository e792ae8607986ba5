package wire

// Mutual TLS for protoactor remote: every control-plane connection, both
// ways (nodes dial the coordinator, the coordinator dials nodes), is TLS
// 1.3 where each end presents a certificate signed by the cluster's CA
// and checks the other's. A process without such a certificate fails the
// handshake, so it can neither send a message to an actor nor read one.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TLSFiles names a host's mutual-TLS material, PEM files as
// longshore-certs writes them.
type TLSFiles struct {
	Cert string // this host's certificate (--tls-cert)
	Key  string // its private key (--tls-key)
	CA   string // the CA certificate(s) that sign every member (--tls-ca)
	// PeerName, if set, is a pattern (path.Match: *, ?, [...]) that one of
	// the peer certificate's DNS SANs or its CN must match, on both ends
	// (--tls-peer-name): a CA shared with other uses still admits only
	// the cluster's hosts. "": any certificate the CA signed.
	PeerName string
}

// Validate reports every problem at once, without reading the files.
func (f TLSFiles) Validate() error {
	var errs []error
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		errs = append(errs, errors.New("agent: TLS needs a certificate, its key and the CA (--tls-cert, --tls-key, --tls-ca)"))
	}
	if f.PeerName != "" {
		if _, err := path.Match(f.PeerName, ""); err != nil {
			errs = append(errs, fmt.Errorf("agent: peer name pattern %q: %w", f.PeerName, err))
		}
	}
	return errors.Join(errs...)
}

// TLS is a host's mutual-TLS setup for protoactor remote.
type TLS struct {
	server, client *tls.Config
}

// LoadTLS reads f's files. Errors name the file, never its content.
func LoadTLS(f TLSFiles) (*TLS, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		// crypto/tls's errors describe the PEM blocks, not their bytes.
		return nil, fmt.Errorf("agent: TLS certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("agent: TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("agent: TLS CA %s holds no PEM certificate", f.CA)
	}
	return NewTLS(cert, pool, f.PeerName)
}

// NewTLS sets up mutual TLS with cert as this host's certificate, cas as
// the authorities that sign peers, and peerName as in TLSFiles.
func NewTLS(cert tls.Certificate, cas *x509.CertPool, peerName string) (*TLS, error) {
	if err := (TLSFiles{Cert: "-", Key: "-", CA: "-", PeerName: peerName}).Validate(); err != nil {
		return nil, err
	}
	verify := func(cs tls.ConnectionState) error { return checkPeerName(cs, peerName) }
	server := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        cas,
		VerifyConnection: verify,
	}
	// The client verifies the server's chain and that its certificate
	// names the address dialed (grpc sets ServerName to the target host).
	client := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		RootCAs:          cas,
		VerifyConnection: verify,
	}
	return &TLS{server: server, client: client}, nil
}

// checkPeerName runs after the chain was verified against the CA.
func checkPeerName(cs tls.ConnectionState, pattern string) error {
	if pattern == "" {
		return nil
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("agent: the peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	names := append([]string{leaf.Subject.CommonName}, leaf.DNSNames...)
	for _, n := range names {
		if ok, _ := path.Match(pattern, n); ok && n != "" {
			return nil
		}
	}
	return fmt.Errorf("agent: peer certificate names %q; none matches the peer name pattern %q", names, pattern)
}

// ServerConfig is the TLS configuration of the remote's listener.
func (t *TLS) ServerConfig() *tls.Config { return t.server.Clone() }

// ClientConfig is the TLS configuration of the remote's connections out.
func (t *TLS) ClientConfig() *tls.Config { return t.client.Clone() }

// RemoteOptions makes protoactor remote serve and dial over t (its
// default dial option is plaintext, grpc.WithInsecure).
func (t *TLS) RemoteOptions() []remote.ConfigOption {
	return []remote.ConfigOption{
		remote.WithServerOptions(grpc.Creds(credentials.NewTLS(t.ServerConfig()))),
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(t.ClientConfig()))),
	}
}
