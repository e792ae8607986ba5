package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/longshore/longshore/cluster/certs"
	"github.com/longshore/longshore/internal/testports"
	"github.com/longshore/longshore/storage/miniotest"
)

// secrets is a secured cluster's key material, in a directory of its own:
// a gossip key file and, per host, a certificate of one CA.
type secrets struct {
	t       *testing.T
	dir     string
	ca      *certs.CA
	keyFile string
	keys    [][]byte // every gossip key written so far
	tlsKeys []string // every TLS private key file
}

func newSecrets(t *testing.T) *secrets {
	t.Helper()
	s := &secrets{t: t, dir: t.TempDir(), keyFile: ""}
	var err error
	if s.ca, err = certs.NewCA("integration CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.ca.WriteCA(filepath.Join(s.dir, "ca")); err != nil {
		t.Fatal(err)
	}
	s.tlsKeys = append(s.tlsKeys, filepath.Join(s.dir, "ca", certs.CAKey))
	s.keyFile = filepath.Join(s.dir, "gossip.key")
	s.writeKeys(s.newKey())
	return s
}

func (s *secrets) newKey() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		s.t.Fatal(err)
	}
	s.keys = append(s.keys, k)
	return k
}

// writeKeys replaces the key file's content (keys[0] the primary).
func (s *secrets) writeKeys(keys ...[]byte) {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	tmp := s.keyFile + ".new"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, s.keyFile); err != nil {
		s.t.Fatal(err)
	}
}

// flags are a host's security flags: the gossip key and a certificate
// for name at ip.
func (s *secrets) flags(name, ip string) []string {
	s.t.Helper()
	crt, key, err := s.ca.Issue(certs.Host{Name: name, IPs: []net.IP{net.ParseIP(ip)}})
	if err != nil {
		s.t.Fatal(err)
	}
	dir := filepath.Join(s.dir, name)
	if err := certs.WriteHost(dir, crt, key, s.ca.CertPEM); err != nil {
		s.t.Fatal(err)
	}
	s.tlsKeys = append(s.tlsKeys, filepath.Join(dir, certs.HostKey))
	return []string{"--gossip-key-file", s.keyFile, "--tls-cert", filepath.Join(dir, certs.HostCert),
		"--tls-key", filepath.Join(dir, certs.HostKey), "--tls-ca", filepath.Join(dir, certs.CACert), "--tls-peer-name", "longshore-*"}
}

// strangerJoin is a bare memberlist with key (nil: none) that tries to
// join addr once; it returns Join's error.
func strangerJoin(t *testing.T, name string, key []byte, addr string) error {
	t.Helper()
	mc := memberlist.DefaultLocalConfig()
	mc.Name = name
	mc.BindAddr, mc.BindPort, mc.AdvertisePort = "127.0.0.1", 0, 0
	mc.LogOutput = io.Discard
	mc.SecretKey = key
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	if n, err := ml.Join([]string{addr}); n > 0 {
		return nil
	} else {
		return err
	}
}

