// Package config lets a YAML file stand in for a daemon's command line:
// each key is a flag's name (`batch-size: 32` is --batch-size 32), so the
// file mirrors every flag without a second list to keep in step.
// Precedence, lowest first: the flag's default, the file (--config FILE,
// or LONGSHORE_CONFIG), the LONGSHORE_* environment (package flagenv),
// the command line.
//
// Every problem with a file is reported at once, with its key: keys that
// name no flag, values a flag refuses. --print-config writes the
// effective configuration in the same format, secrets redacted, so its
// output is a valid config file.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/longshore/longshore/cmd/internal/flagenv"
)

// ErrConfig is wrapped by the errors of a config file.
var ErrConfig = errors.New("config")

// Flag names that are not configuration (the file cannot set them).
const (
	FlagConfig      = "config"
	FlagPrintConfig = "print-config"
)

// Register adds --config and --print-config to fs.
func Register(fs *flag.FlagSet) (printConfig *bool) {
	fs.String(FlagConfig, "", "read flags from this YAML file (keys are flag names: batch-size: 32); the environment (LONGSHORE_*) and the command line override it")
	return fs.Bool(FlagPrintConfig, false, "print the effective configuration as YAML (secrets redacted) and exit")
}

// Path returns the config file named by args (--config FILE,
// --config=FILE) or, failing that, by LONGSHORE_CONFIG; "" if none.
func Path(args []string, lookup func(string) (string, bool)) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != FlagConfig {
			continue
		}
		if hasVal {
			return val
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	if v, ok := lookup(flagenv.Name(FlagConfig)); ok {
		return v
	}
	return ""
}

// Load sets fs's flags from the config file args name (if any), then
// from the environment: call it before fs.Parse(args), which lets the
// command line win. It returns every problem at once.
func Load(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	var errs []error
	if path := Path(args, lookup); path != "" {
		if err := apply(fs, path); err != nil {
			errs = append(errs, err)
		}
	}
	if err := flagenv.Set(fs, lookup); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func apply(fs *flag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("%w: %s: want a mapping of flag names to values, like batch-size: 32", ErrConfig, path)
	}
	var errs []error
	bad := func(k *yaml.Node, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s:%d: %s: %s", ErrConfig, path, k.Line, k.Value, fmt.Sprintf(format, a...)))
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		f := fs.Lookup(k.Value)
		switch {
		case k.Value == FlagConfig || k.Value == FlagPrintConfig:
			bad(k, "not a configuration key")
			continue
		case f == nil:
			bad(k, "no such flag (--%s)%s", k.Value, suggest(fs, k.Value))
			continue
		}
		val, err := scalar(v)
		if err != nil {
			bad(k, "%v", err)
			continue
		}
		if err := fs.Set(k.Value, val); err != nil {
			bad(k, "%q: %v", val, err)
		}
	}
	return errors.Join(errs...)
}

// scalar is a value as a flag takes it: a scalar as written, a list
// joined with commas (--slow-ranks, --join), null as "".
func scalar(v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", nil
		}
		return v.Value, nil
	case yaml.SequenceNode:
		var parts []string
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return "", errors.New("a list of lists or maps: want scalars")
			}
			parts = append(parts, e.Value)
		}
		return strings.Join(parts, ","), nil
	}
	return "", errors.New("a map: want a value (a flag's setting)")
}

// suggest names a flag close to name (one the user may have meant).
func suggest(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if d := distance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %s?", best)
}

func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// Redacted replaces a secret value in --print-config.
const Redacted = "<redacted>"

// Secret reports whether a flag's value is a secret itself (not the
// name of a file holding one): a name with token, secret or password in
// it that is not a -file flag.
func Secret(name string) bool {
	if strings.HasSuffix(name, "-file") {
		return false
	}
	for _, w := range []string{"token", "secret", "password"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// redactURL hides the password of a URL's user info.
func redactURL(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.User == nil {
		return v
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "redacted")
		return strings.Replace(u.String(), "redacted", Redacted, 1)
	}
	return v
}

// Print writes fs's effective configuration as a config file: every
// flag but --config and --print-config, its usage as a comment, values
// that are secrets (Secret) or a URL's password redacted.
func Print(w io.Writer, fs *flag.FlagSet) error {
	var flags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != FlagConfig && f.Name != FlagPrintConfig {
			flags = append(flags, f)
		}
	})
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range flags {
		v := f.Value.String()
		if Secret(f.Name) && v != "" {
			v = Redacted
		} else {
			v = redactURL(v)
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: f.Name, HeadComment: wrap(f.Usage)}
		val := &yaml.Node{Kind: yaml.ScalarNode, Value: v}
		if v == "" || readsAsNull(v) {
			// Quoted: plain, YAML reads it as no value (scalar: ""), and
			// `--sink null` would load back as --sink "".
			val.Style = yaml.DoubleQuotedStyle
		}
		m.Content = append(m.Content, k, val)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{m}}); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// readsAsNull reports whether YAML reads v, written plain, as null.
func readsAsNull(v string) bool {
	switch v {
	case "~", "null", "Null", "NULL":
		return true
	}
	return false
}

// wrap breaks a usage string into comment lines of about 76 columns.
func wrap(s string) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > 76 {
			lines = append(lines, line)
			line = w
			continue
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
