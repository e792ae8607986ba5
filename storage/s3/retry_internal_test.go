package s3

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
)

// TestIsConnErrorDNS: name-resolution failures are retried, a restarting
// store's "no such host" included (Docker's DNS drops a stopped
// container's name until it is back); a cancelled context is not.
func TestIsConnErrorDNS(t *testing.T) {
	wrap := func(e error) error {
		return &url.Error{Op: "Get", URL: "http://minio:9000/b/k", Err: &net.OpError{Op: "dial", Net: "tcp", Err: e}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"not found", wrap(&net.DNSError{Err: "no such host", Name: "minio", IsNotFound: true}), true},
		{"temporary", wrap(&net.DNSError{Err: "server misbehaving", Name: "minio", IsTemporary: true}), true},
		{"timeout", wrap(&net.DNSError{Err: "i/o timeout", Name: "minio", IsTimeout: true}), true},
		{"canceled", fmt.Errorf("get: %w", context.Canceled), false},
	} {
		if got := isConnError(tc.err); got != tc.want {
			t.Errorf("%s: isConnError(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
