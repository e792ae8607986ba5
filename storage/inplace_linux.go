//go:build linux

package storage

import "syscall"

// remoteFS names the file systems (statfs f_type, from linux/magic.h and
// the file systems' own sources) whose reads cross a network or leave
// the kernel: a range read there is a request.
var remoteFS = map[uint32]string{
	0x6969:     "nfs",
	0xff534d42: "cifs",
	0xfe534d42: "smb2",
	0x517b:     "smb",
	0x01021997: "9p",
	0x0bd00bd0: "lustre",
	0x65735546: "fuse", // s3fs, gcsfuse, mountpoint-s3, sshfs, ...
	0x47504653: "gpfs",
	0x00c36400: "ceph",
	0x19830326: "beegfs",
	0x5346414f: "afs",
	0x6b414653: "afs",
	0x73757245: "coda",
}

// localFS reports whether dir's file system is a local one (not in
// remoteFS); false if it cannot be told.
func localFS(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	_, remote := remoteFS[uint32(st.Type)]
	return !remote
}
