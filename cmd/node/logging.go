package main

import (
	"io"
	"log/slog"
)

// newLogger is the node's logger, on stderr (--log-format, --log-level).
func newLogger(o options, stderr io.Writer) *slog.Logger { return o.logs.New(stderr, "node") }
