package s3

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/longshore/longshore/internal/clock"
)

// Credential sources, the values of Options.Credentials (and the
// binaries' --s3-credentials). CredsAuto tries the others in the order
// the AWS CLI does (docs/credentials.md): the environment, the shared
// config and credentials files, a web identity token file, container
// credentials, instance metadata; nothing found means anonymous requests.
const (
	CredsAuto        = "auto"
	CredsEnv         = "env"
	CredsProfile     = "profile" // "profile:NAME" names the profile
	CredsWebIdentity = "web-identity"
	CredsContainer   = "container"
	CredsIMDS        = "imds"
	CredsAnonymous   = "anonymous"
)

// Environment variables the credential sources read (besides the key pairs
// of DefaultOptions). minio-go's providers read most of them themselves;
// AWS_ENDPOINT_URL_STS, AWS_EC2_METADATA_SERVICE_ENDPOINT and
// AWS_EC2_METADATA_DISABLED are read here and passed on.
const (
	EnvProfile              = "AWS_PROFILE"
	EnvSharedCredentials    = "AWS_SHARED_CREDENTIALS_FILE"
	EnvConfigFile           = "AWS_CONFIG_FILE"
	EnvWebIdentityTokenFile = "AWS_WEB_IDENTITY_TOKEN_FILE"
	EnvRoleARN              = "AWS_ROLE_ARN"
	EnvRoleSessionName      = "AWS_ROLE_SESSION_NAME"
	EnvEndpointSTS          = "AWS_ENDPOINT_URL_STS"
	EnvContainerRelativeURI = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"
	EnvContainerFullURI     = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
	EnvContainerToken       = "AWS_CONTAINER_AUTHORIZATION_TOKEN"
	EnvContainerTokenFile   = "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"
	EnvIMDSDisabled         = "AWS_EC2_METADATA_DISABLED"
	EnvIMDSEndpoint         = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
)

// Timeouts of credential requests. minio-go detaches a refresh from the
// request that triggered it (no deadline), so every retrieval gets its own.
const (
	// credentialTimeout bounds one retrieval from STS, a container
	// endpoint or instance metadata: they answer in milliseconds, and a
	// refresh blocks the store's requests while it runs.
	credentialTimeout = 30 * time.Second
	// imdsProbeTimeout bounds auto's look for instance metadata when no
	// other source is configured: off EC2 nothing answers at
	// 169.254.169.254, and the AWS CLI gives it one second too (two here:
	// a token PUT, then two GETs).
	imdsProbeTimeout = 2 * time.Second
	// advisoryTimeout bounds a refresh while the keys in use have more
	// than a minute to live.
	advisoryTimeout = 5 * time.Second
	// refreshRetry is how long keys that failed to refresh but are still
	// valid are used before the next try.
	refreshRetry = 10 * time.Second
)

// ErrNoCredentials: the named credential source is not configured or gave
// no keys.
var ErrNoCredentials = errors.New("s3: no credentials")

// credentialSpec is a parsed Options.Credentials.
type credentialSpec struct {
	source  string // one of the Creds constants; "" means static or anonymous
	profile string // for CredsProfile: the name, "" for AWS_PROFILE or "default"
}

func parseCredentialSpec(s string) (credentialSpec, error) {
	if name, ok := strings.CutPrefix(s, CredsProfile+":"); ok {
		if name == "" {
			return credentialSpec{}, fmt.Errorf("s3 credentials %q: want profile:NAME", s)
		}
		return credentialSpec{source: CredsProfile, profile: name}, nil
	}
	switch s {
	case "", CredsAuto, CredsEnv, CredsProfile, CredsWebIdentity, CredsContainer, CredsIMDS, CredsAnonymous:
		return credentialSpec{source: s}, nil
	}
	return credentialSpec{}, fmt.Errorf("s3 credentials %q: want one of auto, env, profile, profile:NAME, web-identity, container, imds, anonymous", s)
}

// resolvedCredentials is where a store's keys come from.
type resolvedCredentials struct {
	creds *credentials.Credentials
	// source says where they came from, for the start-up line and error
	// hints; never a secret.
	source string
	// refresher is nil for static keys and anonymous access.
	refresher *refresher
	// client is the one credential requests go through (nil: none).
	client *http.Client
}

// closeIdle closes the idle connections to the credential source.
func (c resolvedCredentials) closeIdle() {
	if c.client != nil {
		c.client.CloseIdleConnections()
	}
}

