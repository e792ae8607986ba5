package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/longshore/longshore/dataset"
)

// parseSlowRanks reads --slow-ranks: the ranks whose stand-in trainer
// trains --slow-factor times slower.
func parseSlowRanks(spec string, ranks int) (map[int]bool, error) {
	out := map[int]bool{}
	if spec == "" {
		return out, nil
	}
	for _, f := range strings.Split(spec, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 0 || i >= ranks {
			return nil, fmt.Errorf("--slow-ranks %q: want rank indices in [0, %d)", spec, ranks)
		}
		out[i] = true
	}
	return out, nil
}

// excludedOf is how many samples --exclude left out of ds (none on the
// lazy path, which --exclude turns off).
func excludedOf(ds *dataset.Dataset) int {
	if ds == nil {
		return 0
	}
	return ds.Excluded
}
