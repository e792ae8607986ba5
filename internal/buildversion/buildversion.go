// Package buildversion is the release a longshore binary reports with
// --version (cmd/internal/version, which every main uses, is built on
// it). It lives here, importable by the whole module, because one
// package must answer before main: in a -tags cuda build,
// gpu/internal/cuinit initializes CUDA in its package init and exits if
// there is no driver, and a lone --version must be answered before that
// (a CUDA image prints its version on a host without a GPU). Package
// initialization runs a package's imports first, so cuinit, importing
// this package, can ask it.
//
// `make release` sets Version from the VERSION file at link time
// (-ldflags "-X github.com/longshore/longshore/internal/buildversion.Version=0.1.0");
// any other build reports "devel" and the commit Go stamped into it.
package buildversion

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
)

// Version is the release, set by the linker; empty in a development build.
var Version = ""

// Line is the version line: "longshore-node 0.1.0 (go1.26.8 linux/amd64)".
func Line(name string) string {
	v := Version
	if v == "" {
		v = "devel"
		if rev, dirty := revision(); rev != "" {
			v += " " + rev
			if dirty {
				v += "-dirty"
			}
		}
	}
	return name + " " + v + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}

func revision() (rev string, dirty bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	return rev, dirty
}

// Asked reports whether args (without the program name) ask for the
// version only: a lone --version or -version.
func Asked(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-version")
}

// Binary is the installed name of the command in cmd/<dir>: cmd/node is
// longshore-node, cmd/coordinator longshore-coordinator, the others
// carry their directory's name.
func Binary(dir string) string {
	if dir == "node" || dir == "coordinator" {
		return "longshore-" + dir
	}
	return dir
}

// ExitIfAsked prints the version line to stdout and exits 0 when os.Args
// asks for the version only (Asked); otherwise it returns. name "" is
// the running executable's (Binary of its file name), for callers that
// run before main knows its name.
func ExitIfAsked(name string) {
	if !Asked(os.Args[1:]) {
		return
	}
	if name == "" {
		name = Binary(filepath.Base(os.Args[0]))
	}
	os.Stdout.WriteString(Line(name) + "\n")
	os.Exit(0)
}
