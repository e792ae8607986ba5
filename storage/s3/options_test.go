package s3

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name                string
		env                 map[string]string
		endpoint, region    string
		ak, sk, token, hint string
	}{
		{"Nothing", nil, "", "", "", "", "", ""},
		{"S3SpecificWins", map[string]string{EnvEndpoint: "http://global:1", EnvEndpointS3: "http://s3:2"}, "http://s3:2", "", "", "", "", ""},
		{"Global", map[string]string{EnvEndpoint: "http://global:1"}, "http://global:1", "", "", "", "", ""},
		{"RegionOrder", map[string]string{EnvRegion: "eu-west-1", EnvDefaultRegion: "us-east-2"}, "", "eu-west-1", "", "", "", ""},
		{"DefaultRegion", map[string]string{EnvDefaultRegion: "us-east-2"}, "", "us-east-2", "", "", "", ""},
		{"AWSKeys", map[string]string{EnvAccessKeyID: "A", EnvSecretAccessKey: "S", EnvSessionToken: "T", EnvMinioRootUser: "u", EnvMinioRootPass: "p"},
			"", "", "A", "S", "T", "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"},
		{"HalfAWSFallsBackToMinioRoot", map[string]string{EnvAccessKeyID: "A", EnvMinioRootUser: "u", EnvMinioRootPass: "p", EnvSessionToken: "T"},
			"", "", "u", "p", "", "MINIO_ROOT_USER/MINIO_ROOT_PASSWORD"},
		{"MinioLegacy", map[string]string{EnvMinioAccessKey: "a", EnvMinioSecretKey: "s"}, "", "", "a", "s", "", "MINIO_ACCESS_KEY/MINIO_SECRET_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := optionsFromEnv(func(k string) string { return tc.env[k] })
			if o.Endpoint != tc.endpoint || o.Region != tc.region || o.AccessKey != tc.ak || o.SecretKey != tc.sk || o.SessionToken != tc.token {
				t.Errorf("got endpoint %q region %q keys %q/%q token %q", o.Endpoint, o.Region, o.AccessKey, o.SecretKey, o.SessionToken)
			}
			if tc.hint != "" && !strings.Contains(o.credHint(), tc.hint) {
				t.Errorf("credHint %q should name %s", o.credHint(), tc.hint)
			}
			if err := o.Validate(); err != nil {
				t.Errorf("defaults do not validate: %v", err)
			}
		})
	}
}

func TestOptionsValidateReportsAll(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("zero Options: %v", err)
	}
	o := Options{Endpoint: "s3.example.com", AccessKey: "a", FetchConcurrency: -1, MaxRetries: -2,
		RetryBase: time.Second, RetryCap: time.Millisecond, ResponseHeaderTimeout: -1}
	err := o.Validate()
	for _, want := range []string{"http:// or https://", "set together", "FetchConcurrency", "MaxRetries", "above RetryCap", "ResponseHeaderTimeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to mention %q", err, want)
		}
	}
	for _, bad := range []string{"http://h/path", "https://", "http://u:p@h", "http://h?x=1"} {
		if err := (Options{Endpoint: bad}).Validate(); err == nil {
			t.Errorf("endpoint %q accepted", bad)
		}
	}
	for _, good := range []string{"http://127.0.0.1:9000", "https://s3.amazonaws.com/", "http://[::1]:9000"} {
		if err := (Options{Endpoint: good}).Validate(); err != nil {
			t.Errorf("endpoint %q refused: %v", good, err)
		}
	}
}

func TestFullJitterBounds(t *testing.T) {
	base, ceiling := 100*time.Millisecond, time.Second
	for n := range 40 {
		limit := min(ceiling, base<<min(n, 20))
		var peak time.Duration
		for range 200 {
			d := fullJitter(base, ceiling, n)
			if d < 0 || d > limit {
				t.Fatalf("retry %d: backoff %v outside [0, %v]", n, d, limit)
			}
			peak = max(peak, d)
		}
		if peak < limit/2 {
			t.Errorf("retry %d: 200 draws never exceeded %v of [0, %v]: not full jitter", n, peak, limit)
		}
	}
	if d := fullJitter(0, time.Second, 3); d != 0 {
		t.Errorf("zero base: %v", d)
	}
	if d := fullJitter(time.Millisecond, 0, 70); d < 0 {
		t.Errorf("uncapped large n overflowed: %v", d)
	}
}

// TestDefaultsRideOutASlowStore: the binaries' options hedge slow GETs
// and put a progress deadline on every body; the zero Options do
// neither; a negative deadline is refused.
func TestDefaultsRideOutASlowStore(t *testing.T) {
	o := optionsFromEnv(func(string) string { return "" })
	if o.HedgeQuantile != 0.95 || o.ProgressTimeout != 2*time.Second || o.ProgressTimeout >= o.RequestTimeout {
		t.Errorf("defaults: HedgeQuantile %v, ProgressTimeout %v (RequestTimeout %v); want 0.95 and 2s, well under the request timeout", o.HedgeQuantile, o.ProgressTimeout, o.RequestTimeout)
	}
	if z := (Options{}); z.HedgeQuantile != 0 || z.ProgressTimeout != 0 {
		t.Errorf("zero Options: %+v", z)
	}
	if err := (Options{ProgressTimeout: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "ProgressTimeout") {
		t.Errorf("negative ProgressTimeout: %v", err)
	}
}
