package s3_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

// credentialEnv clears every variable a credential source reads and points
// the S3 endpoint at srv, so that only what a test sets is found. HOME is
// an empty directory: no ~/.aws of the machine's leaks in.
func credentialEnv(t *testing.T, endpoint string) {
	t.Helper()
	for _, k := range []string{
		s3.EnvAccessKeyID, s3.EnvSecretAccessKey, s3.EnvSessionToken,
		s3.EnvMinioRootUser, s3.EnvMinioRootPass, s3.EnvMinioAccessKey, s3.EnvMinioSecretKey,
		"AWS_ACCESS_KEY", "AWS_SECRET_KEY",
		s3.EnvProfile, s3.EnvSharedCredentials, s3.EnvConfigFile,
		s3.EnvWebIdentityTokenFile, s3.EnvRoleARN, s3.EnvRoleSessionName, s3.EnvEndpointSTS,
		s3.EnvContainerRelativeURI, s3.EnvContainerFullURI, s3.EnvContainerToken, s3.EnvContainerTokenFile,
		s3.EnvIMDSDisabled, s3.EnvIMDSEndpoint, s3.EnvEndpointS3,
	} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv(s3.EnvEndpoint, endpoint)
	t.Setenv(s3.EnvRegion, "us-east-1")
	// Nothing may reach a real metadata service: a test that forgets its
	// source fails instead of probing 169.254.169.254.
	t.Setenv(s3.EnvIMDSDisabled, "true")
}

// putObjects writes n small objects with the root keys and returns them.
func putObjects(t *testing.T, srv *miniotest.Server, bucket string, n int) map[string][]byte {
	t.Helper()
	objs := map[string][]byte{}
	cl := srv.Client(t)
	for i := range n {
		key := fmt.Sprintf("obj-%02d", i)
		body := []byte(strings.Repeat(key, 100+i))
		if _, err := cl.PutObject(context.Background(), bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		objs[key] = body
	}
	return objs
}

func readAll(t *testing.T, st storage.Store, objs map[string][]byte) {
	t.Helper()
	for key, want := range objs {
		got, err := st.Get(context.Background(), key, nil)
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %s: %d bytes, want %d", key, len(got), len(want))
		}
	}
}

// A profile in AWS_SHARED_CREDENTIALS_FILE, chosen by AWS_PROFILE, reads a
// private bucket with no key in the environment; --s3-credentials
// profile:NAME picks a profile by name and wins over keys in the
// environment, as --profile does in the AWS CLI.
func TestCredentialsProfile(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	objs := putObjects(t, srv, bucket, 3)
	credentialEnv(t, srv.Endpoint)

	dir := t.TempDir()
	credsFile := filepath.Join(dir, "credentials")
	profiles := fmt.Sprintf("[default]\naws_access_key_id = nobody\naws_secret_access_key = wrong-secret\n\n[train]\naws_access_key_id = %s\naws_secret_access_key = %s\n\n[assume]\nrole_arn = arn:aws:iam::000000000000:role/r\nsource_profile = train\n", srv.AccessKey, srv.SecretKey)
	if err := os.WriteFile(credsFile, []byte(profiles), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(s3.EnvSharedCredentials, credsFile)
	t.Setenv(s3.EnvConfigFile, filepath.Join(dir, "config-that-is-not-there"))

	t.Run("AWS_PROFILE", func(t *testing.T) {
		t.Setenv(s3.EnvProfile, "train")
		st, err := stores.Open(context.Background(), srv.URL(bucket, ""), s3.DefaultOptions())
		if err != nil {
			t.Fatalf("open with AWS_PROFILE=train: %v", err)
		}
		readAll(t, st, objs)
		if src := st.(*s3.Store).CredentialSource(); !strings.Contains(src, `profile "train"`) || strings.Contains(src, srv.SecretKey) {
			t.Errorf("CredentialSource() = %q, want the profile named and no secret", src)
		}
	})
	t.Run("FlagBeatsEnvKeys", func(t *testing.T) {
		t.Setenv(s3.EnvAccessKeyID, "nobody")
		t.Setenv(s3.EnvSecretAccessKey, "wrong-secret")
		opts := s3.DefaultOptions()
		opts.Credentials = "profile:train"
		st, err := stores.Open(context.Background(), srv.URL(bucket, ""), opts)
		if err != nil {
			t.Fatalf("open with profile:train: %v", err)
		}
		readAll(t, st, objs)
	})
	t.Run("AssumeRoleProfileRefused", func(t *testing.T) {
		t.Setenv(s3.EnvProfile, "assume")
		_, err := stores.Open(context.Background(), srv.URL(bucket, ""), s3.DefaultOptions())
		if err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Fatalf("open with a role_arn profile: %v, want it refused as not supported", err)
		}
	})
	t.Run("MissingProfileNamed", func(t *testing.T) {
		t.Setenv(s3.EnvProfile, "no-such-profile")
		_, err := stores.Open(context.Background(), srv.URL(bucket, ""), s3.DefaultOptions())
		if err == nil || !strings.Contains(err.Error(), "no-such-profile") {
			t.Fatalf("open with a missing AWS_PROFILE: %v, want an error naming the profile (not anonymous access)", err)
		}
	})
}

