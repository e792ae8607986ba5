// Package version is the release every longshore binary reports with
// --version: internal/buildversion's, under the names the mains use.
// `make release` sets it from the VERSION file at link time
// (-ldflags "-X github.com/longshore/longshore/internal/buildversion.Version=0.1.0");
// any other build reports "devel" and the commit Go stamped into it.
package version

import "github.com/longshore/longshore/internal/buildversion"

// String is the version line: "longshore-node 0.1.0 (go1.26.8 linux/amd64)".
func String(name string) string { return buildversion.Line(name) }

// Asked reports whether args (without the program name) ask for the
// version only: a lone --version or -version.
func Asked(args []string) bool { return buildversion.Asked(args) }

// Exit prints the version line to stdout and exits 0 when os.Args asks
// for it (Asked); otherwise it returns. Each main calls it first.
func Exit(name string) { buildversion.ExitIfAsked(name) }

// Binary is the installed name of the command in cmd/<dir>: cmd/node is
// longshore-node, cmd/coordinator longshore-coordinator, the others
// carry their directory's name.
func Binary(dir string) string { return buildversion.Binary(dir) }
