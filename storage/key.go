package storage

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key any store accepts, in bytes (S3's limit).
const MaxKeyLen = 1024

// reservedPrefix starts the names of DirStore's temporary and lock files.
// No key component may start with it, so those files never collide with an
// object and List can hide them.
const reservedPrefix = ".longshore-"

// CheckKey reports whether key is a valid object key, returning an error
// wrapping ErrInvalidKey if not. Every store applies the same rules, so a
// dataset that works on one store works on all:
//
//   - 1 to MaxKeyLen bytes of valid UTF-8, no NUL byte;
//   - '/'-separated components, none empty, "." or "..": no leading or
//     trailing '/', no "//", so a key can never leave a DirStore's root;
//   - no component starting with ".longshore-" (reserved for DirStore's
//     temporary and lock files).
func CheckKey(key string) error {
	if why := keyProblem(key); why != "" {
		return fmt.Errorf("key %q: %s: %w", key, why, ErrInvalidKey)
	}
	return nil
}

func keyProblem(key string) string {
	switch {
	case key == "":
		return "empty"
	case len(key) > MaxKeyLen:
		return fmt.Sprintf("longer than %d bytes", MaxKeyLen)
	case !utf8.ValidString(key):
		return "not valid UTF-8"
	case strings.IndexByte(key, 0) >= 0:
		return "contains a NUL byte"
	case key[0] == '/':
		return "absolute (starts with '/')"
	}
	for comp := range strings.SplitSeq(key, "/") {
		switch {
		case comp == "":
			return "empty path component (\"//\" or a trailing '/')"
		case comp == "." || comp == "..":
			return "contains a \".\" or \"..\" component"
		case strings.HasPrefix(comp, reservedPrefix):
			return "component starts with the reserved \"" + reservedPrefix + "\""
		}
	}
	return ""
}

// CheckPrefix validates a List prefix: everything up to its last '/' must
// be a valid key (a "directory"); what follows is only a filter on names.
func CheckPrefix(prefix string) error {
	i := strings.LastIndexByte(prefix, '/')
	if i < 0 {
		return nil
	}
	if why := keyProblem(prefix[:i]); why != "" {
		return fmt.Errorf("prefix %q: %s: %w", prefix, why, ErrInvalidKey)
	}
	return nil
}
