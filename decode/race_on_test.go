//go:build race

package decode

// raceEnabled: the race detector's shadow memory and allocation tracking
// inflate a process's peak RSS, so memory bounds measured under it get
// room for them.
const raceEnabled = true
