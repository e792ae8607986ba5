package s3

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/longshore/longshore/internal/clock"
)

func TestParseCredentialSpec(t *testing.T) {
	for _, tc := range []struct {
		in, source, profile string
		bad                 bool
	}{
		{in: ""},
		{in: "auto", source: CredsAuto},
		{in: "env", source: CredsEnv},
		{in: "profile", source: CredsProfile},
		{in: "profile:train", source: CredsProfile, profile: "train"},
		{in: "profile:", bad: true},
		{in: "web-identity", source: CredsWebIdentity},
		{in: "container", source: CredsContainer},
		{in: "imds", source: CredsIMDS},
		{in: "anonymous", source: CredsAnonymous},
		{in: "ec2", bad: true},
		{in: "Auto", bad: true},
	} {
		got, err := parseCredentialSpec(tc.in)
		if (err != nil) != tc.bad || got.source != tc.source || got.profile != tc.profile {
			t.Errorf("parseCredentialSpec(%q) = %+v, %v", tc.in, got, err)
		}
	}
	if err := (Options{Credentials: "ec2"}).Validate(); err == nil || !strings.Contains(err.Error(), "profile:NAME") {
		t.Errorf("Validate of a bad source: %v, want the choices listed", err)
	}
	if err := (Options{AccessKey: "a", SecretKey: "s", Credentials: "imds"}).Validate(); err == nil {
		t.Error("Validate took given keys and a source asked for beside them")
	}
	env := optionsFromEnv(func(k string) string { return map[string]string{EnvAccessKeyID: "a", EnvSecretAccessKey: "s"}[k] })
	env.Credentials = "profile:x"
	if err := env.Validate(); err != nil {
		t.Errorf("a named source must win over keys from the environment: %v", err)
	}
}

func TestRefreshTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		exp, want time.Time
	}{
		{time.Time{}, time.Time{}},                           // static keys: never
		{now.Add(6 * time.Hour), now.Add(288 * time.Minute)}, // an instance role: 72 minutes early
		{now.Add(15 * time.Minute), now.Add(12 * time.Minute)},
		{now.Add(-time.Minute), now}, // already expired: at once
	} {
		if got := refreshTime(now, tc.exp); !got.Equal(tc.want) {
			t.Errorf("refreshTime(now, now%+v) = now%+v, want now%+v", tc.exp.Sub(now), got.Sub(now), tc.want.Sub(now))
		}
	}
}

// scriptedProvider answers retrievals from a script: a Value or an error
// each time.
type scriptedProvider struct {
	answers []func() (credentials.Value, error)
	calls   int
}

func (p *scriptedProvider) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	a := p.answers[min(p.calls, len(p.answers)-1)]
	p.calls++
	return a()
}
func (p *scriptedProvider) Retrieve() (credentials.Value, error) {
	return p.RetrieveWithCredContext(nil)
}
func (p *scriptedProvider) IsExpired() bool { return true }

// A refresh that fails while the keys in use are still valid keeps them
// (the request that triggered it does not fail) and tries again later;
// once they have expired, the failure is the caller's, naming the source.
func TestRefresherKeepsValidKeysOnFailure(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	key := func(id string, life time.Duration) func() (credentials.Value, error) {
		return func() (credentials.Value, error) {
			return credentials.Value{AccessKeyID: id, SecretAccessKey: "s", Expiration: clk.Now().Add(life)}, nil
		}
	}
	down := func() (credentials.Value, error) { return credentials.Value{}, errors.New("metadata service down") }
	p := &scriptedProvider{answers: []func() (credentials.Value, error){key("k1", 10*time.Minute), down, down, down, key("k2", 10*time.Minute)}}
	r := &refresher{inner: p, source: "instance metadata (test)", now: clk.Now}
	creds := credentials.New(r)
	get := func() (string, error) {
		v, err := creds.GetWithContext(&credentials.CredContext{Context: context.Background()})
		return v.AccessKeyID, err
	}

	if k, err := get(); k != "k1" || err != nil {
		t.Fatalf("first: %q %v", k, err)
	}
	clk.Advance(7 * time.Minute) // not yet due (8 minutes)
	if k, _ := get(); k != "k1" || p.calls != 1 {
		t.Fatalf("before the refresh time: key %q after %d retrievals", k, p.calls)
	}
	clk.Advance(time.Minute + time.Second) // due; the source is down
	if k, err := get(); k != "k1" || err != nil || p.calls != 2 {
		t.Fatalf("failed refresh of valid keys: %q %v after %d retrievals, want k1 kept", k, err, p.calls)
	}
	if _, err := r.state(); err == nil {
		t.Error("state() should report the failed refresh")
	}
	if k, _ := get(); k != "k1" || p.calls != 2 {
		t.Fatalf("retried before refreshRetry: %d retrievals", p.calls)
	}
	clk.Advance(refreshRetry) // retry, still down, keys still valid (1 minute left)
	if k, err := get(); k != "k1" || err != nil || p.calls != 3 {
		t.Fatalf("second try: %q %v after %d retrievals", k, err, p.calls)
	}
	clk.Advance(2 * time.Minute) // past expiry, still down
	if _, err := get(); err == nil || !strings.Contains(err.Error(), "instance metadata (test)") {
		t.Fatalf("expired keys and a failed refresh: %v, want an error naming the source", err)
	}
	if k, err := get(); k != "k2" || err != nil {
		t.Fatalf("the source is back: %q %v", k, err)
	}
	if n, err := r.state(); n != 2 || err != nil {
		t.Errorf("state() = %d, %v; want 2 retrievals, no error", n, err)
	}
}

// Keys without an expiry (a profile's) are fetched once, not per request.
func TestRefresherStaticKeysOnce(t *testing.T) {
	p := &scriptedProvider{answers: []func() (credentials.Value, error){
		func() (credentials.Value, error) {
			return credentials.Value{AccessKeyID: "a", SecretAccessKey: "s"}, nil
		},
	}}
	creds := credentials.New(&refresher{inner: p, source: "profile", now: time.Now})
	for range 5 {
		if _, err := creds.GetWithContext(nil); err != nil {
			t.Fatal(err)
		}
	}
	if p.calls != 1 {
		t.Errorf("%d retrievals for keys that do not expire, want 1", p.calls)
	}
}
