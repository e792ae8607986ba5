package s3

import (
	"fmt"
	"log/slog"
)

// Options print without their secrets: %v, %+v and %#v, and slog, show
// whether SecretKey and SessionToken are set, never what they are, so an
// Options in an error or a log line leaks nothing.

// redacted is how a set secret prints.
const redacted = "[redacted]"

func redact(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// redacted returns o with the secrets replaced, as a type without these
// methods (so formatting it does not recurse).
func (o Options) redacted() any {
	type plain Options
	p := plain(o)
	p.SecretKey, p.SessionToken = redact(o.SecretKey), redact(o.SessionToken)
	return p
}

// String formats o with its secrets redacted.
func (o Options) String() string { return fmt.Sprintf("%+v", o.redacted()) }

// GoString is %#v of o with its secrets redacted.
func (o Options) GoString() string { return fmt.Sprintf("%#v", o.redacted()) }

// LogValue makes slog print o with its secrets redacted.
func (o Options) LogValue() slog.Value { return slog.StringValue(o.String()) }
