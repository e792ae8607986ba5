package gossip

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func startKeyed(t *testing.T, id string, keys [][]byte, join ...string) *Membership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := Start(ctx, Config{
		Meta:     Meta{ID: id, Role: RoleNode, ActorAddr: "127.0.0.1:9"},
		BindAddr: "127.0.0.1:0",
		Join:     join,
		Profile:  "local",
		Keys:     keys,
	})
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

// stranger is a bare memberlist, not ours, with the given key (nil: no
// encryption), that tries once to join addr. It returns the error Join
// gave and how many members the stranger believes in afterwards.
func stranger(t *testing.T, name string, key []byte, addr string) (error, int) {
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
	n, err := ml.Join([]string{addr})
	if n > 0 && err == nil {
		return nil, ml.NumMembers()
	}
	return err, ml.NumMembers()
}

func names(m *Membership) []string {
	var out []string
	for _, mb := range m.Members() {
		out = append(out, mb.Name)
	}
	return out
}

// waitJoined waits until every one of ms has seen id join.
func waitJoined(t *testing.T, id string, ms ...*Membership) {
	t.Helper()
	for _, m := range ms {
		if !slices.Contains(names(m), id) {
			waitFor(t, m, id+" to join", func(e Event) bool { return e.Kind == Joined && e.Name == id })
		}
	}
}

// TestStrangerCannotJoin: a process with no key and one with the wrong key
// try to join an encrypted cluster. Their join is refused, and once a
// member with the key has joined and been seen everywhere, no member has
// ever listed a stranger.
func TestStrangerCannotJoin(t *testing.T) {
	// Before: plaintext gossip takes anyone in.
	open := startKeyed(t, "open", nil)
	if err, n := stranger(t, "no-key", nil, open.Addr()); err != nil || n != 2 {
		t.Fatalf("a stranger joining plaintext gossip: %v, %d members", err, n)
	}
	waitJoined(t, "no-key", open)

	key := newKey(t)
	a := startKeyed(t, "a", [][]byte{key})
	b := startKeyed(t, "b", [][]byte{key}, a.Addr())
	waitJoined(t, "b", a)

	for _, s := range []struct {
		name string
		key  []byte
	}{{"no-key", nil}, {"wrong-key", newKey(t)}} {
		for _, target := range []*Membership{a, b} {
			err, n := stranger(t, s.name, s.key, target.Addr())
			if err == nil {
				t.Errorf("%s joined through %s", s.name, target.cfg.Meta.ID)
			} else {
				t.Logf("%s → %s: refused: %v", s.name, target.cfg.Meta.ID, err)
			}
			if n != 1 {
				t.Errorf("%s believes in %d members after the refused join, want only itself", s.name, n)
			}
		}
	}

	c := startKeyed(t, "c", [][]byte{key}, b.Addr())
	waitJoined(t, "c", a, b)
	waitJoined(t, "a", c)
	waitJoined(t, "b", c)
	for _, m := range []*Membership{a, b, c} {
		if got := names(m); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Errorf("%s sees %v, want [a b c]", m.cfg.Meta.ID, got)
		}
	}
	// The events of a and b, drained up to c's join, never named a stranger.
	for _, m := range []*Membership{a, b, c} {
		drain(m, func(e Event) {
			if strings.Contains(e.Name, "key") {
				t.Errorf("%s saw stranger %s: %v", m.cfg.Meta.ID, e.Name, e.Kind)
			}
		})
	}
}

// drain hands f the events already queued, without waiting for more.
func drain(m *Membership, f func(Event)) {
	for {
		select {
		case e := <-m.Events():
			f(e)
		default:
			return
		}
	}
}

