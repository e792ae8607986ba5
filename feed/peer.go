package feed

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// NodeUIDEnv names the users a trainer accepts as its node besides its
// own and root: a comma-separated list of uids, or "any" to accept every
// one (a node that runs as another user, e.g. a Kubernetes DaemonSet
// sharing its socket directory with the trainers).
const NodeUIDEnv = "LONGSHORE_NODE_UID"

// PeerError is a socket served by a process of a user the trainer does
// not accept as its node: anyone who can write to the feed directory
// could otherwise put a socket there and feed the trainer its own data.
type PeerError struct {
	Path          string
	UID, Self     uint32
	Allowed       []uint32
	allowedSource string
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("feed: %s is served by a process of uid %d, not this user (uid %d), root or %s: refusing it (if the node runs as that user, set %s=%d)",
		e.Path, e.UID, e.Self, e.allowedSource, NodeUIDEnv, e.UID)
}

// nodeUIDs is the users cfg and $LONGSHORE_NODE_UID accept as the node
// besides the trainer's own and root (any: every user).
func nodeUIDs(cfg DialConfig) (uids []uint32, any bool, err error) {
	uids = append(uids, cfg.NodeUIDs...)
	env := strings.TrimSpace(os.Getenv(NodeUIDEnv))
	if env == "" {
		return uids, false, nil
	}
	if env == "any" {
		return uids, true, nil
	}
	for _, f := range strings.Split(env, ",") {
		u, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, false, fmt.Errorf("feed: $%s=%q: want uids separated by commas, or any", NodeUIDEnv, env)
		}
		uids = append(uids, uint32(u))
	}
	return uids, false, nil
}

// acceptsNode is whether a trainer running as self accepts a node of
// user uid: its own user, root, or one of allowed.
func acceptsNode(uid, self uint32, allowed []uint32, any bool) bool {
	if any || uid == self || uid == 0 {
		return true
	}
	for _, a := range allowed {
		if a == uid {
			return true
		}
	}
	return false
}

// checkNode asks the kernel who serves c (SO_PEERCRED: the process that
// listened) and refuses a user the trainer does not accept.
func checkNode(c *net.UnixConn, path string, cfg DialConfig) error {
	allowed, any, err := nodeUIDs(cfg)
	if err != nil {
		return err
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("feed: %s: SO_PEERCRED: %w", path, serr)
	}
	self := uint32(os.Getuid())
	if acceptsNode(cred.Uid, self, allowed, any) {
		return nil
	}
	src := NodeUIDEnv + " (unset)"
	if len(allowed) > 0 {
		src = fmt.Sprintf("the uids allowed (%v)", allowed)
	}
	return &PeerError{Path: path, UID: cred.Uid, Self: self, Allowed: allowed, allowedSource: src}
}
