package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

// TestS3CredentialsFlag: the tool lists an ImageFolder in a private
// bucket with the keys of a profile named by --s3-credentials (none in
// the environment), and says on stderr where the keys came from, without
// the secret.
func TestS3CredentialsFlag(t *testing.T) {
	ctx := context.Background()
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	root, err := stores.Open(ctx, srv.URL(bucket, "train"), srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	for c := range 2 {
		for i := range 3 {
			if _, err := root.Put(ctx, fmt.Sprintf("class-%d/img-%d.jpg", c, i), []byte("x"), storage.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	storage.Close(root)

	for _, k := range []string{s3.EnvAccessKeyID, s3.EnvSecretAccessKey, s3.EnvSessionToken, s3.EnvMinioRootUser, s3.EnvMinioRootPass,
		s3.EnvMinioAccessKey, s3.EnvMinioSecretKey, s3.EnvProfile, s3.EnvConfigFile, s3.EnvWebIdentityTokenFile,
		s3.EnvContainerFullURI, s3.EnvContainerRelativeURI, s3.EnvEndpointS3} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv(s3.EnvIMDSDisabled, "true")
	t.Setenv(s3.EnvEndpoint, srv.Endpoint)
	t.Setenv(s3.EnvRegion, "us-east-1")
	credsFile := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(credsFile, []byte(fmt.Sprintf("[loader]\naws_access_key_id=%s\naws_secret_access_key=%s\n", srv.AccessKey, srv.SecretKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(s3.EnvSharedCredentials, credsFile)

	out, errs, code := runManifest(t, "--dataset", srv.URL(bucket, "train"), "--s3-credentials", "profile:loader")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(errs, `credentials from profile "loader"`) || !strings.Contains(errs, "listed 6 samples") || strings.Contains(errs, srv.SecretKey) {
		t.Errorf("stderr should name the profile, never the secret:\n%s", errs)
	}
	if _, errs, code := runManifest(t, "--dataset", srv.URL(bucket, "train"), "--s3-credentials", "ec2"); code != 2 || !strings.Contains(errs, "profile:NAME") {
		t.Errorf("a bad source: exit %d, %s", code, errs)
	}
}
