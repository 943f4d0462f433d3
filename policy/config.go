package policy

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of the 7750 SR radius-server-policy.
const (
	// DefaultRequestTimeout is how long one attempt waits for a reply.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultRetries is the number of attempts made per request.
	DefaultRetries = 3
	// DefaultHoldDown is how long an out-of-service server gets nothing.
	DefaultHoldDown = 30 * time.Second
)

// ErrConfig is matched (errors.Is) by every configuration error.
var ErrConfig = errors.New("policy: invalid configuration")

// Config configures a Tracker. The zero value means the defaults.
type Config struct {
	// RequestTimeout is the time one attempt waits for a reply. Zero means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Retries is the number of attempts per request. Zero means
	// DefaultRetries.
	Retries int
	// DownTimeout is how long the server may go without any reply while
	// requests are being sent before it is declared out of service.
	// Zero means RequestTimeout x Retries.
	DownTimeout time.Duration
	// HoldDown is how long an out-of-service server gets nothing. Zero
	// means DefaultHoldDown.
	HoldDown time.Duration
	// ProbeTimeout is how long the single probe waits for its reply.
	// Zero means RequestTimeout.
	ProbeTimeout time.Duration
	// TestUser says a test user is configured: probes are its requests
	// ([Output.Send] == SendProbe) and real requests never probe.
	TestUser bool
	// KeepAlive, with TestUser, sends the test user's request at this
	// interval to a server in service or unknown. Zero: no keep-alive.
	KeepAlive time.Duration
}

func (c Config) validate() (Config, error) {
	if c.RequestTimeout < 0 || c.Retries < 0 || c.DownTimeout < 0 || c.HoldDown < 0 || c.ProbeTimeout < 0 || c.KeepAlive < 0 {
		return c, fmt.Errorf("%w: negative duration or count", ErrConfig)
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	if c.DownTimeout == 0 {
		c.DownTimeout = c.RequestTimeout * time.Duration(c.Retries)
	}
	if c.HoldDown == 0 {
		c.HoldDown = DefaultHoldDown
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = c.RequestTimeout
	}
	if c.KeepAlive > 0 && !c.TestUser {
		return c, fmt.Errorf("%w: KeepAlive needs a test user", ErrConfig)
	}
	return c, nil
}
