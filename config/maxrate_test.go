package config

import (
	"strconv"
	"testing"

	"github.com/aaatp/aaatp/throttle"
)

// A max-rate the throttle cannot take is the file's problem, with its
// line, at the top and on a peer: config check used to pass it, and the
// client then stopped at start with the throttle's words and no line, or
// refused a reload after it had changed its peers.
func TestMaxRateAboveThrottleBound(t *testing.T) {
	over := strconv.Itoa(throttle.MaxRate + 1)
	src := "max-rate = " + over + "\n" +
		"[[peer]]\nurl = \"tcp://a:3868\"\nmax-rate = 200000000\n" +
		"[[peer]]\nurl = \"tcp://b:3868\"\nmax-rate = " + strconv.Itoa(throttle.MaxRate) + "\n"
	_, err := Parse("c.toml", []byte(src))
	checkProblems(t, err, []Problem{
		{File: "c.toml", Line: 1, Key: "max-rate", Msg: over + ": want 0 (no limit) to " + strconv.Itoa(throttle.MaxRate)},
		{File: "c.toml", Line: 4, Key: "peer.max-rate", Msg: "200000000: want 0 (no limit) to " + strconv.Itoa(throttle.MaxRate)},
	})
	if _, err := Parse("c.toml", []byte("max-rate = "+strconv.Itoa(throttle.MaxRate)+"\n")); err != nil {
		t.Errorf("the throttle's bound itself: %v", err)
	}
}
