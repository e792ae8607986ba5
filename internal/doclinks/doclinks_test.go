package doclinks

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, from this package's directory.
const root = "../.."

// pages are the Markdown files checked, as globs under root.
var pages = []string{"README.md", "CHANGELOG.md", "docs/*.md", "clients/python/README.md", "deploy/k8s/README.md"}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`+[^`]*`+")
	// [text](target) and ![alt](target), an optional "title" after the target
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// [label]: target
	refLink   = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	atx       = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlID    = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	linkInHdr = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// link is one link found on a page.
type link struct {
	line   int
	target string
}

// scan returns a page's links and its anchors (GitHub's: the headings'
// slugs, numbered when repeated, and explicit <a name|id>), leaving out
// fenced code blocks and inline code.
func scan(text string) (links []link, anchors map[string]bool) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			anchors[m[1]] = true
		}
		if m := atx.FindStringSubmatch(l); m != nil {
			s := slug(m[2])
			if n := seen[s]; n > 0 {
				anchors[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
		code := inlineCode.ReplaceAllString(l, "")
		for _, m := range inlineLink.FindAllStringSubmatch(code, -1) {
			links = append(links, link{i + 1, m[1]})
		}
		if m := refLink.FindStringSubmatch(code); m != nil {
			links = append(links, link{i + 1, m[1]})
		}
	}
	return links, anchors
}

// slug is GitHub's anchor for a heading: its text (a link's text, code
// without the backticks), lower case, letters, digits, '-' and '_' kept,
// spaces made '-', everything else dropped.
func slug(heading string) string {
	heading = linkInHdr.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// external says whether a target is outside the repository by scheme.
func external(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	scheme, _, ok := strings.Cut(target, ":")
	return ok && !strings.ContainsAny(scheme, "/.#") && len(scheme) > 1
}

// check returns what is wrong with each relative link of the pages:
// a target that does not exist, one outside the repository, an anchor
// no heading of the target makes.
func check(t *testing.T, repo string, files []string) []string {
	t.Helper()
	absRepo, err := filepath.Abs(repo)
	if err != nil {
		t.Fatal(err)
	}
	anchorsOf := map[string]map[string]bool{}
	pageAnchors := func(path string) (map[string]bool, error) {
		if a, ok := anchorsOf[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		_, a := scan(string(b))
		anchorsOf[path] = a
		return a, nil
	}
	var bad []string
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(absRepo, f))
		if err != nil {
			t.Fatal(err)
		}
		links, _ := scan(string(b))
		for _, l := range links {
			if external(l.target) {
				continue
			}
			where := fmt.Sprintf("%s:%d: %s", f, l.line, l.target)
			path, frag, _ := strings.Cut(l.target, "#")
			target := filepath.Join(absRepo, f)
			if path != "" {
				target = filepath.Join(filepath.Dir(target), filepath.FromSlash(path))
			}
			if r, err := filepath.Rel(absRepo, target); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				bad = append(bad, where+": outside the repository")
				continue
			}
			st, err := os.Stat(target)
			if err != nil {
				bad = append(bad, where+": no such file or directory")
				continue
			}
			if frag == "" || st.IsDir() || !strings.HasSuffix(target, ".md") {
				continue
			}
			a, err := pageAnchors(target)
			if err != nil {
				t.Fatal(err)
			}
			if !a[frag] {
				bad = append(bad, where+": no heading makes #"+frag)
			}
		}
	}
	return bad
}

func files(t *testing.T, repo string) []string {
	t.Helper()
	var out []string
	for _, g := range pages {
		m, err := filepath.Glob(filepath.Join(repo, g))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			r, err := filepath.Rel(repo, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, filepath.ToSlash(r))
		}
	}
	return out
}

// TestLinks: every relative link of README.md and the docs resolves.
func TestLinks(t *testing.T) {
	fs := files(t, root)
	if !slices.Contains(fs, "README.md") || !slices.Contains(fs, "docs/architecture.md") {
		t.Fatalf("the pages found under %s are not the project's: %v", root, fs)
	}
	for _, b := range check(t, root, fs) {
		t.Error(b)
	}
}

// TestCheckFindsBrokenLinks: the checker itself, on a small tree with a
// good link of every kind and a broken one of every kind.
func TestCheckFindsBrokenLinks(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "repo")
	write := func(path, text string) {
		p := filepath.Join(repo, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(repo), "shared.md"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	write("docs/a.md", "# A page\n\n## Memory budget (`--memory-budget`)\n\n## Twice\n\n## Twice\n\n<a name=\"here\"></a>\n")
	write("examples/x/main.go", "package main\n")
	write("README.md", strings.Join([]string{
		"# Top",
		"[ok](docs/a.md) [ok](docs/a.md#memory-budget---memory-budget) [ok](docs/a.md#twice-1)",
		"[ok](docs/a.md#here) [ok](#top) [ok](examples/x) ![ok](examples/x/main.go \"title\")",
		"[ok](https://example.com/x.md) [ok](mailto:a@b.c) `[not a link](missing.md)`",
		"```",
		"[not a link](missing.md)",
		"```",
		"[bad](docs/missing.md)",
		"[bad](docs/a.md#no-such-heading)",
		"[bad](#nowhere)",
		"[bad](../shared.md)",
		"[ref]: docs/gone.md",
	}, "\n"))
	got := check(t, repo, []string{"README.md"})
	want := []string{
		"README.md:8: docs/missing.md: no such file or directory",
		"README.md:9: docs/a.md#no-such-heading: no heading makes #no-such-heading",
		"README.md:10: #nowhere: no heading makes #nowhere",
		"README.md:11: ../shared.md: outside the repository",
		"README.md:12: docs/gone.md: no such file or directory",
	}
	if !slices.Equal(got, want) {
		t.Errorf("check found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
