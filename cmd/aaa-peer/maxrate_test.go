package main

import (
	"io"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/throttle"
)

// --max-rate and --max-rate-acct past the throttle's bound are refused
// with the bound, by both clients, before a Client is made (which said it
// in the throttle's words).
func TestMaxRateFlagsAboveThrottleBound(t *testing.T) {
	over := strconv.Itoa(throttle.MaxRate + 1)
	bound := strconv.Itoa(throttle.MaxRate)

	var r radiusClientOptions
	fs := radiusClientFlags(&r, io.Discard)
	require.NoError(t, fs.Parse([]string{"--peer", "radius+tcp://127.0.0.1:1812", "--max-rate", over}))
	assert.ErrorContains(t, r.validate(), "--max-rate "+over+": want 0 (no limit) to "+bound)

	var d clientOptions
	fs = clientFlags(&d, io.Discard)
	require.NoError(t, fs.Parse([]string{"--peer", "tcp://127.0.0.1:3868", "--origin-host", "c.example.net",
		"--origin-realm", "example.net", "--destination-realm", "example.net", "--max-rate", over}))
	assert.ErrorContains(t, d.validate(), "--max-rate "+over+": want 0 (no limit) to "+bound)

	var a acctRate
	assert.ErrorContains(t, a.Set(over), bound, "--max-rate-acct")
	assert.NoError(t, a.Set(bound), "--max-rate-acct at the bound")
}
