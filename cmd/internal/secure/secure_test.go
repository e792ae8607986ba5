package secure

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7946": true, "127.0.0.5:1": true, "[::1]:7946": true, "localhost:1": true, "LOCALHOST.:1": true,
		"node.localhost:1": true, "127.0.0.1": true,
		"0.0.0.0:7946": false, ":7946": false, "[::]:1": false, "10.0.0.1:7946": false, "node1:7946": false,
		"localhost.example.com:1": false, "": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestCheck: the refusal off loopback and its overrides.
func TestCheck(t *testing.T) {
	tlsFiles := wire.TLSFiles{Cert: "c", Key: "k", CA: "a"}
	loop := []Endpoint{{"--gossip", "127.0.0.1:7946"}, {"--gossip-advertise", ""}}
	open := []Endpoint{{"--gossip", "0.0.0.0:7946"}, {"--gossip-advertise", "10.0.0.1:7946"}}
	rloop := []Endpoint{{"--listen", "127.0.0.2:9000"}}
	ropen := []Endpoint{{"--listen", "127.0.0.2:9000"}, {"--advertise", "node1:9000"}}
	for _, c := range []struct {
		name           string
		f              Flags
		gossip, remote []Endpoint
		want           []string // substrings of the error; nil: no error
	}{
		{"loopback needs nothing", Flags{}, loop, rloop, nil},
		{"gossip off loopback", Flags{}, open, rloop, []string{"--gossip 0.0.0.0:7946", "--gossip-key-file"}},
		{"advertised off loopback", Flags{TLS: tlsFiles}, loop, ropen, nil},
		{"remote advertised off loopback", Flags{}, loop, ropen, []string{"--advertise node1:9000", "--tls-cert"}},
		{"both, all reported", Flags{}, open, ropen, []string{"--gossip-key-file", "--tls-cert"}},
		{"keys given", Flags{GossipKeyFile: "k", TLS: tlsFiles}, open, ropen, nil},
		{"a key without TLS", Flags{GossipKeyFile: "k"}, open, ropen, []string{"--tls-cert"}},
		{"--insecure", Flags{Insecure: true}, open, ropen, nil},
		{"TLS in part", Flags{TLS: wire.TLSFiles{Cert: "c"}}, loop, rloop, []string{"--tls-key"}},
		{"TLS in part, --insecure", Flags{Insecure: true, TLS: wire.TLSFiles{Key: "k"}}, open, ropen, []string{"--tls-cert"}},
		{"bad pattern", Flags{TLS: wire.TLSFiles{Cert: "c", Key: "k", CA: "a", PeerName: "[x"}}, loop, rloop, []string{"pattern"}},
	} {
		err := c.f.Check(c.gossip, c.remote)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v lacks %q", c.name, err, w)
			}
		}
		if strings.Contains(c.name, "loopback") && !errors.Is(err, ErrInsecure) {
			t.Errorf("%s: not ErrInsecure: %v", c.name, err)
		}
	}
}

func TestRegisterKeepsSecretsOffHelp(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs)
	for _, name := range []string{"gossip-key-file", "tls-cert", "tls-key", "tls-ca", "tls-peer-name", "insecure"} {
		fl := fs.Lookup(name)
		if fl == nil {
			t.Fatalf("no --%s", name)
		}
		if fl.DefValue != "" && fl.DefValue != "false" {
			t.Errorf("--%s has a default %q", name, fl.DefValue)
		}
	}
}

// capture is a slog handler that hands each record's message and
// attributes to a channel.
type capture chan map[string]string

func (c capture) Enabled(context.Context, slog.Level) bool { return true }
func (c capture) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	c <- m
	return nil
}
func (c capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c capture) WithGroup(string) slog.Handler      { return c }

// TestReloadOnSIGHUP: a rewritten key file and SIGHUP rotate the keys of
// a running member; a file that does not parse keeps them.
func TestReloadOnSIGHUP(t *testing.T) {
	k1, k2 := make([]byte, 32), make([]byte, 16)
	rand.Read(k1)
	rand.Read(k2)
	enc := base64.StdEncoding.EncodeToString
	path := filepath.Join(t.TempDir(), "gossip.key")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(enc(k1) + "\n")
	f := Flags{GossipKeyFile: path}
	keys, err := f.GossipKeys()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := gossip.Start(ctx, gossip.Config{Meta: gossip.Meta{ID: "a", Role: gossip.RoleNode}, BindAddr: "127.0.0.1:0", Profile: "local", Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	logs := make(capture, 16)
	r := f.CatchReload(slog.New(logs))
	sctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { defer close(served); r.Serve(sctx, m) }()
	defer func() { stop(); <-served }()

	hup := func(wantMsg string) map[string]string {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		select {
		case rec := <-logs:
			if rec["msg"] != wantMsg {
				t.Fatalf("logged %v, want %q", rec, wantMsg)
			}
			return rec
		case <-ctx.Done():
			t.Fatal("no reload")
		}
		return nil
	}
	write(enc(k2) + "\n" + enc(k1) + "\n")
	rec := hup("gossip keys reloaded")
	if want := []string{gossip.KeyID(k2), gossip.KeyID(k1)}; !slices.Equal(m.KeyIDs(), want) {
		t.Errorf("keys %v, want %v", m.KeyIDs(), want)
	}
	write("garbage\n")
	rec2 := hup("gossip key reload failed; keeping the keys in use")
	if want := []string{gossip.KeyID(k2), gossip.KeyID(k1)}; !slices.Equal(m.KeyIDs(), want) {
		t.Errorf("after a bad file: keys %v, want %v", m.KeyIDs(), want)
	}
	for _, r := range []map[string]string{rec, rec2} {
		for _, v := range r {
			if strings.Contains(v, enc(k1)) || strings.Contains(v, enc(k2)) || strings.Contains(v, "garbage") {
				t.Errorf("the log repeats a key or the file: %v", r)
			}
		}
	}
	if (&Flags{}).CatchReload(slog.New(slog.NewTextHandler(io.Discard, nil))) != nil {
		t.Error("a Reloader without a key file")
	}
}