// hup sends SIGHUP to each process and waits until each has logged its
// n-th "gossip keys reloaded".
func hup(t *testing.T, n int, ps ...*proc) {
	t.Helper()
	for _, p := range ps {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	for _, p := range ps {
		waitLines(t, p.stderr, regexp.MustCompile(`msg="gossip keys reloaded"`), n, time.Minute)
	}
}

// TestSecureCluster runs a job with gossip encryption and mutual TLS on
// every member, the dataset in MinIO. While epoch 0 runs:
//   - strangers try to join the gossip: bare memberlists with no key and
//     with a wrong key (refused at once), and a longshore-node process
//     without the key or a certificate (left running to the end);
//   - the gossip key is rotated on every member without a restart
//     (install, use, remove; each step a rewritten key file and SIGHUP),
//     after which a member with only the old key is refused.
//
// The job completes exactly once, no stranger ever joined or delivered,
// nobody was declared failed, and no log or output holds the gossip keys,
// the TLS private keys or the S3 secret key.
func TestSecureCluster(t *testing.T) {
	srv := miniotest.Start(t)
	dir, keys := makeDataset(t, 400)
	bucket := srv.NewBucket(t)
	cl := srv.Client(t)
	for _, k := range keys {
		if _, err := cl.FPutObject(t.Context(), bucket, "ds/"+k, filepath.Join(dir, k), minioPutOptions()); err != nil {
			t.Fatal(err)
		}
	}
	sec := newSecrets(t)
	oldKey := sec.keys[0]
	j := job{dataset: srv.URL(bucket, "ds"), env: srv.Env(), epochs: 2, batch: 8, shard: 16, balance: "equal",
		commit: 2, minRanks: 4, stepTime: 60 * time.Millisecond,
		extraCoord: sec.flags("longshore-coordinator", "127.0.0.1")}
	c := startCluster(t, j)
	c.addNode(sec.flags("longshore-n1", "127.0.0.2")...)
	c.addNode(sec.flags("longshore-n2", "127.0.0.3")...)

	// A node without key or certificate, on loopback (so allowed to try).
	strangerLog := filepath.Join(c.dir, "stranger.log")
	stranger := startProc(t, c.dir, "stranger", c.nodeBin, j.env,
		"--id", "stranger", "--join", c.join, "--gossip", testports.Addr(t, "127.0.0.9"), "--listen", testports.Addr(t, "127.0.0.9"),
		"--gossip-profile", "local", "--ranks", "2", "--dataset", j.dataset, "--sink", "log:"+strangerLog,
		"--size", "16", "--transform", "resize", "--decoders", "1", "--progress", "never", "--give-up-after", "0")

	waitLines(t, c.nodeLogs[0], regexp.MustCompile(`(?m)^0\tn1/0\t2\t`), 1, time.Minute)
	for _, p := range append([]*proc{c.coord}, c.nodes...) {
		if len(procEvents(t, p, "gossip encrypted")) != 1 || len(procEvents(t, p, "control plane over mutual TLS")) != 1 {
			t.Fatalf("%s does not say it runs encrypted:\n%s", p.name, tail(p.stderr, 10))
		}
	}
	for _, s := range []struct {
		name string
		key  []byte
	}{{"no-key", nil}, {"wrong-key", make([]byte, 32)}} {
		if err := strangerJoin(t, s.name, s.key, c.join); err == nil {
			t.Errorf("a memberlist with %s joined the cluster", s.name)
		} else {
			t.Logf("memberlist with %s: refused: %v", s.name, err)
		}
	}

	// Rotate while the epoch runs.
	members := append([]*proc{c.coord}, c.nodes...)
	newKey := sec.newKey()
	sec.writeKeys(oldKey, newKey) // install
	hup(t, 1, members...)
	sec.writeKeys(newKey, oldKey) // use
	hup(t, 2, members...)
	sec.writeKeys(newKey) // remove
	hup(t, 3, members...)
	if done := c.coordEvents("epoch complete"); len(done) >= j.epochs {
		t.Fatalf("the job ended before the rotation did (make it slower): %v", done)
	}
	if err := strangerJoin(t, "old-key", oldKey, c.join); err == nil {
		t.Error("a memberlist with the removed key joined the cluster")
	}
	t.Logf("key rotation done during epoch %d", len(c.coordEvents("epoch complete")))

	c.finish()
	c.history(keys)
	select {
	case <-stranger.done: // gave up joining
	default:
		stranger.kill(t)
	}
	for _, ev := range c.coordEvents("node joined") {
		if ev["node"] != "n1" && ev["node"] != "n2" {
			t.Errorf("the coordinator let %s join: %v", ev["node"], ev)
		}
	}
	for _, p := range c.coords {
		if ev := procEvents(t, p, "node failed"); len(ev) > 0 {
			t.Errorf("a node was declared failed: %v", ev)
		}
	}
	if b, _ := os.ReadFile(strangerLog); regexp.MustCompile(`(?m)^\d+\t`).Match(b) {
		t.Errorf("the stranger delivered samples:\n%s", tail(strangerLog, 5))
	}

	// No secret in any log or output.
	secretsOf := map[string][]byte{"S3 secret key": []byte(srv.SecretKey)}
	for i, k := range sec.keys {
		secretsOf[fmt.Sprintf("gossip key %d (base64)", i)] = []byte(base64.StdEncoding.EncodeToString(k))
		secretsOf[fmt.Sprintf("gossip key %d (bytes)", i)] = k
	}
	for _, path := range sec.tlsKeys {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if len(line) >= 32 && !strings.HasPrefix(line, "-----") {
				secretsOf[fmt.Sprintf("%s line %d", filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), i+1)] = []byte(line)
			}
		}
	}
	outputs := map[string][]byte{}
	ents, _ := os.ReadDir(c.dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(c.dir, e.Name()))
		if err == nil {
			outputs[e.Name()] = b
		}
	}
	for _, bin := range []string{c.coordBin, c.nodeBin} {
		cmd := exec.Command(bin, "--help")
		cmd.Env = append(os.Environ(), j.env...)
		cmd.Env = append(cmd.Env, "LONGSHORE_GOSSIP_KEY_FILE="+sec.keyFile)
		out, _ := cmd.CombinedOutput()
		outputs[filepath.Base(bin)+" --help"] = out
	}
	if len(outputs) < 8 {
		t.Fatalf("only %d outputs to search: %v", len(outputs), ents)
	}
	for name, out := range outputs {
		for what, s := range secretsOf {
			if bytes.Contains(out, s) {
				t.Errorf("%s holds the %s", name, what)
			}
		}
	}
	t.Logf("searched %d logs and outputs for %d secrets", len(outputs), len(secretsOf))
}

// TestInsecureAddressRefused: real processes off loopback without keys
// refuse to start and say what to give; --insecure starts them.
func TestInsecureAddressRefused(t *testing.T) {
	coordBin, nodeBin := binaries(t)
	dir, _ := makeDataset(t, 3)
	for _, c := range []struct {
		bin  string
		args []string
	}{
		{coordBin, []string{"--dataset", dir, "--listen", "127.0.0.1:0", "--gossip", "0.0.0.0:0"}},
		{nodeBin, []string{"--dataset", dir, "--join", "127.0.0.1:1", "--gossip", "127.0.0.1:0", "--listen", "0.0.0.0:0"}},
	} {
		out, err := exec.Command(c.bin, c.args...).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "is not a loopback address") || !strings.Contains(string(out), "--insecure") {
			t.Errorf("%s %v: %v\n%s", filepath.Base(c.bin), c.args, err, out)
		}
	}
	// --insecure: the coordinator starts (and is stopped once it says so).
	p := startProc(t, t.TempDir(), "coordinator", coordBin, nil,
		"--dataset", dir, "--listen", "127.0.0.1:0", "--gossip", "0.0.0.0:0", "--insecure")
	waitLines(t, p.stderr, regexp.MustCompile(`msg=coordinating`), 1, time.Minute)
	if ev := procEvents(t, p, "gossip in plaintext (--insecure): anyone who can reach the gossip address can read and join the cluster"); len(ev) != 1 {
		t.Errorf("no warning about plaintext gossip:\n%s", tail(p.stderr, 10))
	}
	p.kill(t)
}
