//go:build race

package dataset_test

// raceEnabled: under the race detector sync.Pool drops a share of what
// is put back, on purpose, so allocation bounds measured under it get
// room for that.
const raceEnabled = true