// resolveCredentials picks the credential source o asks for and fetches
// the first keys from it, so that a source that is configured but broken
// fails at start with its name. getenv reads the environment (minio-go's
// providers read os.Getenv themselves: tests set the real environment).
func resolveCredentials(ctx context.Context, o Options, getenv func(string) string) (resolvedCredentials, error) {
	spec, err := parseCredentialSpec(o.Credentials)
	if err != nil {
		return resolvedCredentials{}, err
	}
	static := func() resolvedCredentials {
		src := "the given access key"
		if o.credSource != "" {
			src = "environment (" + o.credSource + ")"
		}
		return resolvedCredentials{creds: credentials.NewStaticV4(o.AccessKey, o.SecretKey, o.SessionToken), source: src}
	}
	anonymous := resolvedCredentials{creds: credentials.NewStatic("", "", "", credentials.SignatureAnonymous), source: "none: anonymous requests"}
	r := credentialResolver{ctx: ctx, getenv: getenv, clock: clock.Or(o.Clock),
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}
	switch spec.source {
	case "":
		if o.AccessKey == "" {
			return anonymous, nil
		}
		return static(), nil
	case CredsAnonymous:
		return anonymous, nil
	case CredsEnv:
		if o.AccessKey == "" {
			return resolvedCredentials{}, fmt.Errorf("%w: --s3-credentials=env but %s/%s are not set", ErrNoCredentials, EnvAccessKeyID, EnvSecretAccessKey)
		}
		return static(), nil
	case CredsProfile:
		return r.profile(spec.profile, true)
	case CredsWebIdentity:
		if getenv(EnvWebIdentityTokenFile) == "" {
			return resolvedCredentials{}, fmt.Errorf("%w: --s3-credentials=web-identity but %s is not set", ErrNoCredentials, EnvWebIdentityTokenFile)
		}
		return r.webIdentity()
	case CredsContainer:
		if getenv(EnvContainerRelativeURI) == "" && getenv(EnvContainerFullURI) == "" {
			return resolvedCredentials{}, fmt.Errorf("%w: --s3-credentials=container but neither %s nor %s is set", ErrNoCredentials, EnvContainerRelativeURI, EnvContainerFullURI)
		}
		if getenv(EnvWebIdentityTokenFile) != "" {
			return resolvedCredentials{}, fmt.Errorf("--s3-credentials=container: unset %s (minio-go's provider prefers the web identity)", EnvWebIdentityTokenFile)
		}
		return r.container()
	case CredsIMDS:
		for _, k := range []string{EnvWebIdentityTokenFile, EnvContainerRelativeURI, EnvContainerFullURI} {
			if getenv(k) != "" {
				return resolvedCredentials{}, fmt.Errorf("--s3-credentials=imds: unset %s (minio-go's provider prefers it to instance metadata)", k)
			}
		}
		return r.imds(credentialTimeout)
	}

	// Auto: the AWS CLI's order.
	if o.AccessKey != "" {
		return static(), nil
	}
	// AWS_PROFILE names a profile, which must then give keys (the AWS
	// CLI's ProfileNotFound); without it, no files or no keys in
	// "default" let the chain go on.
	named := getenv(EnvProfile) != ""
	if res, err := r.profile("", named); err == nil {
		return res, nil
	} else if named || !errors.Is(err, ErrNoCredentials) {
		return resolvedCredentials{}, err
	}
	if getenv(EnvWebIdentityTokenFile) != "" {
		return r.webIdentity()
	}
	if getenv(EnvContainerRelativeURI) != "" || getenv(EnvContainerFullURI) != "" {
		return r.container()
	}
	none := anonymous
	none.source = "none found (environment, profile, web identity, container, instance metadata): anonymous requests"
	if isTrue(getenv(EnvIMDSDisabled)) {
		none.source = "none found (environment, profile, web identity, container; " + EnvIMDSDisabled + " is set): anonymous requests"
		return none, nil
	}
	res, err := r.imds(imdsProbeTimeout)
	if err != nil {
		// Off EC2 nothing answers: that is "no instance role", and the
		// store is anonymous, as it always was without keys. The source
		// line says so.
		return none, nil
	}
	return res, nil
}

func isTrue(s string) bool { return strings.EqualFold(s, "true") || s == "1" }

type credentialResolver struct {
	ctx    context.Context
	getenv func(string) string
	clock  clock.Clock
	client *http.Client // for every credential request
}

