package journal

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// tokenTable is testdata/tokens.json, the token cases the Python client's
// tests check too: a change to the encoding fails both sides.
type tokenTable struct {
	Valid []struct {
		Token string
		Job   uint64
		Gen   uint64
		Epoch int
		Step  int64
		Ident *struct {
			Digest    string
			Seed      uint64
			Block     int
			Window    int
			BatchSize int `json:"batch_size"`
			Epochs    int
		}
	}
	Invalid []struct {
		Token string
		Why   string
	}
}

func TestTokenTable(t *testing.T) {
	raw, err := os.ReadFile("testdata/tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var tab tokenTable
	if err := json.Unmarshal(raw, &tab); err != nil {
		t.Fatal(err)
	}
	if len(tab.Valid) == 0 || len(tab.Invalid) == 0 {
		t.Fatalf("testdata/tokens.json: %d valid, %d invalid cases", len(tab.Valid), len(tab.Invalid))
	}
	for _, c := range tab.Valid {
		want := Token{Job: c.Job, Gen: c.Gen, Epoch: c.Epoch, Step: c.Step}
		if id := c.Ident; id != nil {
			want.Ident = Identity{Digest: id.Digest, Seed: id.Seed, Block: id.Block, Window: id.Window, BatchSize: id.BatchSize, Epochs: id.Epochs}
		}
		if got := want.String(); got != c.Token {
			t.Errorf("%+v.String() = %q, the table says %q", want, got, c.Token)
		}
		if got, err := ParseToken(c.Token); err != nil || got != want {
			t.Errorf("ParseToken(%q) = %+v, %v; want %+v", c.Token, got, err, want)
		}
	}
	for _, c := range tab.Invalid {
		if got, err := ParseToken(c.Token); !errors.Is(err, ErrBadToken) {
			t.Errorf("ParseToken(%q) (%s) = %+v, %v; want ErrBadToken", c.Token, c.Why, got, err)
		}
	}
}
