// Package certs makes the certificates of a cluster's mutual TLS: a
// private certificate authority and, signed by it, one certificate per
// host that serves both ends of a connection (server and client). It
// uses Go's crypto/x509 only (no openssl), ECDSA P-256 keys, and writes
// private keys 0600. The command longshore-certs is its front end; tests
// call it directly.
//
// What a host certificate names matters: a process that dials a peer
// checks that the peer's certificate names the address it dialed (an IP
// SAN for 127.0.0.1, a DNS SAN for node1), so give each host every
// address others reach it at (--advertise, --listen).
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names in a directory written by WriteCA or WriteHost.
const (
	CACert   = "ca.crt"  // the CA's certificate (public): --tls-ca
	CAKey    = "ca.key"  // the CA's private key: keep it off the hosts
	HostCert = "tls.crt" // a host's certificate: --tls-cert
	HostKey  = "tls.key" // a host's private key: --tls-key
)

// Default validities: a CA outlives the hosts it signs; a host
// certificate is renewed yearly (start a process again to load a new one).
const (
	DefaultCAValidity   = 5 * 365 * 24 * time.Hour
	DefaultHostValidity = 365 * 24 * time.Hour
)

// backdate is how long before now a certificate becomes valid, so a
// host whose clock is a little behind accepts it at once.
const backdate = time.Hour

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named name (its subject's CN), valid for
// validity (0: DefaultCAValidity) from now.
func NewCA(name string, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"longshore"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // signs hosts, not other CAs
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("certs: make CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), Key: key}, nil
}

// Host says what a host certificate names.
type Host struct {
	// Name is the subject's CN, and a DNS SAN too when it is a valid DNS
	// name; --tls-peer-name patterns match it.
	Name string
	// IPs and DNS are the addresses others dial this host at.
	IPs []net.IP
	DNS []string
	// Validity from now; 0: DefaultHostValidity.
	Validity time.Duration
}

// Issue makes a host key and a certificate for it signed by ca, usable
// for both server and client authentication. It returns both PEM-encoded.
func (ca *CA) Issue(h Host) (certPEM, keyPEM []byte, err error) {
	if h.Name == "" {
		return nil, nil, errors.New("certs: a host certificate needs a name")
	}
	if h.Validity <= 0 {
		h.Validity = DefaultHostValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	notAfter := now.Add(h.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter // a host cannot outlive its CA
	}
	dns := append([]string(nil), h.DNS...)
	if isDNSName(h.Name) && !contains(dns, h.Name) && net.ParseIP(h.Name) == nil {
		dns = append([]string{h.Name}, dns...)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: h.Name, Organization: []string{"longshore"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
		IPAddresses:  h.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: sign %s: %w", h.Name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), nil
}

// SelfSigned makes a key and a certificate for h signed by that key
// itself (no CA): what a stranger might present. For tests.
func SelfSigned(h Host) (certPEM, keyPEM []byte, err error) {
	ca, err := NewCA(h.Name, h.Validity)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return ca.CertPEM, pemBlock("PRIVATE KEY", kder), nil
}

// WriteCA writes ca.crt (0644) and ca.key (0600) into dir (created 0700
// if missing). It refuses to replace existing files: a new CA key would
// orphan every certificate the old one signed.
func (ca *CA) WriteCA(dir string) error {
	kder, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := writeNew(filepath.Join(dir, CAKey), pemBlock("PRIVATE KEY", kder), 0o600); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, CACert), ca.CertPEM, 0o644)
}

// LoadCA reads the ca.crt and ca.key WriteCA wrote in dir.
func LoadCA(dir string) (*CA, error) {
	cb, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, CAKey))
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	blk, _ := pem.Decode(cb)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("certs: %s: no PEM certificate", filepath.Join(dir, CACert))
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", filepath.Join(dir, CACert), err)
	}
	kblk, _ := pem.Decode(kb)
	if kblk == nil {
		return nil, fmt.Errorf("certs: %s: no PEM key", filepath.Join(dir, CAKey))
	}
	k, err := x509.ParsePKCS8PrivateKey(kblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: not a PKCS#8 key", filepath.Join(dir, CAKey))
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("certs: %s is not the key of %s", filepath.Join(dir, CAKey), filepath.Join(dir, CACert))
	}
	return &CA{Cert: cert, CertPEM: cb, Key: key}, nil
}

// WriteHost writes tls.crt (0644), tls.key (0600) and the CA's ca.crt
// (0644) into dir (created 0700 if missing), refusing to replace files.
func WriteHost(dir string, certPEM, keyPEM, caPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := writeNew(filepath.Join(dir, HostKey), keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, HostCert), certPEM, 0o644); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, CACert), caPEM, 0o644)
}

// writeNew creates path with mode (never wider, whatever the umask) and
// fails if it exists.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("certs: %s exists; remove it first or write elsewhere", path)
		}
		return fmt.Errorf("certs: %w", err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("certs: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("certs: %w", err)
	}
	return f.Close()
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// isDNSName reports whether s can be a DNS SAN: letters, digits, '-',
// '.', '*' and '_', not empty, no leading dot.
func isDNSName(s string) bool {
	if s == "" || s[0] == '.' || len(s) > 253 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_', r == '*':
		default:
			return false
		}
	}
	return true
}
