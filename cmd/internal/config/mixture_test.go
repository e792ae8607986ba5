package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestLoadMixture: a mixture file's sources and schedule, weights as
// written, a source a phase leaves out at 0, a ramp marked.
func TestLoadMixture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mix.yaml")
	if err := os.WriteFile(path, []byte(`
sources:
  - name: web
    dataset: s3://corpus/web
  - name: books
    dataset: /data/books
  - {name: code, dataset: "file:///data/code"}
schedule:
  - weights: {web: 0.7, books: 0.2, code: 0.1}
  - at: 2000000
    ramp: linear
    weights: {web: 1/2, books: 0.5}
  - at: 3000000
    ramp: step
    weights: {code: 1}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if !IsMixtureFile(path) || IsMixtureFile("a=/x:1,b=/y:2") || !IsMixtureFile("/nowhere/mix.yml") || IsMixtureFile("a=/data/list.yaml") {
		t.Error("IsMixtureFile: a file, a spec or a .yml name told wrong")
	}
	got, err := LoadMixture(path)
	if err != nil {
		t.Fatal(err)
	}
	want := MixtureFile{
		Sources: []MixtureFileSource{{"web", "s3://corpus/web"}, {"books", "/data/books"}, {"code", "file:///data/code"}},
		Phases: []MixtureFilePhase{
			{0, []string{"0.7", "0.2", "0.1"}, false},
			{2000000, []string{"1/2", "0.5", "0"}, true},
			{3000000, []string{"0", "0", "1"}, false},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}

	got, err = parseMixture("w.yaml", []byte("sources:\n  - {name: a, dataset: /a, weight: 3}\n  - {name: b, dataset: /b, weight: 7/10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []MixtureFilePhase{{0, []string{"3", "7/10"}, false}}; !reflect.DeepEqual(got.Phases, want) {
		t.Errorf("weights on the sources: %+v, want %+v", got.Phases, want)
	}
}

// TestLoadMixtureErrors: every problem of a file at once, each with the
// file and its line.
func TestLoadMixtureErrors(t *testing.T) {
	_, err := parseMixture("m.yaml", []byte(`sources:
  - name: a
    dataset: /a
    wieght: 1
  - name: a
    dataset: /b
  - dataset: /c
schedule:
  - weights: {a: x}
    ramp: linear
  - weights: {z: 1}
  - at: -4
    ramp: curvy
    weights: {a: 1}
extra: 1
`))
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("err %v, want ErrConfig", err)
	}
	for _, want := range []string{
		"m.yaml:4: wieght: no such key",
		`m.yaml:5: source "a" named twice`,
		"m.yaml:7: a source with no name:",
		`m.yaml:9: weight "x"`,
		"m.yaml:10: ramp: linear on the first phase",
		"m.yaml:11: phase 2 has no at:",
		`m.yaml:11: weights: no source "z"`,
		`m.yaml:12: at: "-4"`,
		`m.yaml:13: ramp: "curvy"`,
		"m.yaml:15: extra: no such key",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors do not say %q:\n%v", want, err)
		}
	}
	for text, want := range map[string]string{
		"sources:\n  - {name: a, dataset: /a}\n":                                            `"a" has no weight:, and there is no schedule:`,
		"sources:\n  - {name: a, dataset: /a, weight: 1}\nschedule:\n  - weights: {a: 1}\n": "m.yaml:2: source \"a\" has a weight: and schedule: gives the weights",
		"schedule: []\n": "no sources:",
		"- a\n":          "want a mapping",
		"sources: [":     "m.yaml",
	} {
		if _, err := parseMixture("m.yaml", []byte(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want one saying %q", text, err, want)
		}
	}
	if _, err := LoadMixture(filepath.Join(t.TempDir(), "none.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// TestLoadMixtureCounts: a file's counts per epoch (count: N or count:
// all) are the flags' name=DATASET:N/epoch, so both spellings make one
// mixture.
func TestLoadMixtureCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counts.yaml")
	if err := os.WriteFile(path, []byte(`
sources:
  - name: small
    dataset: /data/small
    count: all
  - {name: big, dataset: s3://b/big, count: 100000}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadMixture(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []MixtureFilePhase{{0, []string{"all/epoch", "100000/epoch"}, false}}; !reflect.DeepEqual(got.Phases, want) {
		t.Errorf("phases %+v, want %+v", got.Phases, want)
	}
	fromFile, err := ParseMixture(MixtureFlags{Spec: path})
	if err != nil {
		t.Fatal(err)
	}
	fromFlags, err := ParseMixture(MixtureFlags{Spec: "small=/data/small:all/epoch,big=s3://b/big:100000/epoch"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromFile, fromFlags) {
		t.Errorf("file %+v, flags %+v: want the same", fromFile, fromFlags)
	}
}

// TestLoadMixtureCountErrors: counts are every source's or none's, and
// take no schedule; each mistake named at its line.
func TestLoadMixtureCountErrors(t *testing.T) {
	for text, want := range map[string]string{
		"sources:\n  - {name: a, dataset: /a, weight: 1}\n  - {name: b, dataset: /b, count: 5}\n": `m.yaml:3: source "b" has a count: and "a" a weight:: give every source a weight or every source a count`,
		"sources:\n  - {name: a, dataset: /a, count: 5}\n  - {name: b, dataset: /b, weight: 1}\n": `m.yaml:3: source "b" has a weight: and "a" a count:`,
		"sources:\n  - {name: a, dataset: /a, count: 5, weight: 1}\n":                             `m.yaml:2: source "a" has a weight: and a count:`,
		"sources:\n  - {name: a, dataset: /a, count: lots}\n":                                     `m.yaml:2: count "lots": want a whole number >= 1 or all`,
		"sources:\n  - {name: a, dataset: /a, count: 0}\n":                                        `m.yaml:2: count "0"`,
		"sources:\n  - {name: a, dataset: /a, count: 2.5}\n":                                      `m.yaml:2: count "2.5"`,
		"sources:\n  - name: a\n    dataset: /a\n    count: 3\nschedule:\n  - weights: {a: 1}\n":  `m.yaml:4: source "a" has a count: and there is a schedule:`,
	} {
		if _, err := parseMixture("m.yaml", []byte(text)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want one saying %q", text, err, want)
		}
	}
}

// TestLoadMixtureRound: round: N at the top of a file is the mixture's
// round (--mixture-round); the flag and the file agree or it is an error
// naming both, the flag's default not counting as given.
func TestLoadMixtureRound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mix.yaml")
	if err := os.WriteFile(path, []byte(`sources:
  - {name: a, dataset: /a, weight: 3}
  - {name: b, dataset: /b, weight: 1}
round: 64
`), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := LoadMixture(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Round != 64 || f.RoundLine != 4 {
		t.Errorf("round %d at line %d, want 64 at line 4", f.Round, f.RoundLine)
	}
	inline, err := ParseMixture(MixtureFlags{Spec: "a=/a:3,b=/b:1", Round: 64, RoundGiven: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, fl := range []MixtureFlags{
		{Spec: path}, // the flag left at its default
		{Spec: path, Round: 64, RoundGiven: true}, // given, the same
	} {
		got, err := ParseMixture(fl)
		if err != nil {
			t.Fatalf("%+v: %v", fl, err)
		}
		if !reflect.DeepEqual(got, inline) {
			t.Errorf("%+v: %+v, want the flags' %+v", fl, got, inline)
		}
	}
	for _, fl := range []MixtureFlags{{Spec: path, Round: 32, RoundGiven: true}, {Spec: path, Round: 0, RoundGiven: true}} {
		_, err := ParseMixture(fl)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--mixture-round %d", fl.Round)) || !strings.Contains(err.Error(), "round: 64") ||
			!strings.Contains(err.Error(), path+":4") {
			t.Errorf("--mixture-round %d against the file's 64: %v, want an error naming both", fl.Round, err)
		}
	}
	// No round: in the file: the flag's, given or not; 0 is the batch size.
	noRound := filepath.Join(t.TempDir(), "plain.yaml")
	if err := os.WriteFile(noRound, []byte("sources:\n  - {name: a, dataset: /a, weight: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fl := range []MixtureFlags{{Spec: noRound, Round: 32, RoundGiven: true}, {Spec: noRound}, {Spec: "a=/a:1", Round: 32, RoundGiven: true}} {
		got, err := ParseMixture(fl)
		if err != nil || got.Round != fl.Round {
			t.Errorf("%+v: round %d, %v; want the flag's %d", fl, got.Round, err, fl.Round)
		}
	}
}

// TestLoadMixtureRoundErrors: a round that is not a whole number >= 1 is
// an error at its line, with the file's other errors.
func TestLoadMixtureRoundErrors(t *testing.T) {
	for _, v := range []string{"0", "-4", "2.5", "lots", "[8]", "{n: 8}", `""`, "99999999999999999999"} {
		text := "sources:\n  - {name: a, dataset: /a, weight: 1}\n\nround: " + v + "\n"
		_, err := parseMixture("m.yaml", []byte(text))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "m.yaml:4: round: ") || !strings.Contains(err.Error(), "want a whole number >= 1") {
			t.Errorf("round: %s: err %v, want one at m.yaml:4", v, err)
		}
	}
	_, err := parseMixture("m.yaml", []byte("round: 8\nsources:\n  - {name: a, dataset: /a, wieght: 1}\nround: 16\n"))
	for _, want := range []string{"m.yaml:3: wieght: no such key", "m.yaml:4: round: given twice"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("errors do not say %q:\n%v", want, err)
		}
	}
}
