package storage

import (
	"fmt"
	"io"
	"net/url"
	"strings"
)

// Location is a parsed store URL.
type Location struct {
	// Scheme is "file" or "s3".
	Scheme string
	// Path is the directory, for "file".
	Path string
	// Bucket and Prefix ("" or ending in '/') are the S3 root, for "s3".
	Bucket string
	Prefix string
}

// String returns the location in URL form: "/data/x" or "s3://b/p/".
func (l Location) String() string {
	if l.Scheme == "s3" {
		return "s3://" + l.Bucket + "/" + l.Prefix
	}
	return l.Path
}

// ParseURL parses what the binaries accept as a dataset or checkpoint
// location: a directory path, a file:// URL, or s3://bucket[/prefix].
func ParseURL(raw string) (Location, error) {
	if raw == "" {
		return Location{}, fmt.Errorf("storage: empty location: want a directory, file:///dir or s3://bucket/prefix")
	}
	scheme, rest, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		return Location{Scheme: "file", Path: raw}, nil
	}
	switch strings.ToLower(scheme) {
	case "file":
		u, err := url.Parse(raw)
		if err != nil {
			return Location{}, fmt.Errorf("storage: location %q: %v", raw, err)
		}
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("storage: location %q: file URLs name a local path (file:///dir), not host %q", raw, u.Host)
		}
		if u.Path == "" {
			return Location{}, fmt.Errorf("storage: location %q: no path", raw)
		}
		return Location{Scheme: "file", Path: u.Path}, nil
	case "s3":
		bucket, prefix, _ := strings.Cut(rest, "/")
		if bucket == "" {
			return Location{}, fmt.Errorf("storage: location %q: no bucket (want s3://bucket/prefix)", raw)
		}
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		if prefix != "" {
			if err := CheckKey(strings.TrimSuffix(prefix, "/")); err != nil {
				return Location{}, fmt.Errorf("storage: location %q: prefix: %w", raw, err)
			}
		}
		return Location{Scheme: "s3", Bucket: bucket, Prefix: prefix}, nil
	}
	return Location{}, fmt.Errorf("storage: location %q: unsupported scheme %q (want a directory, file:///dir or s3://bucket/prefix)", raw, scheme)
}

// Close closes s if it holds anything to close (an io.Closer: the S3
// store's connections, a PackedStore's fetches), else does nothing.
func Close(s Store) error {
	if c, ok := s.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// RequestBudgeter is a store with a request rate to limit (the S3
// store): it takes a job-wide request budget's share
// (s3.Store.SetRequestBudget) and its part of the node's own cap when
// several stores share that (s3.Store.SetRequestCap).
type RequestBudgeter interface {
	SetRequestBudget(rps float64)
	SetRequestCap(rps float64)
}

// SetRequestBudget gives rps requests per second (0: none) to the first
// store under s, through the wrappers' Unwrap, that takes a budget; it
// reports whether one did (a directory store has no request rate).
func SetRequestBudget(s Store, rps float64) bool {
	b, ok := under[RequestBudgeter](s)
	if ok {
		b.SetRequestBudget(rps)
	}
	return ok
}

// SetRequestCap gives the node's own cap of rps requests per second (0:
// none), or a store's part of it, to the first store under s that takes
// a budget; it reports whether one did.
func SetRequestCap(s Store, rps float64) bool {
	b, ok := under[RequestBudgeter](s)
	if ok {
		b.SetRequestCap(rps)
	}
	return ok
}

// TakesRequestBudget reports whether a store under s (s itself first),
// through the wrappers' Unwrap, takes a budget (SetRequestBudget).
func TakesRequestBudget(s Store) bool {
	_, ok := under[RequestBudgeter](s)
	return ok
}

// under returns the first store under s (s itself first), through the
// wrappers' Unwrap, that is a T.
func under[T any](s Store) (T, bool) {
	for s != nil {
		if t, ok := s.(T); ok {
			return t, true
		}
		w, ok := s.(interface{ Unwrap() Store })
		if !ok {
			break
		}
		s = w.Unwrap()
	}
	var zero T
	return zero, false
}
