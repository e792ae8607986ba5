// Package mixing measures how well an epoch order mixes the classes of a
// dataset into batches: per batch, how many distinct classes it holds and
// how many samples its most frequent class has. The binaries' tests use
// it to hold the standalone and the cluster order, over plain and packed
// datasets sorted by class, to a full shuffle's mixing
// (docs/packed-datasets.md, "Shuffle quality").
package mixing

import "fmt"

// Stats sums batches' mixing; the zero value is no batches.
type Stats struct {
	Batches  int
	distinct int64 // summed over the batches
	maxCount int64 // summed over the batches
}

// Distinct is the mean number of distinct classes per batch.
func (s Stats) Distinct() float64 { return ratio(s.distinct, s.Batches) }

// MaxCount is the mean count of a batch's most frequent class: 1 when
// every sample of a batch has its own class, the batch size when all have
// one.
func (s Stats) MaxCount() float64 { return ratio(s.maxCount, s.Batches) }

func ratio(a int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(a) / float64(n)
}

// Add merges o's batches into s.
func (s Stats) Add(o Stats) Stats {
	return Stats{Batches: s.Batches + o.Batches, distinct: s.distinct + o.distinct, maxCount: s.maxCount + o.maxCount}
}

// Stream measures the batches a trainer cuts from one rank's stream of
// labels: runs of batch labels from the start, a shorter last run
// dropped (its figures would not compare).
func Stream(labels []int32, batch int) Stats {
	var s Stats
	count := map[int32]int{}
	for from := 0; from+batch <= len(labels); from += batch {
		clear(count)
		most := 0
		for _, l := range labels[from : from+batch] {
			count[l]++
			most = max(most, count[l])
		}
		s.Batches++
		s.distinct += int64(len(count))
		s.maxCount += int64(most)
	}
	return s
}

// Within reports whether s mixes within frac (0.1: 10%) of ref's mean
// distinct classes per batch, or better.
func (s Stats) Within(ref Stats, frac float64) bool {
	return s.Distinct() >= (1-frac)*ref.Distinct()
}

func (s Stats) String() string {
	return fmt.Sprintf("%.1f distinct classes, most frequent %.2f (%d batches)", s.Distinct(), s.MaxCount(), s.Batches)
}
