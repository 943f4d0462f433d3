package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
)

// One errors.Is finds a configuration error, whichever protocol or layer
// refused it, and the error still reads and matches as what refused it.
func TestConfigErrorsMatchOneSentinel(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		also error // matched too, when not nil
		text string
	}{
		{"no peers", Config{}, nil, "client: no peers configured"},
		{"bad Diameter peer", Config{Peers: []PeerSpec{{URL: "tcp://127.0.0.1:1"}}}, nil, "peer tcp://127.0.0.1:1: peer: invalid configuration: OriginHost and OriginRealm are required"},
		{"bad RADIUS server", Config{Peers: []PeerSpec{{URL: "radius+tcp://127.0.0.1:1"}}}, nil, "radpeer: invalid configuration: radpeer: radius+tcp://127.0.0.1:1 needs a shared secret"},
		{"mixed protocols", Config{Peers: []PeerSpec{{URL: "tcp://127.0.0.1:1"}, {URL: "radius+tcp://127.0.0.1:1"}}}, nil, "client: Diameter peers and RADIUS servers in one Client"},
		{"bad throttle", Config{Peers: []PeerSpec{{URL: "tcp://127.0.0.1:1"}},
			Peer:     peer.Config{OriginHost: "c.example.net", OriginRealm: "example.net"},
			Throttle: &Throttle{AlarmHigh: 1, AlarmLow: 5}}, throttle.ErrConfig, "throttle: invalid configuration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.cfg)
			if err == nil {
				c.Close(context.Background())
				t.Fatal("New took it")
			}
			for _, target := range []error{ErrConfig, peer.ErrConfig, radpeer.ErrConfig} {
				if !errors.Is(err, target) {
					t.Errorf("%v does not match %v", err, target)
				}
			}
			if tc.also != nil && !errors.Is(err, tc.also) {
				t.Errorf("%v does not match %v", err, tc.also)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error %q does not say %q", err, tc.text)
			}
		})
	}
}

// Submitting a RADIUS call twice to one server fails with the error a
// Diameter peer gives.
func TestAlreadySentIsOneError(t *testing.T) {
	if !errors.Is(radpeer.ErrAlreadySent, peer.ErrAlreadySent) {
		t.Fatal("radpeer.ErrAlreadySent does not match peer.ErrAlreadySent")
	}
}