// TestKeyRotation: three members rotate from one key to another while
// running (install, use, remove, each step on every member before the
// next); nobody is declared failed, metadata keeps spreading, a member
// with only the new key joins, and one with only the old key is refused
// by every member.
func TestKeyRotation(t *testing.T) {
	oldKey, newK := newKey(t), newKey(t)
	a := startKeyed(t, "a", [][]byte{oldKey})
	b := startKeyed(t, "b", [][]byte{oldKey}, a.Addr())
	c := startKeyed(t, "c", [][]byte{oldKey}, a.Addr())
	all := []*Membership{a, b, c}
	waitJoined(t, "b", a, c)
	waitJoined(t, "c", a, b)
	waitJoined(t, "a", b, c)

	for _, step := range [][][]byte{{oldKey, newK}, {newK, oldKey}, {newK}} {
		for _, m := range all {
			if err := m.SetKeys(step); err != nil {
				t.Fatalf("%s: SetKeys: %v", m.cfg.Meta.ID, err)
			}
			want := []string{KeyID(step[0])}
			for _, k := range step[1:] {
				want = append(want, KeyID(k))
			}
			if got := m.KeyIDs(); !slices.Equal(got, want) {
				t.Fatalf("%s: keys %v, want %v", m.cfg.Meta.ID, got, want)
			}
		}
	}

	// Gossip still flows, encrypted with the new key: a's metadata update
	// reaches b and c.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.UpdateMeta(ctx, func(m *Meta) { m.Incarnation = 7 }); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Membership{b, c} {
		waitFor(t, m, "the event", func(e Event) bool {
			if e.Kind == Failed {
				t.Errorf("%s: %s declared failed during the rotation", m.cfg.Meta.ID, e.Name)
			}
			return e.Kind == Updated && e.Name == "a" && e.Meta.Incarnation == 7
		})
	}
	d := startKeyed(t, "d", [][]byte{newK}, c.Addr())
	waitJoined(t, "d", a, b, c)
	for _, m := range all {
		if err, _ := stranger(t, "old-key", oldKey, m.Addr()); err == nil {
			t.Errorf("a member with only the removed key joined through %s", m.cfg.Meta.ID)
		}
	}
	if got := names(d); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("d sees %v", got)
	}
}

func TestSetKeysRefusals(t *testing.T) {
	plain := startKeyed(t, "plain", nil)
	if err := plain.SetKeys([][]byte{newKey(t)}); err != ErrNoKeyring {
		t.Errorf("SetKeys on plaintext gossip: %v, want ErrNoKeyring", err)
	}
	if plain.KeyIDs() != nil {
		t.Errorf("plaintext gossip has key ids %v", plain.KeyIDs())
	}
	m := startKeyed(t, "keyed", [][]byte{newKey(t)})
	if err := m.SetKeys(nil); err == nil {
		t.Error("SetKeys(nil) accepted")
	}
	if err := m.SetKeys([][]byte{[]byte("short")}); err == nil {
		t.Error("a 5-byte key accepted")
	}
	if err := (Config{Meta: Meta{ID: "x"}, BindAddr: "127.0.0.1:0", Keys: [][]byte{make([]byte, 15)}}).Validate(); err == nil {
		t.Error("Validate accepted a 15-byte key")
	}
}

func TestParseKeys(t *testing.T) {
	k1, k2 := newKey(t), make([]byte, 16)
	enc := base64.StdEncoding.EncodeToString
	keys, err := ParseKeys([]byte("# primary first\n" + enc(k1) + "\n\n  " + enc(k2) + "  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !bytes.Equal(keys[0], k1) || !bytes.Equal(keys[1], k2) {
		t.Fatalf("keys %x", keys)
	}
	secret := enc([]byte("twelve bytes"))
	for _, bad := range []string{"", "# only a comment\n", "not base64!\n", secret + "\n", enc(k1) + "\n" + enc(k1) + "\n"} {
		_, err := ParseKeys([]byte(bad))
		if err == nil {
			t.Errorf("ParseKeys(%q) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), enc(k1)) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
	path := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(path, []byte(enc(k1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if keys, err := ReadKeyFile(path); err != nil || len(keys) != 1 {
		t.Errorf("ReadKeyFile: %v, %d keys", err, len(keys))
	}
}
