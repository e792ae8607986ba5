// Package logs makes the daemons' loggers (log/slog): text on a terminal
// and JSON otherwise (--log-format auto), or as asked, at --log-level.
package logs

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"golang.org/x/term"
)

// Formats and levels the flags take.
const (
	FormatAuto = "auto"
	FormatText = "text"
	FormatJSON = "json"
)

// Check reports what is wrong with a format and a level, each with its
// flag's name.
func Check(format, level string) []error {
	var errs []error
	switch format {
	case FormatAuto, FormatText, FormatJSON:
	default:
		errs = append(errs, fmt.Errorf("--log-format %q: want auto, text or json", format))
	}
	if _, err := parseLevel(level); err != nil {
		errs = append(errs, err)
	}
	return errs
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// New returns a logger writing to w in format at level, with component
// as its first attribute. auto is text when w is a terminal and JSON
// otherwise (a file, a pipe, a container's log).
func New(w io.Writer, format, level, component string) *slog.Logger {
	l, err := parseLevel(level)
	if err != nil {
		l = slog.LevelInfo // Check refused it already
	}
	if format == FormatAuto {
		format = FormatJSON
		if f, ok := w.(interface{ Fd() uintptr }); ok && f.Fd() != ^uintptr(0) && term.IsTerminal(int(f.Fd())) {
			format = FormatText
		}
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if format == FormatJSON {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(h).With("component", component)
}

// Flags are --log-format and --log-level.
type Flags struct {
	Format, Level string
}

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Format, "log-format", FormatAuto, "log format: text, json, or auto (text on a terminal, JSON otherwise)")
	fs.StringVar(&f.Level, "log-level", "info", "log level: debug, info, warn or error")
}

// Check is Check of the flags.
func (f Flags) Check() []error { return Check(f.Format, f.Level) }

// New is New with the flags.
func (f Flags) New(w io.Writer, component string) *slog.Logger {
	return New(w, f.Format, f.Level, component)
}

// SyncWriter serializes writes to w: the daemons' loggers, progress lines
// and summaries share stderr, which need not be safe for concurrent use
// (a test's buffer).
func SyncWriter(w io.Writer) io.Writer {
	if _, ok := w.(*syncWriter); ok {
		return w
	}
	return &syncWriter{w: w}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Fd lets New see a terminal through the wrapper.
func (s *syncWriter) Fd() uintptr {
	if f, ok := s.w.(interface{ Fd() uintptr }); ok {
		return f.Fd()
	}
	return ^uintptr(0)
}
