//go:build race

package events_test

// raceEnabled tells load tests that the race detector slows every acknowledgement about twelve
// times, so they scale their volume down instead of timing out.
const raceEnabled = true
