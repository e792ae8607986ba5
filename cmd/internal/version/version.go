// Package version is the release every longshore binary reports with
// --version. `make release` sets Version from the VERSION file at link
// time (-ldflags "-X github.com/longshore/longshore/cmd/internal/version.Version=0.1.0");
// any other build reports "devel" and the commit Go stamped into it.
package version

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// Version is the release, set by the linker; empty in a development build.
var Version = ""

// String is the version line: "longshore-node 0.1.0 (go1.26.8 linux/amd64)".
func String(name string) string {
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
	return fmt.Sprintf("%s %s (%s %s/%s)", name, v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
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

// Exit prints the version line to stdout and exits 0 when os.Args asks
// for it (Asked); otherwise it returns. Each main calls it first.
func Exit(name string) {
	if Asked(os.Args[1:]) {
		print(os.Stdout, name)
		os.Exit(0)
	}
}

func print(w io.Writer, name string) { fmt.Fprintln(w, String(name)) }

// Binary is the installed name of the command in cmd/<dir>: cmd/node is
// longshore-node, cmd/coordinator longshore-coordinator, the others
// carry their directory's name.
func Binary(dir string) string {
	if dir == "node" || dir == "coordinator" {
		return "longshore-" + dir
	}
	return dir
}
