package layers

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFuzzTargetsListed: every fuzz target of the module is in the
// Makefile's FUZZ_TARGETS (so `make test` runs it on its corpus), and
// every entry there names a target that exists, in its package's folder:
// a package that moves takes its fuzz targets with it.
func TestFuzzTargetsListed(t *testing.T) {
	root := "../.."
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\nFUZZ_TARGETS :=(.*?)\n\n`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no FUZZ_TARGETS in the Makefile")
	}
	listed := map[string]bool{}
	for _, f := range strings.Fields(strings.ReplaceAll(string(m[1]), "\\", " ")) {
		listed[f] = true
	}
	def := regexp.MustCompile(`(?m)^func (Fuzz\w*)\(`)
	found := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		for _, n := range def.FindAllSubmatch(src, -1) {
			found["./"+filepath.ToSlash(rel)+"/:"+string(n[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for f := range found {
		if !listed[f] {
			t.Errorf("fuzz target %s is not in the Makefile's FUZZ_TARGETS", f)
		}
	}
	for f := range listed {
		if !found[f] {
			t.Errorf("FUZZ_TARGETS lists %s, which does not exist (moved?)", f)
		}
	}
}