// profile reads the shared config and credentials files (AWS_CONFIG_FILE,
// AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/config and ~/.aws/credentials)
// through minio-go's FileAWSCredentials: static keys, credential_process
// and SSO profiles. name "" means AWS_PROFILE, else "default". required
// false (auto without AWS_PROFILE) turns a missing file or profile, or a
// profile without keys, into ErrNoCredentials so the chain goes on.
func (r credentialResolver) profile(name string, required bool) (resolvedCredentials, error) {
	shown := name
	if shown == "" {
		shown = firstNonEmpty(r.getenv(EnvProfile), "default")
	}
	files := firstNonEmpty(r.getenv(EnvSharedCredentials), "~/.aws/credentials")
	if cf := r.getenv(EnvConfigFile); cf != "" {
		files += ", " + cf
	} else {
		files += ", ~/.aws/config"
	}
	source := fmt.Sprintf("profile %q (%s)", shown, files)
	p := &credentials.FileAWSCredentials{Profile: name}
	res, err := r.start(p, source, credentialTimeout)
	if errors.Is(err, ErrNoCredentials) {
		err = fmt.Errorf("%w (no aws_access_key_id, credential_process or sso_role_name: profiles that assume a role are not supported, see docs/credentials.md)", err)
	}
	if err == nil || required {
		return res, err
	}
	// Only "there is nothing here" lets the chain go on; a file that is
	// there but broken is an error, as in the AWS CLI.
	if errors.Is(err, ErrNoCredentials) || errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "does not exist") ||
		(r.getenv(EnvSharedCredentials) == "" && r.getenv(EnvConfigFile) == "" && userHomeMissing()) {
		return resolvedCredentials{}, fmt.Errorf("%w: %v", ErrNoCredentials, err)
	}
	return resolvedCredentials{}, err
}

// iam is minio-go's IAM provider, which serves web identity (STS
// AssumeRoleWithWebIdentity), container credentials (ECS, EKS Pod
// Identity) and instance metadata (IMDSv2), chosen by the environment in
// that order.
func (r credentialResolver) iam(endpoint string) *credentials.IAM {
	return &credentials.IAM{
		Endpoint: endpoint,
		// A client of its own: minio-go would lend the S3 transport,
		// whose request counts and timeouts are the object store's.
		Client: r.client,
	}
}

func (r credentialResolver) webIdentity() (resolvedCredentials, error) {
	if r.getenv(EnvRoleARN) == "" {
		return resolvedCredentials{}, fmt.Errorf("%w: %s is set but %s is not", ErrNoCredentials, EnvWebIdentityTokenFile, EnvRoleARN)
	}
	sts := r.getenv(EnvEndpointSTS) // empty: minio-go picks sts.REGION.amazonaws.com
	source := fmt.Sprintf("web identity (%s, role %s", r.getenv(EnvWebIdentityTokenFile), r.getenv(EnvRoleARN))
	if sts != "" {
		source += ", STS " + sts
	}
	return r.start(r.iam(strings.TrimSuffix(sts, "/")), source+")", credentialTimeout)
}

func (r credentialResolver) container() (resolvedCredentials, error) {
	where := r.getenv(EnvContainerFullURI)
	if rel := r.getenv(EnvContainerRelativeURI); rel != "" {
		where = credentials.DefaultECSRoleEndpoint + rel
	}
	switch {
	case r.getenv(EnvContainerTokenFile) != "":
		where += ", token from " + r.getenv(EnvContainerTokenFile)
	case r.getenv(EnvContainerToken) != "":
		where += ", token from " + EnvContainerToken
	}
	return r.start(r.iam(""), "container credentials ("+where+")", credentialTimeout)
}

func (r credentialResolver) imds(timeout time.Duration) (resolvedCredentials, error) {
	endpoint := strings.TrimSuffix(r.getenv(EnvIMDSEndpoint), "/")
	return r.start(r.iam(endpoint), "instance metadata (IMDSv2, "+firstNonEmpty(endpoint, credentials.DefaultIAMRoleEndpoint)+")", timeout)
}

// start wraps p in a refresher and fetches its first keys.
func (r credentialResolver) start(p credentials.Provider, source string, timeout time.Duration) (resolvedCredentials, error) {
	rf := &refresher{inner: p, source: source, now: r.clock.Now, client: r.client}
	rf.mu.timeout = timeout
	creds := credentials.New(rf)
	if _, err := creds.GetWithContext(&credentials.CredContext{Context: r.ctx}); err != nil {
		return resolvedCredentials{}, err
	}
	rf.mu.Lock()
	rf.mu.timeout = credentialTimeout
	rf.mu.Unlock()
	return resolvedCredentials{creds: creds, source: source, refresher: rf, client: r.client}, nil
}

