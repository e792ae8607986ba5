package storage

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// DirStore is a Store on a local directory. Keys are '/'-separated paths
// below the root; every key component is a directory or file name.
//
// Reads (Get, GetRange) open the file and ReadAt straight into the caller's
// buffer: when dst has the capacity, the object's bytes are not copied
// through any other buffer and dst is not reallocated (opening the file
// still costs a few small allocations).
//
// Writes are atomic: Put writes a temporary file in the key's directory,
// fsyncs it, renames it over the key and fsyncs the directory, so readers
// see the old or the new content, never a mix, and a crash leaves one of
// the two (plus, at worst, a hidden temporary file).
//
// Conditional puts (and, so that they stay meaningful, every Put and
// Delete) are serialized per key: within a process by a mutex of the
// DirStore, across processes by an O_EXCL lock file beside the key. The
// guarantee: any number of processes and goroutines writing the same
// directory through DirStore, on one host with a local filesystem, see
// linearizable puts and deletes per key, so two IfAbsent puts cannot both
// win and an IfMatch put with a stale ETag fails. A lock file left by a
// process that died is removed once its PID is gone from this host. Not
// covered: writers that bypass DirStore (cp, rsync), network filesystems
// whose O_EXCL is not atomic, and lock files from another host (never
// broken; their waiters time out with ErrLocked when the context ends).
//
// ETags are the hex MD5 of the content. List leaves ObjectInfo.ETag empty
// (hashing every object of a dataset would be a full read); Stat computes
// it by reading the file.
//
// Symbolic links are followed, to files and to directories (as
// torchvision's ImageFolder does); a link back to an ancestor directory is
// skipped rather than looped over. Files and directories whose name starts
// with ".longshore-" are DirStore's own and are never listed.
type DirStore struct {
	root string // absolute and clean

	// writeMu serializes this store's writes, so its goroutines queue here
	// instead of polling each other's lock files.
	writeMu sync.Mutex
}

var (
	_ Store        = (*DirStore)(nil)
	_ PrefixLister = (*DirStore)(nil)
)

// NewDirStore opens the existing directory root as a store. It fails with
// an error wrapping ErrNotFound if root does not exist or is not a
// directory.
func NewDirStore(root string) (*DirStore, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("open dir %s: %w", root, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("open dir %s: %w", abs, mapFSError(err))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open dir %s: not a directory: %w", abs, ErrNotFound)
	}
	return &DirStore{root: abs}, nil
}

// String returns the root directory.
func (d *DirStore) String() string { return d.root }

// Root returns the root directory (absolute).
func (d *DirStore) Root() string { return d.root }

func (d *DirStore) path(key string) string {
	return filepath.Join(d.root, filepath.FromSlash(key))
}

// mapFSError translates an os error into the package's sentinels, keeping
// the original (with its path) in the chain.
func mapFSError(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %w", ErrAccess, err)
	}
	return err
}

func (d *DirStore) opError(op, key string, err error) error {
	return fmt.Errorf("%s %s/%s: %w", op, d.root, key, mapFSError(err))
}

// open opens key for reading; a directory is reported as not found.
func (d *DirStore) open(ctx context.Context, op, key string) (*os.File, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckKey(key); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, d.root, err)
	}
	f, err := os.Open(d.path(key))
	if err != nil {
		return nil, d.opError(op, key, err)
	}
	return f, nil
}

// Get implements Store.
func (d *DirStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	f, err := d.open(ctx, "get", key)
	if err != nil {
		return dst[:0], err
	}
	defer f.Close()
	out, err := readToEnd(f, 0, dst[:0])
	if err != nil {
		return dst[:0], d.opError("get", key, err)
	}
	return out, nil
}

