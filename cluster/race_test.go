//go:build race

package cluster

// The simulation is single-goroutine; under -race it only needs to show
// the package is race-clean, so it runs fewer seeds.
func init() { raceEnabled = true }
