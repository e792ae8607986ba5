package config

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"strings"

	"github.com/longshore/longshore/cluster"
	"go.yaml.in/yaml/v3"
)

// A MixtureFile is a weighted mixture as a YAML file gives it
// (--mixture FILE.yaml, docs/mixtures.md), the same as the flags
// --mixture name=DATASET:WEIGHT,... and --mixture-schedule spell it:
//
//	sources:
//	  - name: web
//	    dataset: s3://corpus/web
//	  - name: books
//	    dataset: /data/books
//	schedule:
//	  - weights: {web: 0.7, books: 0.3}
//	  - at: 2000000
//	    ramp: linear
//	    weights: {web: 0.5, books: 0.5}
//	round: 64
//
// A source may carry its weight (weight: 0.7) in place of a schedule,
// or its count per epoch (count: 100000, or count: all: its size), every
// source's, with no schedule; a count is the weight "N/epoch" (or
// "all/epoch"), as the flags spell it (name=DATASET:N/epoch).
// The weights are strings as written (0.7, 7/10, 3): the mixture
// (cluster.NewMixture) reads them as the flags' are read, so a file and
// the flags that say the same make the same mixture, with the same
// identity and digest. round: is --mixture-round (positions per round,
// a whole number >= 1); left out, the flag's (ParseMixture).
type MixtureFile struct {
	Sources []MixtureFileSource
	// Phases are the schedule; without one, a single phase from sample
	// 0 of the sources' weights.
	Phases []MixtureFilePhase
	// Round is round:, 0 if the file leaves it out; RoundLine its line.
	Round, RoundLine int
}

// MixtureFileSource is one source of a MixtureFile.
type MixtureFileSource struct {
	Name, Dataset string
}

// MixtureFilePhase is one phase of a MixtureFile's schedule: from job
// sample At, Weights (one per source, in Sources' order; "0" for a
// source the phase does not name), reached by a step or, Linear, a ramp
// from the previous phase's start.
type MixtureFilePhase struct {
	At      int64
	Weights []string
	Linear  bool
}

// IsMixtureFile says whether --mixture's value names a file: one that
// exists, or a name ending in .yaml or .yml (so that a missing file is
// reported as one, not as a malformed spec). A value with "=" is an
// inline spec (name=DATASET...) unless it names an existing file.
func IsMixtureFile(spec string) bool {
	if st, err := os.Stat(spec); err == nil && st.Mode().IsRegular() {
		return true
	}
	return !strings.Contains(spec, "=") && (strings.HasSuffix(spec, ".yaml") || strings.HasSuffix(spec, ".yml"))
}

// LoadMixture reads and checks a mixture file. Every problem is
// reported at once, each with the file and line (wrapping ErrConfig):
// unknown keys, missing or repeated names, weights that are not
// numbers, weights given both on the sources and in a schedule, a round
// that is not a whole number >= 1.
func LoadMixture(path string) (MixtureFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return MixtureFile{}, fmt.Errorf("%w: --mixture: %w", ErrConfig, err)
	}
	return parseMixture(path, b)
}

