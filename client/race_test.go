//go:build race

package client

// raceEnabled: the race detector allocates on its own; allocation counts
// are not checked under it.
const raceEnabled = true
