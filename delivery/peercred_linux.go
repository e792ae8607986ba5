package delivery

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCred asks the kernel who is at the other end of c (SO_PEERCRED:
// the credentials of the process that connected, as of connect(2)).
func peerCred(c *net.UnixConn) (PeerCred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return PeerCred{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, err
	}
	if serr != nil {
		return PeerCred{}, fmt.Errorf("feed: SO_PEERCRED: %w", serr)
	}
	return PeerCred{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}
