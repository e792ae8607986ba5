package journal

import (
	"errors"
	"fmt"
	"strings"

	"github.com/longshore/longshore/cluster"
)

// ErrMismatch: a resume (the journal's newest generation, or a token) is
// for another dataset or other job parameters than the coordinator (or
// node) was started with. The error names every difference.
var ErrMismatch = errors.New("journal: the resume does not match this job")

// Identity is what fixes which sample a committed position names and
// which step a commit's offset is: the dataset (its manifest digest,
// dataset.ManifestDigest, which counts the samples too) and the job
// parameters that fix the order and the steps. The journal records it in
// every generation and every token carries it, so a resume against
// anything else is refused before it serves a sample.
type Identity struct {
	// Digest is the dataset's manifest digest ("" in a journal or token
	// written before identities: unknown).
	Digest    string
	Seed      uint64
	Block     int
	Window    int // as configured; compared as cluster.EffectiveWindow
	BatchSize int
	Epochs    int
}

// Known reports whether the identity was recorded (a journal generation
// or token from before identities has none).
func (id Identity) Known() bool { return id.Digest != "" }

// Difference is one field in which two identities differ.
type Difference struct {
	Field     string // "dataset digest", "seed", ...
	Was, Now  string
	Forceable bool // the order survives it: --force-resume may accept it
}

func (d Difference) String() string {
	return fmt.Sprintf("%s %s in the journal, %s now", d.Field, d.Was, d.Now)
}

// Diff lists how now differs from was (a recorded identity). A field was
// does not know (before identities) is not compared. The seed, the block
// and the window fix the order itself: committed positions of another
// order name other samples, so no override accepts them. A different
// dataset of the same size (digest), batch size or epoch count leave the
// positions meaningful, and may be forced.
func Diff(was, now Identity) []Difference {
	var out []Difference
	if was.Known() && now.Known() && was.Digest != now.Digest {
		out = append(out, Difference{"dataset digest", was.Digest, now.Digest, sameCount(was.Digest, now.Digest)})
	}
	if was.Seed != now.Seed {
		out = append(out, Difference{"seed", fmt.Sprint(was.Seed), fmt.Sprint(now.Seed), false})
	}
	if was.Block != now.Block {
		out = append(out, Difference{"block", fmt.Sprint(was.Block), fmt.Sprint(now.Block), false})
	}
	if ww, nw := cluster.EffectiveWindow(was.Block, was.Window), cluster.EffectiveWindow(now.Block, now.Window); was.Block == now.Block && ww != nw {
		out = append(out, Difference{"mix window", fmt.Sprint(ww), fmt.Sprint(nw), false})
	}
	if was.Known() && was.BatchSize != now.BatchSize {
		out = append(out, Difference{"batch size", fmt.Sprint(was.BatchSize), fmt.Sprint(now.BatchSize), true})
	}
	if was.Known() && was.Epochs != now.Epochs {
		out = append(out, Difference{"epochs", fmt.Sprint(was.Epochs), fmt.Sprint(now.Epochs), true})
	}
	return out
}

// sameCount reports whether two digests ("<count>:<hash>") count the
// same samples.
func sameCount(a, b string) bool {
	ca, _, _ := strings.Cut(a, ":")
	cb, _, _ := strings.Cut(b, ":")
	return ca == cb
}

// MismatchError is the error of a refused resume: ErrMismatch with the
// differences and what to do.
func MismatchError(what string, diffs []Difference, force bool) error {
	var parts []string
	forceable := true
	for _, d := range diffs {
		parts = append(parts, d.String())
		forceable = forceable && d.Forceable
	}
	hint := "pass --fresh to start the job over"
	switch {
	case forceable && !force:
		hint += ", or --force-resume to continue it anyway (committed positions then name the new dataset's samples)"
	case !forceable:
		hint += " (the order differs: committed positions would name other samples, which no override accepts; or restart with the journal's values)"
	}
	return fmt.Errorf("%w: %s: %s; %s", ErrMismatch, what, strings.Join(parts, "; "), hint)
}