func parseMixture(path string, b []byte) (MixtureFile, error) {
	var errs []error
	bad := func(n *yaml.Node, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: --mixture %s:%d: %s", ErrConfig, path, n.Line, fmt.Sprintf(format, a...)))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return MixtureFile{}, fmt.Errorf("%w: --mixture %s: %w", ErrConfig, path, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return MixtureFile{}, fmt.Errorf("%w: --mixture %s: want a mapping with sources: (and schedule:, round:)", ErrConfig, path)
	}
	top := fields(doc.Content[0], []string{"sources", "schedule", "round"}, bad)
	var out MixtureFile
	if rn := top["round"]; rn != nil {
		v, err := strconv.Atoi(rn.Value)
		if rn.Kind != yaml.ScalarNode || err != nil || v < 1 {
			bad(rn, "round: %q: want a whole number >= 1 (positions per round, as --mixture-round; leave it out for the batch size)", rn.Value)
		} else {
			out.Round, out.RoundLine = v, rn.Line
		}
	}
	var srcWeights []*yaml.Node // a source's weight: node, or nil
	var srcCounts []*yaml.Node  // a source's count: node, or nil
	var firstWeight, firstCount string
	index := map[string]int{}

	srcs := top["sources"]
	switch {
	case srcs == nil:
		bad(doc.Content[0], "no sources:")
	case srcs.Kind != yaml.SequenceNode || len(srcs.Content) == 0:
		bad(srcs, "sources: want a list of sources (name:, dataset:, weight: or count:)")
	default:
		for _, sn := range srcs.Content {
			if sn.Kind != yaml.MappingNode {
				bad(sn, "a source: want name:, dataset: and weight: or count:")
				continue
			}
			f := fields(sn, []string{"name", "dataset", "weight", "count"}, bad)
			name, _ := scalarOf(f["name"], sn, "name", bad)
			ds, _ := scalarOf(f["dataset"], sn, "dataset", bad)
			if name != "" {
				if _, dup := index[name]; dup {
					bad(f["name"], "source %q named twice", name)
				}
				index[name] = len(out.Sources)
			}
			w, c := f["weight"], f["count"]
			if w != nil {
				checkWeight(w, bad)
			}
			switch {
			case w != nil && c != nil:
				bad(c, "source %q has a weight: and a count:: give one (every source a weight, or every source a count per epoch)", name)
			case c != nil:
				checkCount(c, bad)
				if firstWeight != "" {
					bad(c, "source %q has a count: and %q a weight:: give every source a weight or every source a count", name, firstWeight)
				}
				if firstCount == "" {
					firstCount = name
				}
			case w != nil:
				if firstCount != "" {
					bad(w, "source %q has a weight: and %q a count:: give every source a weight or every source a count", name, firstCount)
				}
				if firstWeight == "" {
					firstWeight = name
				}
			}
			out.Sources = append(out.Sources, MixtureFileSource{Name: name, Dataset: ds})
			srcWeights = append(srcWeights, w)
			srcCounts = append(srcCounts, c)
		}
	}

	names := make([]string, len(out.Sources))
	for i, s := range out.Sources {
		names[i] = s.Name
	}
	if sched := top["schedule"]; sched == nil {
		ph := MixtureFilePhase{}
		for i, w := range srcWeights {
			switch c := srcCounts[i]; {
			case c != nil:
				ph.Weights = append(ph.Weights, c.Value+"/epoch")
			case w != nil:
				ph.Weights = append(ph.Weights, w.Value)
			case firstCount != "":
				bad(srcs.Content[i], "source %q has no count:, and %q has one: give every source a count per epoch (count: all for all of it)", names[i], firstCount)
			default:
				bad(srcs.Content[i], "source %q has no weight:, and there is no schedule:", names[i])
			}
		}
		out.Phases = []MixtureFilePhase{ph}
	} else {
		for i, w := range srcWeights {
			if w != nil {
				bad(w, "source %q has a weight: and schedule: gives the weights: give them in one place", names[i])
			}
			if c := srcCounts[i]; c != nil {
				bad(c, "source %q has a count: and there is a schedule:: counts fix each epoch of the job whole, a schedule changes weights; give weights to schedule them", names[i])
			}
		}
		if sched.Kind != yaml.SequenceNode || len(sched.Content) == 0 {
			bad(sched, "schedule: want a list of phases (at:, ramp:, weights:)")
		} else {
			for k, pn := range sched.Content {
				if ph, ok := parsePhase(pn, k, names, index, bad); ok {
					out.Phases = append(out.Phases, ph)
				}
			}
		}
	}
	if len(errs) > 0 {
		return MixtureFile{}, errors.Join(errs...)
	}
	return out, nil
}

// parsePhase reads phase k of a schedule.
func parsePhase(pn *yaml.Node, k int, names []string, index map[string]int, bad func(*yaml.Node, string, ...any)) (MixtureFilePhase, bool) {
	if pn.Kind != yaml.MappingNode {
		bad(pn, "a phase: want at:, ramp: and weights:")
		return MixtureFilePhase{}, false
	}
	n0 := len(names)
	f := fields(pn, []string{"at", "ramp", "weights"}, bad)
	ph := MixtureFilePhase{Weights: make([]string, n0)}
	for i := range ph.Weights {
		ph.Weights[i] = "0"
	}
	ok := true
	if at := f["at"]; at != nil {
		v, err := strconv.ParseInt(at.Value, 10, 64)
		if at.Kind != yaml.ScalarNode || err != nil || v < 0 {
			bad(at, "at: %q: want a job sample number >= 0", at.Value)
			ok = false
		}
		ph.At = v
	} else if k > 0 {
		bad(pn, "phase %d has no at: (the job sample it starts from)", k+1)
		ok = false
	}
	if r := f["ramp"]; r != nil {
		switch r.Value {
		case "step":
		case "linear":
			ph.Linear = true
			if k == 0 {
				bad(r, "ramp: linear on the first phase: there is nothing before it to ramp from")
				ok = false
			}
		default:
			bad(r, "ramp: %q: want step or linear", r.Value)
			ok = false
		}
	}
	ws := f["weights"]
	switch {
	case ws == nil:
		bad(pn, "phase %d has no weights:", k+1)
		return ph, false
	case ws.Kind != yaml.MappingNode:
		bad(ws, "weights: want a mapping of source names to weights ({a: 0.7, b: 0.3})")
		return ph, false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(ws.Content); i += 2 {
		kn, vn := ws.Content[i], ws.Content[i+1]
		s, known := index[kn.Value]
		switch {
		case !known:
			bad(kn, "weights: no source %q (sources: %s)", kn.Value, strings.Join(names, ", "))
			ok = false
			continue
		case seen[kn.Value]:
			bad(kn, "weights: source %q weighted twice", kn.Value)
			ok = false
			continue
		}
		seen[kn.Value] = true
		if !checkWeight(vn, bad) {
			ok = false
			continue
		}
		ph.Weights[s] = vn.Value
	}
	return ph, ok
}

// checkWeight says whether n is a weight (a number >= 0: 0.7, 7/10, 3),
// reporting it if not.
func checkWeight(n *yaml.Node, bad func(*yaml.Node, string, ...any)) bool {
	r, ok := new(big.Rat).SetString(n.Value)
	if n.Kind != yaml.ScalarNode || !ok || r.Sign() < 0 {
		bad(n, "weight %q: want a number >= 0 (0.7, 7/10, 3)", n.Value)
		return false
	}
	return true
}

// checkCount says whether n is a count per epoch (a whole number >= 1,
// or all), reporting it if not.
func checkCount(n *yaml.Node, bad func(*yaml.Node, string, ...any)) bool {
	if n.Kind == yaml.ScalarNode && n.Value == "all" {
		return true
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if n.Kind != yaml.ScalarNode || err != nil || v < 1 {
		bad(n, "count %q: want a whole number >= 1 or all (samples of the source per epoch of the job)", n.Value)
		return false
	}
	return true
}

// fields returns a mapping's values by key, reporting keys not in known
// and keys given twice.
func fields(m *yaml.Node, known []string, bad func(*yaml.Node, string, ...any)) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if !contains(known, k.Value) {
			bad(k, "%s: no such key (want %s)", k.Value, strings.Join(known, ", "))
			continue
		}
		if _, dup := out[k.Value]; dup {
			bad(k, "%s: given twice", k.Value)
			continue
		}
		out[k.Value] = v
	}
	return out
}

