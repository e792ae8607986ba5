package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/cluster/gossip"
)

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	ca, host, keyFile := filepath.Join(dir, "ca"), filepath.Join(dir, "n1"), filepath.Join(dir, "gossip.key")
	var out, errb bytes.Buffer
	for _, args := range [][]string{
		{"ca", "--out", ca},
		{"host", "--ca", ca, "--name", "n1", "--ip", "127.0.0.2,127.0.0.3", "--dns", "n1.train", "--out", host},
		{"gossip-key", "--out", keyFile},
	} {
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(host, "tls.crt"), filepath.Join(host, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(host, "ca.crt"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, name := range []string{"127.0.0.2", "127.0.0.3", "n1", "n1.train"} {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	keys, err := gossip.ReadKeyFile(keyFile)
	if err != nil || len(keys) != 1 || len(keys[0]) != 32 {
		t.Fatalf("gossip key: %v, %d keys", err, len(keys))
	}
	for _, p := range []string{filepath.Join(ca, "ca.key"), filepath.Join(host, "tls.key"), keyFile} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v", p, fi.Mode(), err)
		}
		secret, _ := os.ReadFile(p)
		body := strings.TrimSpace(string(secret))
		if strings.Contains(out.String()+errb.String(), body) {
			t.Errorf("%s's content was printed", p)
		}
	}
	// Nothing is replaced.
	if code := run([]string{"gossip-key", "--out", keyFile}, &out, &errb); code == 0 {
		t.Error("gossip-key replaced an existing key file")
	}
	if code := run([]string{"host", "--ca", ca, "--name", "n1", "--ip", "not-an-ip", "--out", t.TempDir()}, &out, &errb); code == 0 {
		t.Error("a bad --ip was accepted")
	}
}

func TestCluster(t *testing.T) {
	dir := t.TempDir()
	args := []string{"cluster", "--ca", filepath.Join(dir, "ca"), "--out", filepath.Join(dir, "secrets"), "--hosts", "coordinator,node1"}
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	key1, _ := os.ReadFile(filepath.Join(dir, "secrets", "gossip.key"))
	crt1, _ := os.ReadFile(filepath.Join(dir, "secrets", "node1", "tls.crt"))
	// Again, with one host more: what exists is kept.
	args[len(args)-1] = "coordinator,node1,node2"
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, errb.String())
	}
	key2, _ := os.ReadFile(filepath.Join(dir, "secrets", "gossip.key"))
	crt2, _ := os.ReadFile(filepath.Join(dir, "secrets", "node1", "tls.crt"))
	if !bytes.Equal(key1, key2) || !bytes.Equal(crt1, crt2) {
		t.Error("a second run replaced the key or a certificate")
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "secrets", "node2", "tls.crt"), filepath.Join(dir, "secrets", "node2", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, "secrets", "node2", "ca.crt"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "node2"}); err != nil {
		t.Error(err)
	}
	if exists(filepath.Join(dir, "secrets", "ca.key")) || exists(filepath.Join(dir, "secrets", "node1", "ca.key")) {
		t.Error("the CA key is among the hosts' files")
	}
}
