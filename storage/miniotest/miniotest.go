// Package miniotest runs a real MinIO server for tests:
//
//	srv := miniotest.Start(t)            // fails the test if no binary
//	bucket := srv.NewBucket(t)           // a fresh, empty bucket
//	s, err := stores.Open(ctx, srv.URL(bucket, "prefix"), srv.Options())
//
// The server listens on a free 127.0.0.1 port, keeps its data in a
// temporary directory, uses random root credentials, and is stopped (and
// its directory removed) by t.Cleanup. Stop and Restart take it down and
// bring it back on the same port with the same data, for tests of retries
// and recovery.
//
// The binary is $LONGSHORE_MINIO, else $HOME/.cache/longshore/bin/minio,
// else minio on $PATH. With none of them the test fails (it never skips):
// run `make deps` to build one.
package miniotest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/longshore/longshore/internal/testports"
	"github.com/longshore/longshore/storage/s3"
)

// EnvBinary names the MinIO binary to use, overriding the search.
const EnvBinary = "LONGSHORE_MINIO"

// startTimeout bounds the wait for a starting server to answer its health
// check; MinIO formats its drive on first start, which takes a second or
// two on a loaded machine.
const startTimeout = 60 * time.Second

// Server is one running MinIO.
type Server struct {
	// Endpoint is "http://127.0.0.1:<port>".
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey string
	SecretKey string
	// Dir holds the server's data.
	Dir string

	bin   string
	addr  string
	netns string   // run inside this network namespace (StartInNetns); "" for the caller's
	env   []string // MINIO_* settings of StartWithEnv, after the harness's own

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
	logs *lockedBuffer
}

// Binary returns the MinIO binary the harness would use, or an error
// saying where it looked.
func Binary() (string, error) {
	var tried []string
	if p := os.Getenv(EnvBinary); p != "" {
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, "$"+EnvBinary+"="+p)
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "longshore", "bin", "minio")
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	tried = append(tried, "minio on $PATH")
	return "", fmt.Errorf("miniotest: no MinIO server binary (tried %s): run `make deps` to build one", strings.Join(tried, ", "))
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Start starts a MinIO server for the test and registers its shutdown.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWithEnv(t)
}

// StartWithEnv is Start with server settings ("MINIO_IDENTITY_OPENID_..."
// and the like) added to its environment, after the harness's own.
func StartWithEnv(t testing.TB, env ...string) *Server {
	t.Helper()
	s := newServer(t)
	s.env = env
	// A free port can be taken between our probe and MinIO's bind: retry.
	for attempt := 0; ; attempt++ {
		s.addr = testports.Addr(t, "127.0.0.1")
		s.Endpoint = "http://" + s.addr
		err := s.start()
		if err == nil {
			return s
		}
		if attempt == 2 {
			t.Fatalf("miniotest: %v", err)
		}
		t.Logf("miniotest: start on %s failed, retrying on another port: %v", s.addr, err)
	}
}

// StartInNetns starts a MinIO server inside the network namespace netns
// (made by the caller, e.g. with `ip netns add` and a veth pair),
// listening on ip:9000, an address of that namespace the caller can
// reach; it registers the shutdown. It needs the ip command and the
// privileges to enter the namespace.
func StartInNetns(t testing.TB, netns, ip string) *Server {
	t.Helper()
	s := newServer(t)
	s.netns = netns
	s.addr = net.JoinHostPort(ip, "9000") // the namespace's own: nothing else listens there
	s.Endpoint = "http://" + s.addr
	if err := s.start(); err != nil {
		t.Fatalf("miniotest: in network namespace %s: %v", netns, err)
	}
	return s
}

