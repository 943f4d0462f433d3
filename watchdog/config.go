package watchdog

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Limits and defaults of RFC 3539 3.4.1 [1].
const (
	// DefaultTwinit is the RFC's default watchdog interval before jitter.
	DefaultTwinit = 30 * time.Second
	// MinTwinit is the smallest Twinit the RFC allows ("MUST NOT be set
	// lower than this"). A smaller value is a configuration error.
	MinTwinit = 6 * time.Second
	// MaxJitter bounds the jitter added each time the timer is set: Tw is
	// drawn uniformly from [Twinit-MaxJitter, Twinit+MaxJitter].
	MaxJitter = 2 * time.Second

	// DefaultOkayDWAs is the number of DWR/DWA exchanges a reopened
	// connection needs before it carries traffic again (3.4.1 [5]).
	DefaultOkayDWAs = 3
	// DefaultSuspectTimeouts is the number of timer expiries with a DWR
	// unanswered before OKAY turns SUSPECT (3.4.1 [3]).
	DefaultSuspectTimeouts = 1

	// maxCount bounds the two counters: a value beyond it is a typo, not a
	// policy (at Tw = 30 s, 100 exchanges already take 50 minutes).
	maxCount = 100
)

// ErrConfig is matched (errors.Is) by every configuration error New returns.
var ErrConfig = errors.New("watchdog: invalid configuration")

// Rand is the source of jitter. *math/rand/v2.Rand satisfies it. Tests inject
// a deterministic one; the default comes from NewRand.
type Rand interface {
	// Int64N returns a uniform value in [0, n).
	Int64N(n int64) int64
}

// Config configures a Machine. The zero value means the RFC defaults.
type Config struct {
	// Twinit is the watchdog interval before jitter. Zero means
	// DefaultTwinit; a value below MinTwinit is an error, never clamped.
	Twinit time.Duration

	// OkayDWAs is how many DWAs a reopened connection must receive before
	// it returns to service (Erlang's watchdog_config {okay, N}). Zero means
	// DefaultOkayDWAs; valid values are 1 to 100.
	OkayDWAs int

	// SuspectTimeouts is how many timer expiries with a DWR outstanding
	// turn OKAY into SUSPECT (Erlang's {suspect, N}). Zero means
	// DefaultSuspectTimeouts; valid values are 1 to 100. The DWR is still
	// never retransmitted while the machine waits.
	SuspectTimeouts int

	// Rand draws the jitter. Nil means the process-wide generator of
	// math/rand/v2, which the runtime seeds at random, so that peers
	// restarted together do not fire together; it is safe for concurrent
	// use and costs a Machine no state of its own.
	Rand Rand
}

// validate fills defaults into a copy of c and checks it (W1).
func (c Config) validate() (Config, error) {
	if c.Twinit == 0 {
		c.Twinit = DefaultTwinit
	}
	if c.Twinit < MinTwinit {
		return c, fmt.Errorf("%w: Twinit %v is below the RFC 3539 minimum of %v", ErrConfig, c.Twinit, MinTwinit)
	}
	if c.OkayDWAs == 0 {
		c.OkayDWAs = DefaultOkayDWAs
	}
	if c.OkayDWAs < 1 || c.OkayDWAs > maxCount {
		return c, fmt.Errorf("%w: OkayDWAs %d is outside 1..%d", ErrConfig, c.OkayDWAs, maxCount)
	}
	if c.SuspectTimeouts == 0 {
		c.SuspectTimeouts = DefaultSuspectTimeouts
	}
	if c.SuspectTimeouts < 1 || c.SuspectTimeouts > maxCount {
		return c, fmt.Errorf("%w: SuspectTimeouts %d is outside 1..%d", ErrConfig, c.SuspectTimeouts, maxCount)
	}
	if c.Rand == nil {
		c.Rand = processRand{}
	}
	return c, nil
}

// processRand is the process-wide generator of math/rand/v2: the default
// Rand.
type processRand struct{}

func (processRand) Int64N(n int64) int64 { return rand.Int64N(n) }

// NewRand returns a ChaCha8 PRNG seeded from crypto/rand, for an owner that
// wants a generator of its own. Like the Machine, it is not safe for
// concurrent use.
func NewRand() *rand.Rand {
	var seed [32]byte
	// crypto/rand.Read never fails on Linux since Go 1.24; if it ever did,
	// the program cannot be trusted with keys either, so panic is right.
	if _, err := crand.Read(seed[:]); err != nil {
		panic("watchdog: crypto/rand: " + err.Error())
	}
	return rand.New(rand.NewChaCha8(seed))
}

// Jitter draws Twinit + U[-MaxJitter, +MaxJitter] from r, inclusive at both
// ends at nanosecond resolution. It is exported so that owners that arm
// other timers (reconnect back-off) jitter them the same way.
func Jitter(twinit time.Duration, r Rand) time.Duration {
	return twinit - MaxJitter + time.Duration(r.Int64N(int64(2*MaxJitter)+1))
}

// seedFromUint64 makes a deterministic ChaCha8 seed: for tests and examples.
func seedFromUint64(v uint64) [32]byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], v)
	return s
}

// NewSeededRand returns a deterministic PRNG for tests and simulations.
func NewSeededRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewChaCha8(seedFromUint64(seed)))
}
