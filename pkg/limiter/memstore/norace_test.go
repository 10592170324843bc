//go:build !race

package memstore_test

// raceEnabled is true under the race detector, which slows each decision
// about ten times: the million-key test then runs a tenth of its keys.
const raceEnabled = false
