package gossip

// Gossip encryption: memberlist's keyring (AES-GCM, one primary key that
// encrypts, any number of others accepted when decrypting). With keys,
// every packet and stream is encrypted and authenticated
// (GossipVerifyIncoming/Outgoing), so a process without a key can neither
// read the members' metadata (actor addresses, incarnations) nor join:
// its packets fail to decrypt and are dropped, and its push/pull is
// refused.
//
// Rotation without a restart, on every member in three steps, each done
// everywhere before the next begins:
//
//	SetKeys(old, new)   install the new key (old still encrypts)
//	SetKeys(new, old)   encrypt with the new key; old still decrypts
//	SetKeys(new)        forget the old key
//
// The daemons do each step when a key file they were started with is
// rewritten and they get SIGHUP (cmd/internal/secure).

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"
)

// ErrNoKeyring is returned by SetKeys on a Membership started without
// keys: memberlist cannot turn encryption on while running.
var ErrNoKeyring = errors.New("gossip: started without keys; encryption cannot be turned on while running (restart with a key)")

// keyState is a Membership's keyring. mu serializes SetKeys: memberlist's
// Keyring guards each call, not a sequence of them.
type keyState struct {
	mu   sync.Mutex
	ring *memberlist.Keyring // nil: plaintext gossip
}

// validateKeys checks every key's size without saying anything about
// its bytes.
func validateKeys(keys [][]byte) error {
	var errs []error
	for i, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			errs = append(errs, fmt.Errorf("gossip: key %d is %d bytes: want 16, 24 or 32 (AES-128, -192, -256)", i+1, len(k)))
		}
	}
	return errors.Join(errs...)
}

// newKeyring makes the keyring of keys (keys[0] primary); nil for none.
func newKeyring(keys [][]byte) (*memberlist.Keyring, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	own := make([][]byte, len(keys))
	for i, k := range keys {
		own[i] = bytes.Clone(k)
	}
	return memberlist.NewKeyring(own[1:], own[0])
}

// SetKeys makes keys the member's keyring without a restart: each key
// is installed, keys[0] becomes the primary (the one that encrypts), and
// installed keys not in keys are removed. See the rotation steps in this
// file's comment: a primary must be installed on every member before any
// member encrypts with it. Safe to call concurrently with everything.
func (m *Membership) SetKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("gossip: SetKeys needs at least one key (gossip cannot go back to plaintext while running)")
	}
	if err := validateKeys(keys); err != nil {
		return err
	}
	m.keys.mu.Lock()
	defer m.keys.mu.Unlock()
	ring := m.keys.ring
	if ring == nil {
		return ErrNoKeyring
	}
	for _, k := range keys {
		if err := ring.AddKey(bytes.Clone(k)); err != nil {
			return fmt.Errorf("gossip: install key: %w", err)
		}
	}
	if err := ring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("gossip: use key: %w", err)
	}
	// Remove from the end: memberlist's RemoveKey shifts the keys after
	// the removed one in place, in the slice its readers decrypt with;
	// removing the last one shifts nothing, and after UseKey(new) in a
	// two-key rotation the old key is the last.
	installed := append([][]byte(nil), ring.GetKeys()...)
	for i := len(installed) - 1; i >= 1; i-- {
		if !containsKey(keys, installed[i]) {
			if err := ring.RemoveKey(installed[i]); err != nil {
				return fmt.Errorf("gossip: remove key: %w", err)
			}
		}
	}
	return nil
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

// KeyIDs names the installed keys, primary first, by KeyID; nil when
// gossip is plaintext. For logs and tests: an id says which key, not
// what it is.
func (m *Membership) KeyIDs() []string {
	m.keys.mu.Lock()
	defer m.keys.mu.Unlock()
	if m.keys.ring == nil {
		return nil
	}
	var out []string
	for _, k := range m.keys.ring.GetKeys() {
		out = append(out, KeyID(k))
	}
	return out
}

// KeyID is a short public name for key: the first 8 hex digits of its
// SHA-256. It reveals nothing usable about the key (32 bits of a hash of
// 128 or more random bits).
func KeyID(key []byte) string {
	h := sha256.Sum256(key)
	return hex.EncodeToString(h[:4])
}

// ParseKeys reads a key file: one base64-encoded key (16, 24 or 32 bytes)
// per line, the first the primary; blank lines and lines starting with #
// are ignored. Errors name the line, never its content.
func ParseKeys(b []byte) ([][]byte, error) {
	var keys [][]byte
	var errs []error
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			errs = append(errs, fmt.Errorf("gossip: key file line %d is not base64", i+1))
			continue
		}
		if err := memberlist.ValidateKey(k); err != nil {
			errs = append(errs, fmt.Errorf("gossip: key file line %d: the key is %d bytes, want 16, 24 or 32 (AES-128, -192, -256)", i+1, len(k)))
			continue
		}
		if containsKey(keys, k) {
			errs = append(errs, fmt.Errorf("gossip: key file line %d repeats an earlier key", i+1))
			continue
		}
		keys = append(keys, k)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("gossip: key file holds no key (one base64 key per line; make one with `head -c 32 /dev/urandom | base64`)")
	}
	return keys, nil
}

// ReadKeyFile reads and parses the key file at path (ParseKeys).
func ReadKeyFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip: key file: %w", err)
	}
	keys, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}
