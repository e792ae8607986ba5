package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/longshore/longshore/cluster"
)

// TestMixtureFile: --mixture FILE.yaml gives the coordinator the sources
// and schedule the inline flags give, ramps included, so the mixture and
// its identity (what the job's digest covers) are the same whichever
// spelling a job starts or resumes with.
func TestMixtureFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mix.yaml")
	if err := os.WriteFile(file, []byte(`sources:
  - {name: web, dataset: s3://corpus/web}
  - {name: books, dataset: /data/books}
  - {name: code, dataset: s3://corpus/code}
schedule:
  - weights: {web: 0.7, books: 0.2, code: 0.1}
  - at: 2000
    ramp: linear
    weights: {web: 1/2, books: 3/10, code: 1/5}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	inline := mixtureFlags{spec: "web=s3://corpus/web,books=/data/books,code=s3://corpus/code",
		schedule: "web:7,books:2,code:1; web:0.5,books:0.3,code:0.2@2000 linear"}
	fromFile := mixtureFlags{spec: file}
	for _, m := range []*mixtureFlags{&inline, &fromFile} {
		if errs := m.check(&options{}); len(errs) > 0 {
			t.Fatal(errs)
		}
	}
	if !reflect.DeepEqual(inline.sources, fromFile.sources) {
		t.Errorf("sources: inline %v, file %v", inline.sources, fromFile.sources)
	}
	identity := func(m mixtureFlags) string {
		spec := cluster.MixSpec{Seed: 1, Block: 1, Window: 1, Round: 32, Phases: m.phases}
		for _, s := range m.sources {
			spec.Sources = append(spec.Sources, cluster.MixSource{Name: s.Name, Samples: 1000})
		}
		mix, err := cluster.NewMixture(spec)
		if err != nil {
			t.Fatal(err)
		}
		return mix.Identity()
	}
	a, b := identity(inline), identity(fromFile)
	if a != b || !strings.Contains(a, "~linear") {
		t.Errorf("identity inline %q, file %q: want the same, with the ramp", a, b)
	}
	both := mixtureFlags{spec: file, schedule: "web:1"}
	if errs := both.check(&options{}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "the file gives the schedule") {
		t.Errorf("a file and --mixture-schedule: %v", errs)
	}
}

// TestMixtureFileCounts: a file's counts per epoch (count: all, count:
// N) give the coordinator the mixture the flags' N/epoch give, with one
// identity and epochs of the counts together; counts with
// --mixture-schedule are refused.
func TestMixtureFileCounts(t *testing.T) {
	file := filepath.Join(t.TempDir(), "counts.yaml")
	if err := os.WriteFile(file, []byte("sources:\n  - {name: small, dataset: /data/small, count: all}\n  - {name: big, dataset: s3://corpus/big, count: 300}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inline := mixtureFlags{spec: "small=/data/small:all/epoch,big=s3://corpus/big:300/epoch"}
	fromFile := mixtureFlags{spec: file}
	var ids []string
	for _, m := range []*mixtureFlags{&inline, &fromFile} {
		if errs := m.check(&options{}); len(errs) > 0 {
			t.Fatal(errs)
		}
		js := jobSource{round: m.roundOf(32), phases: m.phases,
			sizes: []cluster.MixSource{{Name: "small", Samples: 20}, {Name: "big", Samples: 1000}}}
		mix, err := js.mixture(1, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if mix.Len() != 320 {
			t.Errorf("%s: an epoch of %d positions, want 320 (20 + 300 in rounds of 32)", m.spec, mix.Len())
		}
		ids = append(ids, mix.Identity())
	}
	if ids[0] != ids[1] || !strings.Contains(ids[0], "small:20/epoch,big:300/epoch") {
		t.Errorf("identity inline %q, file %q: want the same, with the counts", ids[0], ids[1])
	}
	sched := mixtureFlags{spec: inline.spec, schedule: "small:1,big:1"}
	if errs := sched.check(&options{}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "--mixture-schedule with counts per epoch") {
		t.Errorf("counts and --mixture-schedule: %v", errs)
	}
}

// TestMixtureFileRound: a file's round: is --mixture-round: the same
// round and identity as the flag gives, the flag left at its default or
// given the same; a flag (or LONGSHORE_MIXTURE_ROUND) that says another
// is refused, naming both.
func TestMixtureFileRound(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mix.yaml")
	if err := os.WriteFile(file, []byte("sources:\n  - {name: web, dataset: s3://corpus/web, weight: 0.7}\n  - {name: books, dataset: /data/books, weight: 0.3}\nround: 64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--listen", "127.0.0.1:1", "--gossip", "127.0.0.1:2", "--batch-size", "32"}
	identity := func(args ...string) (int, string) {
		t.Helper()
		o, err := parseFlags(append(base, args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		js := jobSource{round: o.mixture.roundOf(o.batchSize), phases: o.mixture.phases,
			sizes: []cluster.MixSource{{Name: "web", Samples: 1000}, {Name: "books", Samples: 400}}}
		mix, err := js.mixture(1, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		return js.round, mix.Identity()
	}
	flagRound, flagID := identity("--mixture", "web=s3://corpus/web:0.7,books=/data/books:0.3", "--mixture-round", "64")
	fileRound, fileID := identity("--mixture", file)
	bothRound, bothID := identity("--mixture", file, "--mixture-round", "64")
	if flagRound != 64 || fileRound != 64 || bothRound != 64 || fileID != flagID || bothID != flagID {
		t.Errorf("rounds %d %d %d, identities %q %q %q: want 64 and the flag's", flagRound, fileRound, bothRound, flagID, fileID, bothID)
	}
	if _, batchID := identity("--mixture", "web=s3://corpus/web:0.7,books=/data/books:0.3"); batchID == flagID {
		t.Errorf("round 64 and the batch size's 32 have one identity %q", batchID)
	}
	_, err := parseFlags(append(base, "--mixture", file, "--mixture-round", "32"), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--mixture-round 32 and --mixture "+file+":4: round: 64 disagree") {
		t.Errorf("--mixture-round 32 against round: 64: %v", err)
	}
	t.Setenv("LONGSHORE_MIXTURE_ROUND", "16")
	_, err = parseFlags(append(base, "--mixture", file), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--mixture-round 16 and --mixture "+file+":4: round: 64 disagree") {
		t.Errorf("LONGSHORE_MIXTURE_ROUND=16 against round: 64: %v", err)
	}
}
