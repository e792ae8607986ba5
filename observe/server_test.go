package observe

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestServerLoopbackAndToken: off loopback the server needs a token;
// with one, requests without it are refused.
func TestServerLoopbackAndToken(t *testing.T) {
	h := Handler(prometheus.NewRegistry(), nil)
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		if _, err := Listen(ServerConfig{Addr: addr}, h); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("Listen %s without a token: %v, want ErrNotLoopback", addr, err)
		}
	}
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(ServerConfig{Addr: "127.0.0.1:0", TokenFile: tok}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	get := func(auth string) int {
		req, _ := http.NewRequest("GET", "http://"+s.Addr()+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(""); c != http.StatusUnauthorized {
		t.Errorf("without a token: %d", c)
	}
	if c := get("Bearer wrong"); c != http.StatusUnauthorized {
		t.Errorf("with a wrong token: %d", c)
	}
	if c := get("Bearer s3cret"); c != http.StatusOK {
		t.Errorf("with the token: %d", c)
	}
	for addr, ok := range map[string]bool{"127.0.0.2:1": true, "[::1]:1": true, "localhost:1": true, "10.0.0.1:1": false, ":1": false} {
		if err := CheckListen("--metrics", addr, ""); (err == nil) != ok {
			t.Errorf("CheckListen(%q) = %v, want ok %v", addr, err, ok)
		}
	}
	if err := CheckListen("--metrics", "10.0.0.1:1", "token"); err != nil {
		t.Errorf("off loopback with a token file: %v", err)
	}
	if err := CheckListen("--metrics", "no-port", ""); err == nil {
		t.Error("an address without a port passed")
	}
}

// TestCheckMetricsFlags: the metrics flags both daemons share, every
// problem at once.
func TestCheckMetricsFlags(t *testing.T) {
	if errs := CheckMetricsFlags("", "", 0, time.Second); len(errs) != 0 {
		t.Errorf("metrics off: %v", errs)
	}
	if errs := CheckMetricsFlags("127.0.0.1:9464", "", time.Second, 0); len(errs) != 0 {
		t.Errorf("loopback: %v", errs)
	}
	errs := CheckMetricsFlags("", "tok", -time.Second, -time.Second)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "need --metrics") || !strings.Contains(errs[1].Error(), "need 0 or more") {
		t.Errorf("token without --metrics and negative durations: %v", errs)
	}
	if errs := CheckMetricsFlags("0.0.0.0:9464", "", 0, 0); len(errs) != 1 {
		t.Errorf("off loopback without a token: %v, want one error", errs)
	}
}
