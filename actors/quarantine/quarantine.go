// Package quarantine keeps a node's quarantine file (--quarantine): the
// keys of samples that failed for their own data, one JSON line each
// with the stage, class and reason (dataset.ExclusionLine), so a later
// run given the file with --exclude leaves them out.
//
// Which failures are the sample's own is Quarantinable: an answer about
// the object (not found, access denied, too large, a bad range) or its
// data (anything the decoder refused). A store that did not answer, gave
// bad answers however often it was asked, or a run being stopped says
// nothing about the sample.
package quarantine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/dataset"
)

// Quarantinable reports whether a failure is the sample's own, to be
// left out of later runs.
func Quarantinable(f actors.Failure) bool {
	if f.Class == "canceled" {
		return false
	}
	if f.Stage != actors.StageFetch {
		return true
	}
	switch f.Class {
	case "not_found", "access_denied", "too_large", "range":
		return true
	}
	return false
}

// File appends each sample that failed for its data to a file, once:
// the keys it already held (a file fed back with --exclude) are not
// written again. Each line is written as it is recorded, so a run that
// is killed keeps what it found. A nil *File records nothing.
type File struct {
	path string
	mu   struct {
		sync.Mutex
		f    *os.File
		seen map[string]bool
		n    int
		err  error
	}
}

// Open opens path for appending (nil for ""), reading the keys it
// already holds. Errors name the flag, --quarantine.
func Open(path string) (*File, error) {
	if path == "" {
		return nil, nil
	}
	q := &File{path: path}
	q.mu.seen = map[string]bool{}
	if old, err := os.Open(path); err == nil {
		ex, rerr := dataset.ReadExclusions(old)
		old.Close()
		if rerr != nil {
			return nil, fmt.Errorf("--quarantine %s holds something else: %w", path, rerr)
		}
		for k := range ex {
			q.mu.seen[k] = true
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("--quarantine: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--quarantine: %w", err)
	}
	q.mu.f = f
	return q, nil
}

// Path is the file's path ("" for a nil File).
func (q *File) Path() string {
	if q == nil {
		return ""
	}
	return q.path
}

// OnFailure is what actors.Deps.OnFailure takes: Record, or nil for a
// nil File (no quarantine).
func (q *File) OnFailure() func(actors.Failure) {
	if q == nil {
		return nil
	}
	return q.Record
}

// Record writes f's key if the failure is Quarantinable and the key is
// new to the file. Safe for concurrent use.
func (q *File) Record(f actors.Failure) {
	if q == nil || !Quarantinable(f) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.seen[f.Key] || q.mu.f == nil {
		return
	}
	q.mu.seen[f.Key] = true
	b, _ := json.Marshal(dataset.ExclusionLine{Key: f.Key, Stage: f.Stage.String(), Class: f.Class, Reason: f.Reason})
	if _, err := q.mu.f.Write(append(b, '\n')); err != nil && q.mu.err == nil {
		q.mu.err = err
	}
	q.mu.n++
}

// Added is how many keys this run added (0 for a nil File).
func (q *File) Added() int {
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.n
}

// Close closes the file and returns how many keys this run added, and
// the first write error if any. Later Records write nothing.
func (q *File) Close() (int, error) {
	if q == nil {
		return 0, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.f == nil {
		return q.mu.n, q.mu.err
	}
	err := q.mu.f.Close()
	q.mu.f = nil
	if q.mu.err != nil {
		err = q.mu.err
	}
	if err != nil {
		err = fmt.Errorf("--quarantine %s: %w", q.path, err)
	}
	return q.mu.n, err
}