// newServer is a server not started yet: its binary, fresh credentials
// and a data directory, stopped when the test ends.
func newServer(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{
		AccessKey: "test-" + randomHex(6),
		SecretKey: randomHex(20),
		Dir:       t.TempDir(), // removed after the Cleanup below stops the server
		bin:       bin,
	}
	t.Cleanup(s.stop)
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// start launches the process and waits until it is live.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("already running")
	}
	args := []string{s.bin, "server", "--quiet", "--address", s.addr,
		"--certs-dir", filepath.Join(s.Dir, ".certs"), filepath.Join(s.Dir, "data")}
	if s.netns != "" {
		// ip execs the server in the namespace: the process is MinIO's,
		// so the signals below and the parent-death signal reach it.
		args = append([]string{"ip", "netns", "exec", s.netns}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MINIO_") {
			env = append(env, kv) // the parent's MinIO settings are not ours
		}
	}
	cmd.Env = append(env,
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	cmd.Env = append(cmd.Env, s.env...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	s.cmd, s.done, s.logs = cmd, done, logs

	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("minio exited during start (%v); its output:\n%s", cmd.ProcessState, logs.String())
		default:
		}
		resp, err := client.Get(s.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			s.killLocked()
			return fmt.Errorf("minio did not answer %s/minio/health/live within %v; its output:\n%s", s.Endpoint, startTimeout, logs.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// killLocked stops the process: SIGTERM, then SIGKILL after a grace period.
func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// Stop takes the server down, keeping its data and port for Restart.
// Requests meanwhile fail with "connection refused".
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.stop()
}

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Kill()
		<-s.done
		s.cmd = nil
	}
}

// Restart starts a stopped server again on the same port with the same
// data and credentials, waiting until it is live.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	var err error
	for range 50 { // the old socket may linger for a moment
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("miniotest: restart: %v", err)
}

// Logs returns what the server has printed (since its last start).
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		return ""
	}
	return s.logs.String()
}

// Options returns s3.Options for this server: its endpoint and root
// credentials, region us-east-1 (no location lookups), quick retries so
// tests of outages run in seconds, and MD5 checks of whole-object GETs as
// the binaries do them.
func (s *Server) Options() s3.Options {
	o := s3.Options{
		Endpoint:              s.Endpoint,
		Region:                "us-east-1",
		AccessKey:             s.AccessKey,
		SecretKey:             s.SecretKey,
		FetchConcurrency:      32,
		MaxRetries:            3,
		RetryBase:             10 * time.Millisecond,
		RetryCap:              200 * time.Millisecond,
		ResponseHeaderTimeout: 30 * time.Second,
		VerifyChecksums:       true,
	}
	return o
}

// Env returns the environment variables that make s3.DefaultOptions
// (and so the binaries) talk to this server.
func (s *Server) Env() []string {
	return []string{
		s3.EnvEndpoint + "=" + s.Endpoint,
		s3.EnvRegion + "=us-east-1",
		s3.EnvAccessKeyID + "=" + s.AccessKey,
		s3.EnvSecretAccessKey + "=" + s.SecretKey,
	}
}

// URL returns "s3://bucket/prefix".
func (s *Server) URL(bucket, prefix string) string {
	return "s3://" + bucket + "/" + prefix
}

// Client returns a minio-go client with root credentials, for setting up
// fixtures behind the store's back.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: "us-east-1",
	})
	if err != nil {
		t.Fatalf("miniotest: client: %v", err)
	}
	return c
}

// CreateBucket makes a bucket with the given name.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c := s.Client(t)
	for {
		err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"})
		if err == nil {
			return
		}
		// A MinIO that answers its liveness check may still be
		// initialising its object layer. (minio-go's own retries do not
		// wait: storage/s3 turns their backoff unit off.)
		if minio.ToErrorResponse(err).Code != "XMinioServerNotInitialized" || ctx.Err() != nil {
			t.Fatalf("miniotest: make bucket %q: %v", name, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// WaitIAM waits until MinIO's STS hands out temporary keys (AssumeRole
// with the root keys): a MinIO that serves objects may still be loading
// its IAM subsystem, and answers STS with "Server not initialized" until
// it has. Tests that mint keys call it first.
func (s *Server) WaitIAM(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		sts, err := credentials.NewSTSAssumeRole(s.Endpoint, credentials.STSAssumeRoleOptions{
			AccessKey: s.AccessKey, SecretKey: s.SecretKey, Location: "us-east-1",
		})
		if err == nil {
			_, err = sts.GetWithContext(&credentials.CredContext{Client: http.DefaultClient})
		}
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "not initialized") || ctx.Err() != nil {
			t.Fatalf("miniotest: STS AssumeRole: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// NewBucket makes a bucket with a fresh random name and returns the name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := "b-" + randomHex(8)
	s.CreateBucket(t, name)
	return name
}

// lockedBuffer collects the server's output from two pipes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		return len(p), nil // enough to diagnose; do not grow without bound
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
