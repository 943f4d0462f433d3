package client

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/throttle"
)

// Throttle limits the throttle would refuse are refused by New as the
// other overrides are, naming the server, and match ErrConfig: a
// PeerSpec's own and Config.Throttle's.
func TestThrottleLimitsOverBoundRefused(t *testing.T) {
	over := throttle.Limits{MaxRate: throttle.MaxRate + 1}
	pc := peer.Config{OriginHost: "c.example.net", OriginRealm: "example.net", Logger: quiet}
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"a peer's own", Config{Peer: pc, Throttle: &Throttle{},
			Peers: []PeerSpec{{URL: "tcp://127.0.0.1:3868"}, {URL: "tcp://127.0.0.1:3869", Throttle: &ThrottleLimits{Accounting: over}}}},
			"peer tcp://127.0.0.1:3869: "},
		{"the Client's", Config{Peer: pc, Throttle: &Throttle{Auth: over}, Peers: []PeerSpec{{URL: "tcp://127.0.0.1:3868"}}},
			"Config.Throttle: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if err == nil {
				c.Close(context.Background())
			}
			assert.True(t, errors.Is(err, ErrConfig), "%v", err)
			assert.ErrorContains(t, err, tt.want)
			assert.ErrorContains(t, err, strconv.Itoa(throttle.MaxRate))
		})
	}
}
