//go:build race

package limitertest

// raceEnabled is true when the race detector is on: it slows a store several
// times, so the random comparison plays fewer schedules.
const raceEnabled = true
