package actors

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/longshore/longshore/storage"
)

// Sentinel errors; check with errors.Is.
var (
	// ErrFailureBudget: more samples failed than MaxFailures allows. The
	// error is a *BudgetError carrying the report.
	ErrFailureBudget = errors.New("actors: failure budget exceeded")
	// ErrClosed: the pipeline was closed.
	ErrClosed = errors.New("actors: pipeline closed")
)

// Failure records one sample that could not be loaded.
type Failure struct {
	Rank  int    `json:"rank"`
	Epoch int    `json:"epoch"`
	Index int64  `json:"index"`
	Key   string `json:"key"`
	Stage Stage  `json:"stage"`
	// Class is the kind of error, for grouping: not_found, access_denied,
	// range, too_large, timeout, canceled, bad_response, io (fetch);
	// too_large, unsupported, corrupt, timeout (the decode deadline),
	// panic, error (decode); or what the error's FailureClass method says.
	Class string `json:"class"`
	// Reason is the error message.
	Reason string `json:"reason"`
}

// FailureGroup is the failures of one stage and class.
type FailureGroup struct {
	Stage Stage  `json:"stage"`
	Class string `json:"class"`
	Count int64  `json:"count"`
	// Examples are the first few failures of the group.
	Examples []Failure `json:"examples"`
}

// FailureReport lists a run's failures grouped by reason.
type FailureReport struct {
	Attempted int64  `json:"attempted"`
	Failed    int64  `json:"failed"`
	Budget    string `json:"budget"`
	// Allowed is how many failures the budget allowed when the report
	// was made.
	Allowed int64          `json:"allowed"`
	Groups  []FailureGroup `json:"groups"`
	// Records are the first MaxFailureRecords failures, in order.
	Records []Failure `json:"records,omitempty"`
	// Dropped is how many failures were counted but not recorded.
	Dropped int64 `json:"dropped,omitempty"`
}

// String renders the report for people, one line per group.
func (r FailureReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d samples failed (budget %s, %d allowed)", r.Failed, r.Attempted, r.Budget, r.Allowed)
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "\n  %s/%s: %d", g.Stage, g.Class, g.Count)
		for i, f := range g.Examples {
			if i == 3 {
				fmt.Fprintf(&b, "\n    ...")
				break
			}
			fmt.Fprintf(&b, "\n    %s: %s", f.Key, f.Reason)
		}
	}
	return b.String()
}

// BudgetError is returned by Next when the failure budget is exceeded.
type BudgetError struct{ Report FailureReport }

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%v: %v; fix or remove the failing objects, or raise MaxFailures", ErrFailureBudget, e.Report)
}

// Is makes errors.Is(err, ErrFailureBudget) true.
func (e *BudgetError) Is(target error) bool { return target == ErrFailureBudget }

// classify names the kind of a sample error. An error (or one it wraps)
// with a FailureClass() string method names its own class.
func classify(stage Stage, err error) string {
	var c interface{ FailureClass() string }
	switch {
	case errors.As(err, &c):
		return c.FailureClass()
	case errors.Is(err, storage.ErrNotFound):
		return "not_found"
	case errors.Is(err, storage.ErrAccess):
		return "access_denied"
	case errors.Is(err, storage.ErrRange):
		return "range"
	case errors.Is(err, storage.ErrTooLarge):
		return "too_large"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case stage == StageFetch:
		return "io"
	}
	return "error"
}

// classedError gives an error a failure class.
type classedError struct {
	class string
	err   error
}

func (e *classedError) Error() string        { return e.err.Error() }
func (e *classedError) Unwrap() error        { return e.err }
func (e *classedError) FailureClass() string { return e.class }

// WithFailureClass wraps err so failure reports group it under class.
// Decoders use it to tell corrupt from unsupported from too large.
func WithFailureClass(err error, class string) error {
	if err == nil {
		return nil
	}
	return &classedError{class: class, err: err}
}

const groupExamples = 5

// failureBook counts failures against the budget; one per run, shared by
// a node's ranks so the budget is the node's.
type failureBook struct {
	budget     FailureBudget
	maxRecords int
	mu         struct {
		sync.Mutex
		total     int64 // samples the run will attempt, when known
		attempted int64
		failed    int64
		breached  bool
		records   []Failure
		dropped   int64
		groups    map[groupKey]*FailureGroup
	}
}

type groupKey struct {
	stage Stage
	class string
}

func newFailureBook(budget FailureBudget, maxRecords int) *failureBook {
	b := &failureBook{budget: budget, maxRecords: maxRecords}
	b.mu.groups = make(map[groupKey]*FailureGroup)
	return b
}

func (b *failureBook) addTotal(n int64) {
	b.mu.Lock()
	b.mu.total += n
	b.mu.Unlock()
}

func (b *failureBook) attempt(n int64) {
	b.mu.Lock()
	b.mu.attempted += n
	b.mu.Unlock()
}

// record adds a failure and reports whether the budget is now exceeded.
func (b *failureBook) record(f Failure) (breached bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.failed++
	if len(b.mu.records) < b.maxRecords {
		b.mu.records = append(b.mu.records, f)
	} else {
		b.mu.dropped++
	}
	k := groupKey{f.Stage, f.Class}
	g := b.mu.groups[k]
	if g == nil {
		g = &FailureGroup{Stage: f.Stage, Class: f.Class}
		b.mu.groups[k] = g
	}
	g.Count++
	if len(g.Examples) < groupExamples {
		g.Examples = append(g.Examples, f)
	}
	if b.mu.failed > b.budget.Allowed(b.mu.attempted, b.mu.total) {
		b.mu.breached = true
	}
	return b.mu.breached
}

func (b *failureBook) breached() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.breached
}

func (b *failureBook) report() FailureReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := FailureReport{
		Attempted: b.mu.attempted, Failed: b.mu.failed, Budget: b.budget.String(),
		Allowed: b.budget.Allowed(b.mu.attempted, b.mu.total),
		Records: append([]Failure(nil), b.mu.records...), Dropped: b.mu.dropped,
	}
	for _, g := range b.mu.groups {
		gc := *g
		gc.Examples = append([]Failure(nil), g.Examples...)
		r.Groups = append(r.Groups, gc)
	}
	sortGroups(r.Groups)
	return r
}

// sortGroups orders groups largest first, then by stage and class.
func sortGroups(gs []FailureGroup) {
	sort.Slice(gs, func(i, j int) bool {
		a, c := gs[i], gs[j]
		if a.Count != c.Count {
			return a.Count > c.Count
		}
		if a.Stage != c.Stage {
			return a.Stage < c.Stage
		}
		return a.Class < c.Class
	})
}