// stsMinter mints real temporary keys from MinIO's STS (AssumeRole with
// the root user), as a cloud's metadata service would hand out a role's
// keys, and remembers when it told the client each one expires (on the
// test's clock: MinIO's own expiry is at least 15 minutes away).
type stsMinter struct {
	t        *testing.T
	srv      *miniotest.Server
	clk      *clock.Fake
	lifetime time.Duration

	mu      sync.Mutex
	expires map[string]time.Time // access key -> reported expiry
	latest  string
	minted  int
	events  chan string // one per key minted
	// onAdvance, if set, runs after each expiry the test clock jumps.
	onAdvance func()
}

func newSTSMinter(t *testing.T, srv *miniotest.Server, clk *clock.Fake, lifetime time.Duration) *stsMinter {
	srv.WaitIAM(t)
	return &stsMinter{t: t, srv: srv, clk: clk, lifetime: lifetime, expires: map[string]time.Time{}, events: make(chan string, 100)}
}

func (m *stsMinter) mint() (credentials.Value, error) {
	sts, err := credentials.NewSTSAssumeRole(m.srv.Endpoint, credentials.STSAssumeRoleOptions{
		AccessKey: m.srv.AccessKey, SecretKey: m.srv.SecretKey, Location: "us-east-1",
	})
	if err != nil {
		return credentials.Value{}, err
	}
	v, err := sts.GetWithContext(&credentials.CredContext{Client: http.DefaultClient})
	if err != nil {
		return v, err
	}
	v.Expiration = m.clk.Now().Add(m.lifetime)
	m.record(v.AccessKeyID, v.Expiration)
	return v, nil
}

// record notes a key handed out and the expiry reported with it.
func (m *stsMinter) record(accessKey string, exp time.Time) {
	m.mu.Lock()
	m.expires[accessKey] = exp
	m.latest = accessKey
	m.minted++
	m.mu.Unlock()
	m.events <- accessKey
}

func (m *stsMinter) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.minted
}

// gate is a loopback proxy in front of MinIO that refuses, as S3 does, a
// request signed with a minted key past the expiry the endpoint reported
// for it (MinIO would still take it for a quarter of an hour), and counts
// what it refused and which key signed what.
type gate struct {
	URL     string
	m       *stsMinter
	mu      sync.Mutex
	refused []string
	stale   int // requests signed with a key older than the newest minted one
}

var credentialRE = "Credential="

func accessKeyOf(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		_, rest, ok := strings.Cut(a, credentialRE)
		if !ok {
			return ""
		}
		ak, _, _ := strings.Cut(rest, "/")
		return ak
	}
	ak, _, _ := strings.Cut(r.URL.Query().Get("X-Amz-Credential"), "/")
	return ak
}

