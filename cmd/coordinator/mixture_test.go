package main

import (
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