// scalarOf is a required scalar field's value, reporting it missing or
// not a scalar.
func scalarOf(n, parent *yaml.Node, key string, bad func(*yaml.Node, string, ...any)) (string, bool) {
	switch {
	case n == nil:
		bad(parent, "a source with no %s:", key)
	case n.Kind != yaml.ScalarNode || n.Value == "":
		bad(n, "%s: want a value", key)
	default:
		return n.Value, true
	}
	return "", false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// MixtureFlags are the flags ParseMixture reads: --mixture,
// --mixture-schedule and --mixture-round.
type MixtureFlags struct {
	Spec, Schedule string
	Round          int
	// RoundGiven: --mixture-round was set (on the command line, in the
	// environment or in a --config file), not left at its default.
	RoundGiven bool
}

// A Mixture is what the flags (and a mixture file) say of a mixture:
// its sources, its schedule and its round.
type Mixture struct {
	Sources []cluster.MixFlagSource
	Phases  []cluster.MixPhase
	// Round is the positions per round: the file's round:, else
	// --mixture-round; 0: the batch size.
	Round int
}

// ParseMixture reads --mixture, --mixture-schedule and --mixture-round
// as the node, the coordinator and longshore-lineage take them: a
// mixture file (IsMixtureFile; it gives the schedule, so
// --mixture-schedule must be empty, and may give the round) or the
// inline spec (cluster.ParseMixFlags). Both spellings of one mixture
// give the same sources, phases and round, hence the same identity. A
// file's round: and a --mixture-round given must agree (the flag's
// default 0 is not given: the file's round stands).
func ParseMixture(f MixtureFlags) (Mixture, error) {
	if !IsMixtureFile(f.Spec) {
		srcs, phases, err := cluster.ParseMixFlags(f.Spec, f.Schedule)
		if err != nil {
			return Mixture{}, err
		}
		return Mixture{Sources: srcs, Phases: phases, Round: f.Round}, nil
	}
	if f.Schedule != "" {
		return Mixture{}, fmt.Errorf("--mixture-schedule with --mixture %s: the file gives the schedule (schedule:)", f.Spec)
	}
	mf, err := LoadMixture(f.Spec)
	if err != nil {
		return Mixture{}, err
	}
	out := Mixture{Round: f.Round}
	if mf.Round != 0 {
		if f.RoundGiven && f.Round != mf.Round {
			return Mixture{}, fmt.Errorf("--mixture-round %d and --mixture %s:%d: round: %d disagree: give the round in one place, or the same in both", f.Round, f.Spec, mf.RoundLine, mf.Round)
		}
		out.Round = mf.Round
	}
	out.Sources = make([]cluster.MixFlagSource, len(mf.Sources))
	for i, s := range mf.Sources {
		out.Sources[i] = cluster.MixFlagSource{Name: s.Name, Dataset: s.Dataset}
	}
	out.Phases = make([]cluster.MixPhase, len(mf.Phases))
	for i, p := range mf.Phases {
		out.Phases[i] = cluster.MixPhase{At: p.At, Weights: p.Weights, Linear: p.Linear}
	}
	return out, nil
}
