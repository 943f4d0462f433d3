//go:build race

package faults

// raceEnabled: the suite runs under -race, so aaa-peer is built with it too.
const raceEnabled = true