// refresher is a credentials.Provider around one of minio-go's that
// decides itself when to refresh, on an injected clock:
//   - keys without an expiry (static profile keys) are fetched once;
//     minio-go's file provider would re-read the files for every request;
//   - keys with one are refreshed once 80% of their lifetime has passed
//     (minio-go's default window: a 6-hour instance role refreshes 72
//     minutes early, a 15-minute STS key 3 minutes early);
//   - a failed refresh while the keys are still valid keeps them and tries
//     again refreshRetry later, instead of failing the request that
//     happened to trigger it (the AWS SDKs do the same);
//   - every retrieval has a deadline, and an error names the source.
//
// minio-go's Credentials serialises calls to it; the mutex is for readers
// like Refreshes.
type refresher struct {
	inner  credentials.Provider
	source string
	now    func() time.Time
	client *http.Client // nil: http.DefaultClient

	mu struct {
		sync.Mutex
		timeout   time.Duration
		cur       credentials.Value
		have      bool
		refreshAt time.Time // zero: never
		refreshes int
		lastErr   error
	}
}

// refreshTime is when keys retrieved at now that expire at exp should be
// replaced: after 80% of their remaining life. Zero exp: never (zero).
func refreshTime(now, exp time.Time) time.Time {
	if exp.IsZero() {
		return time.Time{}
	}
	life := exp.Sub(now)
	if life <= 0 {
		return now
	}
	return now.Add(life * 4 / 5)
}

func (r *refresher) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	ctx := context.Background()
	if cc != nil && cc.Context != nil {
		ctx = cc.Context
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	timeout := r.mu.timeout
	if timeout == 0 {
		timeout = credentialTimeout
	}
	// Every request waits for a refresh: while the keys in use have a
	// while to live, a slow source gets less time, and the keys are
	// kept (below) until the next try.
	if exp := r.mu.cur.Expiration; r.mu.have && !exp.IsZero() && exp.Sub(r.now()) > time.Minute {
		timeout = min(timeout, advisoryTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := r.client
	if client == nil {
		client = http.DefaultClient
	}
	v, err := r.inner.RetrieveWithCredContext(&credentials.CredContext{Context: ctx, Client: client})
	if err == nil && (v.AccessKeyID == "" || v.SecretAccessKey == "") {
		err = ErrNoCredentials
	}
	now := r.now()
	if err != nil {
		if r.mu.have && (r.mu.cur.Expiration.IsZero() || now.Before(r.mu.cur.Expiration)) {
			r.mu.lastErr = err
			r.mu.refreshAt = now.Add(refreshRetry)
			if e := r.mu.cur.Expiration; !e.IsZero() && e.Before(r.mu.refreshAt) {
				r.mu.refreshAt = e
			}
			return r.mu.cur, nil
		}
		return credentials.Value{}, fmt.Errorf("credentials from %s: %w", r.source, err)
	}
	r.mu.cur, r.mu.have, r.mu.lastErr = v, true, nil
	r.mu.refreshAt = refreshTime(now, v.Expiration)
	r.mu.refreshes++
	return v, nil
}

func (r *refresher) Retrieve() (credentials.Value, error) { return r.RetrieveWithCredContext(nil) }

func (r *refresher) IsExpired() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.mu.have || (!r.mu.refreshAt.IsZero() && !r.now().Before(r.mu.refreshAt))
}

// state returns the number of successful retrievals and the error of the
// last failed refresh, if the keys in use are older than it.
func (r *refresher) state() (refreshes int, lastErr error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.refreshes, r.mu.lastErr
}

var _ credentials.Provider = (*refresher)(nil)

// userHomeMissing reports whether the default files cannot be found
// because there is no home directory (a container without HOME).
func userHomeMissing() bool {
	_, err := os.UserHomeDir()
	return err != nil
}

// CredentialsUsage is the help text of the binaries' --s3-credentials.
const CredentialsUsage = "where S3 keys come from: auto (the AWS CLI's order: AWS_ACCESS_KEY_ID, a profile, AWS_WEB_IDENTITY_TOKEN_FILE, container credentials, instance metadata; none: anonymous), env, profile, profile:NAME, web-identity, container, imds or anonymous (docs/credentials.md)"

// CredentialsFlag is Options.Credentials as a flag.Value, so that a bad
// source is refused when the flag (or its variable, or config key) is set.
type CredentialsFlag string

func (c *CredentialsFlag) String() string {
	if c == nil {
		return ""
	}
	return string(*c)
}

func (c *CredentialsFlag) Set(s string) error {
	if _, err := parseCredentialSpec(s); err != nil {
		return err
	}
	*c = CredentialsFlag(s)
	return nil
}

// CredentialLine is a tool's start-up line for st: "s3://b/p: credentials
// from SOURCE", or "" when st is not an S3 store (a directory needs none).
func CredentialLine(st any) string {
	if s, ok := st.(*Store); ok && s != nil {
		return s.String() + ": credentials from " + s.CredentialSource()
	}
	return ""
}
