package feed

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

func TestAcceptsNode(t *testing.T) {
	for _, c := range []struct {
		uid, self uint32
		allowed   []uint32
		any       bool
		want      bool
	}{
		{1000, 1000, nil, false, true}, // its own user
		{0, 1000, nil, false, true},    // root
		{1001, 1000, nil, false, false},
		{1001, 1000, []uint32{7, 1001}, false, true},
		{1001, 1000, nil, true, true},
		{1001, 0, nil, false, false}, // a root trainer accepts only root
	} {
		if got := acceptsNode(c.uid, c.self, c.allowed, c.any); got != c.want {
			t.Errorf("node uid %d, trainer %d, allowed %v any %v: %v, want %v", c.uid, c.self, c.allowed, c.any, got, c.want)
		}
	}
	t.Setenv(NodeUIDEnv, "12,x")
	if _, _, err := nodeUIDs(DialConfig{}); err == nil {
		t.Error("a malformed $LONGSHORE_NODE_UID accepted")
	}
}

// listenerEnv makes the test binary a listener: it serves the socket at
// that path (accepting and holding connections) until its stdin closes.
const listenerEnv = "LONGSHORE_TEST_FEED_LISTENER"

func TestMain(m *testing.M) {
	if path := os.Getenv(listenerEnv); path != "" {
		ln, err := net.Listen("unix", path)
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("ready\n")
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRefusesNodeOfAnotherUser: a socket in the feed directory served by
// another (unprivileged) user is refused, naming the user and how to
// accept it; $LONGSHORE_NODE_UID accepts it. Before, the client spoke to
// whoever served the path. Needs root to start a listener as another
// user.
func TestRefusesNodeOfAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("starting a listener as another user needs root (TestAcceptsNode covers the rule)")
	}
	dir, err := os.MkdirTemp("", "lsfpeer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, SocketName(0))
	const nobody = 65534
	// A copy of the test binary the other user can run (the build
	// directory is private).
	bin := filepath.Join(dir, "listener")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), listenerEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("listener: %q", line)
	}
	ctx := context.Background()
	uc, err := connect(ctx, path, DialConfig{ConnectTimeout: -1})
	if err == nil {
		uc.Close()
	}
	var pe *PeerError
	if !errors.As(err, &pe) || pe.UID != nobody {
		t.Fatalf("dial a socket of uid %d: %v, want a *PeerError", nobody, err)
	}
	t.Log(err)
	// Accepted when asked.
	t.Setenv(NodeUIDEnv, strconv.Itoa(nobody))
	uc, err = connect(ctx, path, DialConfig{ConnectTimeout: -1})
	if err != nil {
		t.Fatalf("with %s=%d: %v", NodeUIDEnv, nobody, err)
	}
	uc.Close()
}
