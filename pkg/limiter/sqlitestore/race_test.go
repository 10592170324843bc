//go:build race

package sqlitestore_test

// raceEnabled: the race detector slows the transpiled SQLite about twentyfold.
const raceEnabled = true