// readToEnd appends the file's bytes from off to its end to buf (len 0).
// It reads into buf's spare capacity first and asks the file's size only
// when that capacity runs out, so a well-sized buffer costs one ReadAt.
func readToEnd(f *os.File, off int64, buf []byte) ([]byte, error) {
	buf = buf[:cap(buf)]
	n := 0
	for {
		if n == len(buf) {
			fi, err := f.Stat()
			if err != nil {
				return nil, err
			}
			if fi.IsDir() {
				return nil, syscall.EISDIR
			}
			want := fi.Size() - off
			if int64(n) >= want {
				return buf[:n], nil // the file ends exactly at the buffer's end
			}
			buf = slices.Grow(buf[:n], int(want)-n)
			buf = buf[:cap(buf)]
		}
		m, err := f.ReadAt(buf[n:], off+int64(n))
		n += m
		if err == io.EOF {
			return buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// GetRange implements Store.
func (d *DirStore) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	f, err := d.open(ctx, "get range", key)
	if err != nil {
		return dst[:0], err
	}
	defer f.Close()
	rangeErr := func() error {
		size := int64(-1)
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		return fmt.Errorf("get range %s/%s [%d,+%d) of %d bytes: %w", d.root, key, off, length, size, ErrRange)
	}
	if off < 0 {
		return dst[:0], rangeErr()
	}
	if length < 0 {
		out, err := readToEnd(f, off, dst[:0])
		if err != nil {
			return dst[:0], d.opError("get range", key, err)
		}
		if len(out) == 0 {
			// Empty is right only when off is exactly the size.
			fi, err := f.Stat()
			if err != nil {
				return dst[:0], d.opError("get range", key, err)
			}
			if off > fi.Size() {
				return dst[:0], rangeErr()
			}
		}
		return out, nil
	}
	if length == 0 {
		fi, err := f.Stat()
		if err != nil {
			return dst[:0], d.opError("get range", key, err)
		}
		if fi.IsDir() {
			return dst[:0], d.opError("get range", key, syscall.EISDIR)
		}
		if off > fi.Size() {
			return dst[:0], rangeErr()
		}
		return dst[:0], nil
	}
	buf := slices.Grow(dst[:0], int(length))[:length]
	n, err := f.ReadAt(buf, off)
	switch {
	case err == io.EOF || (err == nil && int64(n) < length):
		return dst[:0], rangeErr()
	case err != nil:
		return dst[:0], d.opError("get range", key, err)
	}
	return buf, nil
}

// Stat implements Store. It reads the whole file to compute the ETag.
func (d *DirStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	f, err := d.open(ctx, "stat", key)
	if err != nil {
		return ObjectInfo{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ObjectInfo{}, d.opError("stat", key, err)
	}
	if fi.IsDir() {
		return ObjectInfo{}, d.opError("stat", key, syscall.EISDIR)
	}
	etag, err := md5File(f)
	if err != nil {
		return ObjectInfo{}, d.opError("stat", key, err)
	}
	return ObjectInfo{Key: key, Size: fi.Size(), ETag: etag, ModTime: fi.ModTime()}, nil
}

func md5File(f *os.File) (string, error) {
	h := md5.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func md5Hex(data []byte) string {
	sum := md5.Sum(data)
	return hex.EncodeToString(sum[:])
}

// Put implements Store (see the type's comment for the locking guarantee).
func (d *DirStore) Put(ctx context.Context, key string, data []byte, c Cond) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := CheckKey(key); err != nil {
		return "", fmt.Errorf("put %s: %w", d.root, err)
	}
	p := d.path(key)
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
			return "", d.conflict(key)
		}
		return "", d.opError("put", key, err)
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return "", d.conflict(key)
	}
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	unlock, err := lockKey(ctx, p)
	if err != nil {
		return "", fmt.Errorf("put %s/%s: %w", d.root, key, err)
	}
	defer unlock()

	if c.IfAbsent || c.IfMatch != "" {
		cur, exists, err := currentETag(p)
		if err != nil {
			return "", d.opError("put", key, err)
		}
		if c.IfAbsent && exists {
			return "", fmt.Errorf("put %s/%s if absent: %w", d.root, key, ErrPrecondition)
		}
		if c.IfMatch != "" && (!exists || cur != c.IfMatch) {
			return "", fmt.Errorf("put %s/%s if-match %q: %w", d.root, key, c.IfMatch, ErrPrecondition)
		}
	}
	if err := writeAtomic(dir, p, data); err != nil {
		return "", d.opError("put", key, err)
	}
	return md5Hex(data), nil
}

// conflict reports a key that a directory tree cannot hold beside the
// existing ones: S3 can have both "a" and "a/b", a filesystem cannot.
func (d *DirStore) conflict(key string) error {
	return fmt.Errorf("put %s/%s: the key or one of its parents is both an object and a directory here; a directory store cannot hold both \"a\" and \"a/b\": %w",
		d.root, key, ErrInvalidKey)
}

// currentETag hashes the file at p; exists is false if there is none (or
// it is a directory, which is not an object).
func currentETag(p string) (etag string, exists bool, err error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return "", false, err
	} else if fi.IsDir() {
		return "", false, nil
	}
	etag, err = md5File(f)
	return etag, err == nil, err
}

