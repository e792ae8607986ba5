package main

import (
	"io"
	"log/slog"
)

// newLogger is the node's logger, on stderr.
func newLogger(o options, stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
