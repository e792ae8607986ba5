package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/longshore/longshore/storage/miniotest"
)

// minioServer is a MinIO server process started for the benchmark on a free
// loopback port, with its data in a temporary directory.
type minioServer struct {
	cmd       *exec.Cmd
	dir       string
	Endpoint  string
	AccessKey string
	SecretKey string
}

func startMinio(ctx context.Context) (*minioServer, error) {
	bin, err := miniotest.Binary() // the same search the tests use
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "longshore-bench-minio-")
	if err != nil {
		return nil, err
	}
	key := make([]byte, 12)
	rand.Read(key)
	s := &minioServer{dir: dir, Endpoint: "http://" + addr, AccessKey: "bench" + hex.EncodeToString(key[:4]), SecretKey: hex.EncodeToString(key)}
	s.cmd = exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", "127.0.0.1:0", dir)
	s.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey, "MINIO_BROWSER=off")
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("minio at %s did not become healthy", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *minioServer) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	os.RemoveAll(s.dir)
}

// serveMinioMain starts MinIO on loopback, uploads the dataset, writes
// {"url", "env", "pid"} as JSON to --ready, and serves until SIGTERM or
// SIGINT: the MinIO configuration of scripts/bench_peer.py.
func serveMinioMain(args []string) error {
	fset := flag.NewFlagSet("serve-minio", flag.ContinueOnError)
	dataset := fset.String("dataset", "", "directory of images to upload")
	packed := fset.String("packed", "", "also upload this packed copy of the dataset (longshore-pack --out)")
	ready := fset.String("ready", "", "write the server's URL and environment here once the upload is done")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *dataset == "" || *ready == "" {
		return errors.New("--dataset and --ready are required")
	}
	files, _, err := listFiles(*dataset)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := startMinio(ctx)
	if err != nil {
		return err
	}
	defer srv.Stop()
	url, err := upload(ctx, srv, *dataset, "imagenet-like", files)
	if err != nil {
		return err
	}
	info := map[string]any{"url": url, "env": srv.env(), "pid": srv.cmd.Process.Pid}
	if *packed != "" {
		pfiles, err := walkFiles(*packed)
		if err != nil {
			return err
		}
		if info["packed_url"], err = upload(ctx, srv, *packed, "imagenet-like-packed", pfiles); err != nil {
			return err
		}
	}
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp := *ready + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, *ready); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
