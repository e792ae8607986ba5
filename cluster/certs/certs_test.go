package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestIssueVerifies(t *testing.T) {
	ca, err := NewCA("test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	crtPEM, keyPEM, err := ca.Issue(Host{Name: "node1", IPs: []net.IP{net.ParseIP("127.0.0.2")}, DNS: []string{"node1.train"}})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crtPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf := pair.Leaf
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		for _, name := range []string{"127.0.0.2", "node1", "node1.train"} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("usage %v, name %s: %v", usage, name, err)
			}
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.3"}); err == nil {
		t.Error("the certificate verifies for an address it does not name")
	}
	other, _ := NewCA("other CA", 0)
	opool := x509.NewCertPool()
	opool.AddCert(other.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: opool, DNSName: "node1"}); err == nil {
		t.Error("the certificate verifies against another CA")
	}
	if leaf.NotAfter.After(ca.Cert.NotAfter) || leaf.NotAfter.Before(time.Now().Add(300*24*time.Hour)) {
		t.Errorf("host valid until %v (CA until %v)", leaf.NotAfter, ca.Cert.NotAfter)
	}
	short, _ := NewCA("short CA", time.Hour)
	crt, key, err := short.Issue(Host{Name: "h"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	if p.Leaf.NotAfter.After(short.Cert.NotAfter) {
		t.Errorf("a host certificate valid until %v outlives its CA (%v)", p.Leaf.NotAfter, short.Cert.NotAfter)
	}
}

func TestWriteLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := NewCA("test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCA(dir); err == nil {
		t.Error("WriteCA replaced an existing CA")
	}
	for name, want := range map[string]os.FileMode{CAKey: 0o600, CACert: 0o644, ".": 0o700} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
	back, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Cert.Equal(ca.Cert) || !back.Key.Equal(ca.Key) {
		t.Error("LoadCA read a different CA")
	}
	crt, key, err := back.Issue(Host{Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	hdir := filepath.Join(t.TempDir(), "n")
	if err := WriteHost(hdir, crt, key, back.CertPEM); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(hdir, HostKey)); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("host key mode %v", fi.Mode())
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(hdir, HostCert), filepath.Join(hdir, HostKey)); err != nil {
		t.Error(err)
	}
}
