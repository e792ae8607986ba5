package dataset

import (
	"fmt"
	"strings"

	"github.com/longshore/longshore/storage"
)

// RatePart is a mixture source's part of a node's request rate: of the
// job-wide budget's share (node.StoreBudget) or of the node's own cap
// (--store-rps).
type RatePart struct {
	Source MixtureSource
	RPS    float64
}

// RateParts splits rps requests per second (0: none) among the sources
// whose stores have a request rate to limit (storage.TakesRequestBudget:
// S3), so that together they keep to it: each source has its own store
// and rate limiter, and giving each the whole rate would let a node of n
// such sources make n times it. The parts are in proportion to the
// sources' BudgetWeight (equal parts when none is above 0), each at
// least minRatePart (or an equal part if less), since a part of 0 would
// lift the source's limit. A source without a request rate gets no
// part; none at all: nil.
func (c *MixtureCatalog) RateParts(rps float64) []RatePart {
	var takers []MixtureSource
	var weights []float64
	for _, src := range c.srcs {
		if storage.TakesRequestBudget(src.Store) {
			takers = append(takers, src)
			weights = append(weights, src.BudgetWeight)
		}
	}
	if len(takers) == 0 {
		return nil
	}
	out := make([]RatePart, len(takers))
	for i, r := range splitRate(rps, weights) {
		out[i] = RatePart{Source: takers[i], RPS: r}
	}
	return out
}

// FormatRateParts is the parts as the logs give them: "a=25,b=75".
func FormatRateParts(parts []RatePart) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = fmt.Sprintf("%s=%.4g", p.Source.Name, p.RPS)
	}
	return strings.Join(s, ",")
}

// splitRate splits rps requests/s (0: none) among stores of weights w:
// in proportion to them (equal parts when none is above 0), each part at
// least minRatePart or rps/len(w) if less.
func splitRate(rps float64, w []float64) []float64 {
	out := make([]float64, len(w))
	if rps <= 0 || len(w) == 0 {
		return out
	}
	var total float64
	for _, x := range w {
		total += max(x, 0)
	}
	floor := min(minRatePart, rps/float64(len(w)))
	for i, x := range w {
		part := rps / float64(len(w))
		if total > 0 {
			part = rps * max(x, 0) / total
		}
		out[i] = max(part, floor)
	}
	return out
}

// minRatePart is the least part of a rate a mixture's source gets, in
// requests/s: the S3 store's own least rate.
const minRatePart = 1.0