func startGate(t *testing.T, srv *miniotest.Server, m *stsMinter) *gate {
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{m: m}
	proxy := httputil.NewSingleHostReverseProxy(target) // keeps the signed Host header
	// Keys MinIO's STS hands out through the gate (web identity) are
	// recorded with the expiry MinIO reported.
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodPost || resp.Request.URL.Path != "/" || resp.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return err
		}
		var sts credentials.AssumeRoleWithWebIdentityResponse
		if xml.Unmarshal(body, &sts) == nil && sts.Result.Credentials.AccessKey != "" {
			m.record(sts.Result.Credentials.AccessKey, sts.Result.Credentials.Expiration)
		}
		return nil
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ak := accessKeyOf(r)
		m.mu.Lock()
		exp, minted := m.expires[ak]
		latest := m.latest
		m.mu.Unlock()
		if minted && !m.clk.Now().Before(exp) {
			g.mu.Lock()
			g.refused = append(g.refused, r.Method+" "+r.URL.Path)
			g.mu.Unlock()
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>`)
			return
		}
		if minted && ak != latest {
			g.mu.Lock()
			g.stale++
			g.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	g.URL = hs.URL
	return g
}

// runPastExpiries opens the bucket through the gate with the binaries'
// options on the fake clock, then reads every object, lets the keys
// expire, and reads again, rounds times: each round must refresh the keys
// once (one key minted by the fake endpoint) and no read may fail.
func runPastExpiries(t *testing.T, srv *miniotest.Server, bucket string, objs map[string][]byte, m *stsMinter, rounds int, wantSource string) {
	t.Helper()
	runPastExpiriesVia(t, startGate(t, srv, m), srv, bucket, objs, m, rounds, wantSource)
}

func runPastExpiriesVia(t *testing.T, g *gate, srv *miniotest.Server, bucket string, objs map[string][]byte, m *stsMinter, rounds int, wantSource string) {
	t.Helper()
	opts := s3.DefaultOptions()
	opts.Endpoint = g.URL
	opts.Clock = m.clk
	st, err := stores.Open(context.Background(), srv.URL(bucket, ""), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	store := st.(*s3.Store)
	if src := store.CredentialSource(); !strings.Contains(src, wantSource) {
		t.Errorf("CredentialSource() = %q, want it to name %q", src, wantSource)
	}
	backstop := time.After(2 * time.Minute) // ends a hung test only
	for round := 1; round <= rounds; round++ {
		readAll(t, st, objs)
		if got := m.count(); got != round {
			t.Fatalf("round %d: %d keys minted, want %d (one refresh per expiry)", round, got, round)
		}
		// The keys expire: past the reported expiry, not just the window.
		m.clk.Advance(m.lifetime + time.Second)
		if m.onAdvance != nil {
			m.onAdvance()
		}
		select {
		case <-backstop:
			t.Fatal("backstop: test hung")
		default:
		}
	}
	readAll(t, st, objs)
	if got := m.count(); got != rounds+1 {
		t.Fatalf("%d keys minted over %d expiries, want %d", got, rounds, rounds+1)
	}
	if n, err := store.CredentialRefreshes(); n != rounds+1 || err != nil {
		t.Errorf("CredentialRefreshes() = %d, %v; want %d, nil", n, err, rounds+1)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.refused) > 0 {
		t.Errorf("%d requests were signed with expired keys: %v", len(g.refused), g.refused)
	}
	if g.stale > 0 {
		t.Errorf("%d requests were signed with a key older than the newest", g.stale)
	}
}

// imdsServer speaks IMDSv2 as EC2 documents it: PUT /latest/api/token with
// a TTL header gives a session token; GETs under
// /latest/meta-data/iam/security-credentials/ need it (version 1 requests
// are refused, as on an instance that requires IMDSv2).
func imdsServer(t *testing.T, m *stsMinter, role string) string {
	var mu sync.Mutex
	tokens := map[string]bool{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		const base = "/latest/meta-data/iam/security-credentials/"
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			if r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
				http.Error(w, "missing TTL", http.StatusBadRequest)
				return
			}
			mu.Lock()
			tok := fmt.Sprintf("imds-token-%d", len(tokens))
			tokens[tok] = true
			mu.Unlock()
			io.WriteString(w, tok)
			return
		case r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, base):
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		ok := tokens[r.Header.Get("X-aws-ec2-metadata-token")]
		mu.Unlock()
		if !ok {
			http.Error(w, "", http.StatusUnauthorized)
			return
		}
		switch strings.TrimPrefix(r.URL.Path, base) {
		case "":
			io.WriteString(w, role+"\n")
		case role:
			v, err := m.mint()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{
				"Code": "Success", "LastUpdated": m.clk.Now().UTC().Format(time.RFC3339), "Type": "AWS-HMAC",
				"AccessKeyId": v.AccessKeyID, "SecretAccessKey": v.SecretAccessKey, "Token": v.SessionToken,
				"Expiration": v.Expiration.UTC().Format(time.RFC3339),
			})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// An instance role's keys, served by instance metadata (IMDSv2) and
// minted for real by MinIO's STS, are refreshed as they expire: five
// expiries, no failed read, one refresh each.
func TestCredentialsIMDSRefresh(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	objs := putObjects(t, srv, bucket, 4)
	credentialEnv(t, srv.Endpoint)
	m := newSTSMinter(t, srv, clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), 15*time.Minute)
	t.Setenv(s3.EnvIMDSDisabled, "")
	t.Setenv(s3.EnvIMDSEndpoint, imdsServer(t, m, "longshore-reader"))
	runPastExpiries(t, srv, bucket, objs, m, 5, "instance metadata")
}

// Container credentials as EKS Pod Identity serves them: a GET of
// AWS_CONTAINER_CREDENTIALS_FULL_URI with the token of
// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, re-read at every refresh (the
// kubelet rotates it).
func TestCredentialsContainerRefresh(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	objs := putObjects(t, srv, bucket, 4)
	credentialEnv(t, srv.Endpoint)
	m := newSTSMinter(t, srv, clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), time.Hour)
	podIdentity(t, m)
	runPastExpiries(t, srv, bucket, objs, m, 4, "container credentials")
}

// podIdentity serves m's keys as EKS Pod Identity does, on loopback, and
// points the container-credentials variables at it: each GET must carry
// the token of the token file, which rotates at every key handed out.
func podIdentity(t *testing.T, m *stsMinter) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "eks-pod-identity-token")
	var mu sync.Mutex
	token := "pod-token-0"
	writeToken := func(s string) {
		mu.Lock()
		token = s
		mu.Unlock()
		if err := os.WriteFile(tokenFile, []byte(s), 0o600); err != nil {
			t.Error(err)
		}
	}
	writeToken(token)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		want := token
		mu.Unlock()
		if r.Method != http.MethodGet || r.URL.Path != "/v1/credentials" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != want {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		v, err := m.mint()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// The next refresh must present a new token.
		writeToken(fmt.Sprintf("pod-token-%d", m.count()))
		json.NewEncoder(w).Encode(map[string]any{
			"AccessKeyId": v.AccessKeyID, "SecretAccessKey": v.SecretAccessKey, "Token": v.SessionToken,
			"AccountId": "000000000000", "Expiration": v.Expiration.UTC().Format(time.RFC3339),
		})
	}))
	t.Cleanup(hs.Close)
	t.Setenv(s3.EnvContainerFullURI, hs.URL+"/v1/credentials")
	t.Setenv(s3.EnvContainerTokenFile, tokenFile)
}

// The coordinator's journal (--checkpoint s3://..., --s3-credentials
// container) commits through keys that expire: generations written
// with conditional puts (If-None-Match: *), the newest checked for a
// rival coordinator (HEAD), old ones pruned (DELETE), all to a real
// MinIO through the gate that refuses a key past its reported expiry.
// The test clock moves 30% of a key's hour between commits, as a
// running coordinator's would, so refreshes fall between commits, before
// each key ends: 20 commits over 6 hours, 6 refreshes, 6 expiries
// passed, none failed (the journal may not retry: a failed put would
// fail the commit), and a coordinator started afterwards finds every
// kept generation as written and nothing left that should have been
// pruned.
func TestCredentialsJournalRefresh(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	credentialEnv(t, srv.Endpoint)
	const lifetime = time.Hour
	m := newSTSMinter(t, srv, clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), lifetime)
	podIdentity(t, m)
	g := startGate(t, srv, m)
	ctx := context.Background()
	opts := s3.DefaultOptions() // the coordinator's, with --s3-credentials container
	opts.Endpoint = g.URL
	opts.Clock = m.clk
	opts.Credentials = string(s3.CredsContainer)
	st, err := stores.Open(ctx, srv.URL(bucket, "jobs/j1"), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	store := st.(*s3.Store)
	if src := store.CredentialSource(); !strings.Contains(src, "container credentials") {
		t.Errorf("CredentialSource() = %q, want container credentials", src)
	}
	const keep, commits = 4, 20
	jc := journal.DefaultConfig()
	jc.Store, jc.Keep, jc.Clock = st, keep, m.clk
	jc.Retries = -1 // every put must succeed the first time
	jn, err := journal.Open(ctx, jc)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := jn.Start(ctx, journal.StartOptions{}); err != nil || e != nil {
		t.Fatalf("Start on an empty location: %v, %v; want a fresh job", e, err)
	}
	id := journal.Identity{Digest: "sha256:test", Seed: 7, Block: 1, Window: 1, BatchSize: 4, Epochs: 1}
	if err := jn.Identify(id, false); err != nil {
		t.Fatal(err)
	}
	inc := jn.Incarnation()
	stateAt := func(k int) cluster.State {
		return cluster.State{Incarnation: inc, Seq: uint64(k), Samples: 1000, Seed: 7, Block: 1, Window: 1,
			Epochs: []cluster.EpochState{{Committed: []cluster.Range{{Start: 0, End: int64(10 * k)}}}}}
	}
	peers := []string{"10.0.0.1:7001"}
	for k := 1; k <= commits; k++ {
		m.clk.Advance(lifetime * 3 / 10)
		gen, err := jn.Write(ctx, stateAt(k), peers)
		if err != nil {
			t.Fatalf("commit %d at +%v: %v", k, time.Duration(k)*lifetime*3/10, err)
		}
		if gen != uint64(k) {
			t.Fatalf("commit %d wrote generation %d", k, gen)
		}
		if err := jn.Check(ctx); err != nil {
			t.Fatalf("check after commit %d: %v", k, err)
		}
	}
	// A key is refreshed at the first request past 80% of its life: every
	// third commit (0.9 h after the last refresh). 6 h of test time
	// passed: 7 keys, the first at open.
	if got, want := m.count(), 1+commits/3; got != want {
		t.Errorf("%d keys minted over %v, want %d", got, time.Duration(commits)*lifetime*3/10, want)
	}
	if n, err := store.CredentialRefreshes(); n != m.count() || err != nil {
		t.Errorf("CredentialRefreshes() = %d, %v; want %d, nil", n, err, m.count())
	}
	g.mu.Lock()
	if len(g.refused) > 0 {
		t.Errorf("%d requests were signed with expired keys: %v", len(g.refused), g.refused)
	}
	if g.stale > 0 {
		t.Errorf("%d requests were signed with a key older than the newest", g.stale)
	}
	g.mu.Unlock()

	// The next coordinator life, with the root keys: the newest generation
	// is the last commit, the kept ones are as written, the pruned ones gone.
	root, err := stores.Open(ctx, srv.URL(bucket, "jobs/j1"), srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	jc.Store = root
	next, err := journal.Open(ctx, jc)
	if err != nil {
		t.Fatal(err)
	}
	var wantGens []uint64
	for k := commits - keep + 1; k <= commits; k++ {
		wantGens = append(wantGens, uint64(k))
	}
	if got := next.Generations(); fmt.Sprint(got) != fmt.Sprint(wantGens) {
		t.Errorf("generations in the store: %v, want %v (the last %d; older ones pruned)", got, wantGens, keep)
	}
	e, err := next.Start(ctx, journal.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Gen != commits || e.Identity() != id || fmt.Sprint(e.Peers) != fmt.Sprint(peers) {
		t.Errorf("restored generation %d (identity %+v, peers %v), want %d (%+v, %v)", e.Gen, e.Identity(), e.Peers, commits, id, peers)
	}
	for _, gen := range wantGens {
		got, err := next.Load(ctx, gen)
		if err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		if want := stateAt(int(gen)); fmt.Sprint(got.State) != fmt.Sprint(want) {
			t.Errorf("generation %d holds %+v, want %+v", gen, got.State, want)
		}
	}
}

// Web identity (EKS IRSA): AssumeRoleWithWebIdentity with the token of
// AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, at AWS_ENDPOINT_URL_STS.
// MinIO answers that call only with an OpenID provider configured, so the
// STS endpoint here is a loopback server speaking the call's documented
// form and XML, minting the keys for real from MinIO's AssumeRole.
func TestCredentialsWebIdentityRefresh(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	objs := putObjects(t, srv, bucket, 4)
	credentialEnv(t, srv.Endpoint)
	m := newSTSMinter(t, srv, clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), time.Hour)

	const role = "arn:aws:iam::000000000000:role/longshore-reader"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("jwt-0"), 0o600); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
			http.Error(w, "want a POSTed form", http.StatusBadRequest)
			return
		}
		want, _ := os.ReadFile(tokenFile)
		if r.PostForm.Get("Action") != "AssumeRoleWithWebIdentity" || r.PostForm.Get("Version") != "2011-06-15" ||
			r.PostForm.Get("RoleArn") != role || r.PostForm.Get("WebIdentityToken") != string(want) {
			http.Error(w, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code></Error></ErrorResponse>", http.StatusBadRequest)
			return
		}
		v, err := m.mint()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// The token rotates, as the kubelet's projected token does.
		if err := os.WriteFile(tokenFile, []byte(fmt.Sprintf("jwt-%d", m.count())), 0o600); err != nil {
			t.Error(err)
		}
		var resp credentials.AssumeRoleWithWebIdentityResponse
		resp.Result.Credentials.AccessKey = v.AccessKeyID
		resp.Result.Credentials.SecretKey = v.SecretAccessKey
		resp.Result.Credentials.SessionToken = v.SessionToken
		resp.Result.Credentials.Expiration = v.Expiration
		w.Header().Set("Content-Type", "text/xml")
		xml.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(hs.Close)
	t.Setenv(s3.EnvWebIdentityTokenFile, tokenFile)
	t.Setenv(s3.EnvRoleARN, role)
	t.Setenv(s3.EnvEndpointSTS, hs.URL)
	runPastExpiries(t, srv, bucket, objs, m, 4, "web identity")
}

// A source that is configured but broken fails at open with its name,
// instead of falling back to anonymous requests.
func TestCredentialsBrokenSourceFailsOpen(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	credentialEnv(t, srv.Endpoint)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no role", http.StatusNotFound)
	}))
	t.Cleanup(hs.Close)
	t.Setenv(s3.EnvContainerFullURI, hs.URL+"/v1/credentials")
	_, err := stores.Open(context.Background(), srv.URL(bucket, ""), s3.DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), "container credentials") {
		t.Fatalf("open with a broken container endpoint: %v, want an error naming it", err)
	}
	if errors.Is(err, storage.ErrAccess) {
		t.Errorf("the open got as far as S3 (anonymous?): %v", err)
	}
}

// signJWT is an RS256 JSON Web Token of claims, as an OpenID provider
// issues it.
func signJWT(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signed := enc(map[string]string{"alg": "RS256", "typ": "JWT", "kid": kid}) + "." + enc(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// Web identity end to end against MinIO itself: MinIO trusts a loopback
// OpenID provider (discovery document and JWKS), the test signs the
// tokens the kubelet would project into AWS_WEB_IDENTITY_TOKEN_FILE, and
// the store gets its keys from MinIO's AssumeRoleWithWebIdentity
// (AWS_ENDPOINT_URL_STS), through the gate that refuses keys past the
// expiry MinIO reported (the token's, on the test clock). Four expiries,
// a new token each, no failed read.
func TestCredentialsWebIdentityMinIO(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const kid, clientID = "k1", "longshore"
	var issuer string
	// Unstarted until the issuer is known: the handler reads it.
	idp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			json.NewEncoder(w).Encode(map[string]any{
				"issuer": issuer, "jwks_uri": issuer + "/jwks",
				"authorization_endpoint": issuer + "/auth", "token_endpoint": issuer + "/token",
				"response_types_supported": []string{"id_token"}, "subject_types_supported": []string{"public"},
				"id_token_signing_alg_values_supported": []string{"RS256"},
			})
		case "/jwks":
			json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
				"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
				"n": base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
				"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
			}}})
		default:
			http.NotFound(w, r)
		}
	}))
	issuer = "http://" + idp.Listener.Addr().String()
	idp.Start()
	t.Cleanup(idp.Close)
	if idp.URL != issuer {
		t.Fatalf("the provider is at %s, not %s", idp.URL, issuer)
	}
	srv := miniotest.StartWithEnv(t,
		"MINIO_IDENTITY_OPENID_CONFIG_URL="+idp.URL+"/.well-known/openid-configuration",
		"MINIO_IDENTITY_OPENID_CLIENT_ID="+clientID,
		"MINIO_IDENTITY_OPENID_CLAIM_NAME=policy",
	)
	bucket := srv.NewBucket(t)
	objs := putObjects(t, srv, bucket, 4)
	credentialEnv(t, srv.Endpoint)
	clk := clock.NewFake(time.Now())
	m := newSTSMinter(t, srv, clk, 20*time.Minute)

	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken := func() {
		tok := signJWT(t, key, kid, map[string]any{
			"iss": issuer, "sub": "loader", "aud": clientID, "policy": "readwrite",
			// On the test clock, which runs ahead of MinIO's: no iat or
			// nbf, which MinIO would find in its future.
			"exp": clk.Now().Add(m.lifetime).Unix(),
		})
		if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeToken()
	m.onAdvance = writeToken
	t.Setenv(s3.EnvWebIdentityTokenFile, tokenFile)
	// MinIO takes any role ARN with a claim-based provider; the AWS SDKs
	// and this chain need one.
	t.Setenv(s3.EnvRoleARN, "arn:minio:iam:::role/dummy")
	// The gate is the STS endpoint too: it sees the keys MinIO issues.
	g := startGate(t, srv, m)
	t.Setenv(s3.EnvEndpointSTS, g.URL)
	runPastExpiriesVia(t, g, srv, bucket, objs, m, 4, "web identity")
}