func writeAtomic(dir, p string, data []byte) (err error) {
	tmp, err := os.CreateTemp(dir, reservedPrefix+"tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Delete implements Store. Deleting a missing key (or a directory) is not
// an error. Emptied directories are left in place; they hold no objects, so
// List and ListPrefixes do not show them.
func (d *DirStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return fmt.Errorf("delete %s: %w", d.root, err)
	}
	p := d.path(key)
	if fi, err := os.Lstat(filepath.Dir(p)); err != nil || !fi.IsDir() {
		return nil // no parent directory: nothing to delete
	}
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	unlock, err := lockKey(ctx, p)
	if err != nil {
		return fmt.Errorf("delete %s/%s: %w", d.root, key, err)
	}
	defer unlock()
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.IsDir()) {
		return nil
	}
	if err != nil {
		return d.opError("delete", key, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return d.opError("delete", key, err)
	}
	return syncDir(filepath.Dir(p))
}

// dirEntry is one name in a directory, with the sort key that puts the
// directory walk in lexical order of whole keys: a directory sorts as
// name+"/", because every key below it starts with that.
type dirEntry struct {
	name    string
	sortKey string
	isDir   bool
	info    fs.FileInfo
}

// readDirSorted lists dir's objects and subdirectories (symlinks resolved,
// reserved names dropped) in whole-key lexical order.
func readDirSorted(dir string) ([]dirEntry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]dirEntry, 0, len(des))
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, reservedPrefix) {
			continue
		}
		var fi fs.FileInfo
		if de.Type()&fs.ModeSymlink != 0 {
			fi, err = os.Stat(filepath.Join(dir, name))
			if err != nil {
				continue // dangling link: not an object
			}
		} else if fi, err = de.Info(); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted since ReadDir
			}
			return nil, err
		}
		switch {
		case fi.IsDir():
			out = append(out, dirEntry{name: name, sortKey: name + "/", isDir: true, info: fi})
		case fi.Mode().IsRegular():
			out = append(out, dirEntry{name: name, sortKey: name, info: fi})
		}
	}
	slices.SortFunc(out, func(a, b dirEntry) int { return cmp.Compare(a.sortKey, b.sortKey) })
	return out, nil
}

// List implements Store. It walks only the directories that can hold keys
// with the prefix, in lexical key order.
func (d *DirStore) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckPrefix(prefix); err != nil {
		return fmt.Errorf("list %s: %w", d.root, err)
	}
	// Start at the deepest directory the prefix names.
	start := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i+1]
	}
	fi, err := d.statDir(start)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil // no such directory: no keys
		}
		return fmt.Errorf("list %s/%s: %w", d.root, prefix, mapFSError(err))
	}
	return d.walk(ctx, start, prefix, []fs.FileInfo{fi}, fn)
}

// statDir stats the directory for key prefix dirKey ("" or ending in '/').
func (d *DirStore) statDir(dirKey string) (fs.FileInfo, error) {
	fi, err := os.Stat(d.dirPath(dirKey))
	if err == nil && !fi.IsDir() {
		err = syscall.ENOTDIR
	}
	return fi, err
}

func (d *DirStore) dirPath(dirKey string) string {
	if dirKey == "" {
		return d.root
	}
	return d.path(strings.TrimSuffix(dirKey, "/"))
}

// walk lists the directory for key prefix dirKey ("" or ending in '/'),
// calling fn for the objects whose key starts with prefix. ancestors holds
// the directories on the path (dirKey's last), to skip symlink cycles.
func (d *DirStore) walk(ctx context.Context, dirKey, prefix string, ancestors []fs.FileInfo, fn func(ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entries, err := readDirSorted(d.dirPath(dirKey))
	if err != nil {
		if len(ancestors) > 1 && errors.Is(err, fs.ErrNotExist) {
			return nil // removed while we walked
		}
		return fmt.Errorf("list %s/%s: %w", d.root, dirKey, mapFSError(err))
	}
	for i, e := range entries {
		if i%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		key := dirKey + e.sortKey
		if !strings.HasPrefix(key, prefix) && !strings.HasPrefix(prefix, key) {
			continue
		}
		if !e.isDir {
			if !strings.HasPrefix(key, prefix) {
				continue
			}
			if err := fn(ObjectInfo{Key: key, Size: e.info.Size(), ModTime: e.info.ModTime()}); err != nil {
				return err
			}
			continue
		}
		if slices.ContainsFunc(ancestors, func(a fs.FileInfo) bool { return os.SameFile(a, e.info) }) {
			continue // a symlink back up the tree
		}
		if err := d.walk(ctx, key, prefix, append(ancestors, e.info), fn); err != nil {
			return err
		}
	}
	return nil
}

// errStopWalk ends a walk early once it has found what it looked for.
var errStopWalk = errors.New("stop walk")

// ListPrefixes implements PrefixLister: the subdirectories of prefix's
// directory that match it and hold at least one object (S3 has no empty
// directories, and neither does a DirStore listing).
func (d *DirStore) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("list prefixes %s: %w", d.root, err)
	}
	dirKey := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirKey = prefix[:i+1]
	}
	root, err := d.statDir(dirKey)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	var entries []dirEntry
	if err == nil {
		entries, err = readDirSorted(d.dirPath(dirKey))
	}
	if err != nil {
		return nil, fmt.Errorf("list prefixes %s/%s: %w", d.root, prefix, mapFSError(err))
	}
	var out []string
	for _, e := range entries {
		key := dirKey + e.sortKey
		if !e.isDir || !strings.HasPrefix(key, prefix) {
			continue
		}
		// Does the directory hold any object? Stop at the first.
		err := d.walk(ctx, key, key, []fs.FileInfo{root, e.info}, func(ObjectInfo) error { return errStopWalk })
		switch {
		case errors.Is(err, errStopWalk):
			out = append(out, key)
		case err != nil:
			return nil, err
		}
	}
	return out, nil
}
