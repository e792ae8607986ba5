package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func newDir(t *testing.T) *DirStore {
	t.Helper()
	d, err := NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestNewDirStoreMissing(t *testing.T) {
	_, err := NewDirStore(filepath.Join(t.TempDir(), "nope"))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("NewDirStore of a missing dir: %v, want ErrNotFound", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := NewDirStore(f); !errors.Is(err, ErrNotFound) {
		t.Fatalf("NewDirStore of a file: %v, want ErrNotFound", err)
	}
}

// The multi-process race: child processes (this test binary, re-run) race
// IfAbsent puts on the same keys; exactly one process may win each key.
const childEnv = "LONGSHORE_DIRSTORE_CHILD"

func TestDirStoreIfAbsentAcrossProcesses(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		return // the child's work is in TestDirStoreChild
	}
	root := t.TempDir()
	const procs, keys = 4, 20
	start := time.Now().Add(500 * time.Millisecond).UnixNano() // line them up
	var wg sync.WaitGroup
	outs := make([]string, procs)
	for p := range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestDirStoreChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d,%d", childEnv, root, p, keys, start))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("child %d: %v\n%s", p, err, out)
			}
			outs[p] = string(out)
		})
	}
	wg.Wait()
	wins := make([]int, keys)
	for _, out := range outs {
		for line := range strings.Lines(out) {
			if k, ok := strings.CutPrefix(strings.TrimSpace(line), "WON "); ok {
				i, _ := strconv.Atoi(k)
				wins[i]++
			}
		}
	}
	d, _ := NewDirStore(root)
	for i, w := range wins {
		if w != 1 {
			t.Errorf("key %d: %d processes won an IfAbsent put, want exactly 1", i, w)
		}
		got, err := d.Get(context.Background(), fmt.Sprintf("k/%d", i), nil)
		if err != nil || !strings.HasPrefix(string(got), "proc ") {
			t.Errorf("key %d holds %q, %v", i, got, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(root, "k", reservedPrefix+"*"))
	if len(left) != 0 {
		t.Errorf("lock or temporary files left behind: %q", left)
	}
}

func TestDirStoreChild(t *testing.T) {
	env := os.Getenv(childEnv)
	if env == "" {
		t.Skip("helper for TestDirStoreIfAbsentAcrossProcesses")
	}
	f := strings.Split(env, ",")
	root, proc := f[0], f[1]
	keys, _ := strconv.Atoi(f[2])
	start, _ := strconv.ParseInt(f[3], 10, 64)
	d, err := NewDirStore(root)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(0, start)))
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 2 { // two goroutines per process, too
		wg.Go(func() {
			for i := range keys {
				_, err := d.Put(ctx, fmt.Sprintf("k/%d", i), []byte("proc "+proc+"/"+strconv.Itoa(g)), Cond{IfAbsent: true})
				switch {
				case err == nil:
					fmt.Printf("WON %d\n", i)
				case !errors.Is(err, ErrPrecondition):
					t.Errorf("put %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
}

func TestDirStoreStaleLockBroken(t *testing.T) {
	d := newDir(t)
	ctx := context.Background()
	if _, err := d.Put(ctx, "ckpt", []byte("v1"), Cond{}); err != nil {
		t.Fatal(err)
	}
	// A process that took the lock and died.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no `true` binary to get a dead PID from")
	}
	dead := cmd.Process.Pid
	lp := lockPath(d.path("ckpt"))
	if err := os.WriteFile(lp, fmt.Appendf(nil, "%s %d deadbeef\n", hostname, dead), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx5, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := d.Put(ctx5, "ckpt", []byte("v2"), Cond{IfMatch: md5Hex([]byte("v1"))}); err != nil {
		t.Fatalf("Put behind a dead process's lock: %v", err)
	}
	if _, err := os.Stat(lp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file still there after the put: %v", err)
	}
}

func TestDirStoreLiveLockWaits(t *testing.T) {
	d := newDir(t)
	ctx := context.Background()
	lp := lockPath(d.path("ckpt"))
	for _, holder := range []string{
		fmt.Sprintf("%s %d cafe\n", hostname, os.Getpid()), // alive: us
		fmt.Sprintf("other-host-%s 1 cafe\n", hostname),    // another host: cannot tell
	} {
		if err := os.WriteFile(lp, []byte(holder), 0o644); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := d.Put(short, "ckpt", []byte("v"), Cond{IfAbsent: true})
		cancel()
		if !errors.Is(err, ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Put behind a live lock (%q): %v, want ErrLocked and DeadlineExceeded", holder, err)
		}
		// Released while we wait: the put goes through.
		go func() {
			time.Sleep(50 * time.Millisecond)
			os.Remove(lp)
		}()
		longer, cancel := context.WithTimeout(ctx, time.Minute) // a failure backstop only
		_, err = d.Put(longer, "ckpt", []byte("v"), Cond{})
		cancel()
		if err != nil {
			t.Fatalf("Put after the lock was released: %v", err)
		}
	}
}

func TestDirStoreHidesOwnFiles(t *testing.T) {
	d := newDir(t)
	ctx := context.Background()
	os.MkdirAll(filepath.Join(d.Root(), "a"), 0o755)
	os.WriteFile(filepath.Join(d.Root(), "a", reservedPrefix+"tmp-123"), []byte("half a write"), 0o644)
	os.WriteFile(filepath.Join(d.Root(), "a", reservedPrefix+"lock-0"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(d.Root(), "empty", "dir"), 0o755)
	os.WriteFile(filepath.Join(d.Root(), "a", "real"), []byte("x"), 0o644)
	var keys []string
	d.List(ctx, "", func(i ObjectInfo) error { keys = append(keys, i.Key); return nil })
	if !slices.Equal(keys, []string{"a/real"}) {
		t.Errorf("List = %q, want only a/real", keys)
	}
	p, _ := d.ListPrefixes(ctx, "")
	if !slices.Equal(p, []string{"a/"}) {
		t.Errorf("ListPrefixes = %q, want [a/] (empty directories are not prefixes)", p)
	}
}

func TestDirStoreSymlinks(t *testing.T) {
	d := newDir(t)
	ctx := context.Background()
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, "cls"), 0o755)
	os.WriteFile(filepath.Join(outside, "cls", "1.jpg"), []byte("one"), 0o644)
	os.WriteFile(filepath.Join(outside, "file.jpg"), []byte("file"), 0o644)
	must(t, os.Symlink(filepath.Join(outside, "cls"), filepath.Join(d.Root(), "linked")))
	must(t, os.Symlink(filepath.Join(outside, "file.jpg"), filepath.Join(d.Root(), "f.jpg")))
	must(t, os.Symlink(d.Root(), filepath.Join(outside, "cls", "loop")))                     // back to the root
	must(t, os.Symlink(filepath.Join(outside, "gone"), filepath.Join(d.Root(), "dangling"))) // not an object
	var keys []string
	err := d.List(ctx, "", func(i ObjectInfo) error { keys = append(keys, i.Key); return nil })
	if err != nil {
		t.Fatal(err)
	}
	// linked/loop leads back to the root, an ancestor: skipped, not looped.
	want := []string{"f.jpg", "linked/1.jpg"}
	if !slices.Equal(keys, want) {
		t.Errorf("List = %q, want %q", keys, want)
	}
	if got, err := d.Get(ctx, "linked/1.jpg", nil); err != nil || string(got) != "one" {
		t.Errorf("Get through a directory symlink = %q, %v", got, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The walk must list in whole-key lexical order, whatever the names: a
// randomized check against MemStore's sort.
func TestDirStoreListOrderMatchesMem(t *testing.T) {
	ctx := context.Background()
	names := []string{"a", "a-", "a.b", "a0", "b", "ab", "a~", "A", "_", "a b", "é"}
	for seed := range 20 {
		d := newDir(t)
		m := NewMemStore("m")
		n := 0
		for i := range 30 {
			// Build a key from 1-3 names; skip ones that clash with an
			// existing file/directory on disk.
			parts := []string{names[(seed*7+i*3)%len(names)]}
			for j := range (seed + i) % 3 {
				parts = append(parts, names[(seed+i*5+j*11)%len(names)])
			}
			key := strings.Join(parts, "/")
			if _, err := d.Put(ctx, key, []byte(key), Cond{}); err != nil {
				continue
			}
			m.Put(ctx, key, []byte(key), Cond{})
			n++
		}
		for _, prefix := range []string{"", "a", "a/", "a-", "b/a"} {
			var dk, mk []string
			d.List(ctx, prefix, func(i ObjectInfo) error { dk = append(dk, i.Key); return nil })
			m.List(ctx, prefix, func(i ObjectInfo) error { mk = append(mk, i.Key); return nil })
			if !slices.Equal(dk, mk) {
				t.Fatalf("seed %d prefix %q: DirStore lists\n  %q\nMemStore lists\n  %q", seed, prefix, dk, mk)
			}
			dp, _ := d.ListPrefixes(ctx, prefix)
			mp, _ := m.ListPrefixes(ctx, prefix)
			if !slices.Equal(dp, mp) {
				t.Fatalf("seed %d prefix %q: DirStore prefixes %q, MemStore %q", seed, prefix, dp, mp)
			}
		}
	}
}

func TestDirStoreFileDirectoryConflict(t *testing.T) {
	d := newDir(t)
	ctx := context.Background()
	if _, err := d.Put(ctx, "a", []byte("x"), Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctx, "a/b", []byte("x"), Cond{}); !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), "both an object and a directory") {
		t.Fatalf("Put below an object: %v, want ErrInvalidKey explaining the conflict", err)
	}
	if _, err := d.Put(ctx, "c/d", []byte("x"), Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctx, "c", []byte("x"), Cond{}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("Put over a directory: %v, want ErrInvalidKey", err)
	}
	if got, err := d.Get(ctx, "c/d", nil); err != nil || string(got) != "x" {
		t.Fatalf("the directory's object was harmed: %q, %v", got, err)
	}
}
