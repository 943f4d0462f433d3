package radpeer

import (
	"container/list"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// MessageAuthenticatorMode says when a Message-Authenticator is required.
// Its zero value, RequireMAAuto, is the safe default on both sides.
//
// Why: nothing authenticates an Access-Request without one (its Request
// Authenticator is a random nonce), and its answer only by an MD5 over the
// answer and the secret. An attacker on the path who adds attributes to a
// request (typically Proxy-State) can turn an Access-Reject into an
// Access-Accept with an MD5 chosen-prefix collision (BlastRADIUS,
// CVE-2024-3596). A Message-Authenticator, an HMAC-MD5 with the secret,
// in the request and in the answer defeats that. These defaults are those
// of FreeRADIUS 3.2.5 and radsecproxy 1.11.
//
// On a server (ServerConfig.RequireMessageAuthenticator) it applies to
// Access-Requests; Status-Server (RFC 5997), and an Access-Request that
// carries EAP-Message (RFC 3579 3.2), always need one, whatever the mode:
//   - RequireMAAuto: required from a client once that client has sent an
//     Access-Request with a valid one (FreeRADIUS
//     require_message_authenticator = auto). A client is its source
//     address; each listener remembers up to DefaultMaxMAClients of them,
//     forgetting the least recently seen first.
//   - RequireMAAlways: required from every client, from the first request.
//   - RequireMANever: not required (still verified when present).
//
// Over radsec:// (RFC 6614) a server requires none on Access-Requests,
// whatever the mode: TLS protects the packet from the path, and a
// Message-Authenticator keyed with the public secret "radsec" adds
// nothing there. A RadSec proxy relays many NASes from one address,
// signing and not, and "auto" would drop those of a NAS that does not
// sign once another had. One that is present is still verified.
//
// On a client (Config.RequireMessageAuthenticator, and
// UDPConfig.RequireMessageAuthenticator) it applies to answers:
//   - RequireMAAuto: required in every answer to an Access-Request
//     (Access-Accept, Access-Reject, Access-Challenge). Answers to
//     Status-Server are verified when they carry one but need not:
//     FreeRADIUS before 3.2.5 answers Status-Server without one, and
//     requiring it would take such a server out of service.
//   - RequireMAAlways: required in answers to Status-Server too.
//   - RequireMANever: required in no answer (verified when present). Only
//     for servers that never send one (FreeRADIUS before 3.2.5, whose
//     Access-Accepts carry none): their answers can then be forged.
//
// Its text form, for flags and configuration files, is auto, always or
// never (yes and no are read as always and never).
type MessageAuthenticatorMode uint8

// Values of MessageAuthenticatorMode.
const (
	RequireMAAuto MessageAuthenticatorMode = iota
	RequireMAAlways
	RequireMANever
)

// String returns auto, always or never.
func (m MessageAuthenticatorMode) String() string {
	switch m {
	case RequireMAAuto:
		return "auto"
	case RequireMAAlways:
		return "always"
	case RequireMANever:
		return "never"
	}
	return fmt.Sprintf("MessageAuthenticatorMode(%d)", uint8(m))
}

// MarshalText returns String's text.
func (m MessageAuthenticatorMode) MarshalText() ([]byte, error) {
	if m > RequireMANever {
		return nil, fmt.Errorf("radpeer: unknown %s", m)
	}
	return []byte(m.String()), nil
}

// UnmarshalText reads auto, always (or yes) and never (or no).
func (m *MessageAuthenticatorMode) UnmarshalText(b []byte) error {
	switch string(b) {
	case "auto":
		*m = RequireMAAuto
	case "always", "yes":
		*m = RequireMAAlways
	case "never", "no":
		*m = RequireMANever
	default:
		return fmt.Errorf("radpeer: %w: %q: want auto, always or never", ErrConfig, b)
	}
	return nil
}

// AnswerNeedsMA reports whether a client with this setting requires a
// Message-Authenticator in an answer to a request of code req.
func (m MessageAuthenticatorMode) AnswerNeedsMA(req lradius.Code) bool {
	switch m {
	case RequireMAAuto:
		return req == lradius.CodeAccessRequest
	case RequireMAAlways:
		return req == lradius.CodeAccessRequest || req == lradius.CodeStatusServer
	}
	return false
}

// ProxyStateLimit says whether a server refuses an Access-Request that
// carries Proxy-State but no Message-Authenticator (FreeRADIUS
// limit_proxy_state). A NAS never sends Proxy-State and a proxy that
// adds it should sign the request; an attacker adds Proxy-State to hold
// the bytes of a BlastRADIUS collision. Its zero value,
// LimitProxyStateAlways, refuses them whatever
// RequireMessageAuthenticator says; LimitProxyStateNever accepts them
// (RequireMessageAuthenticator still applies). Over radsec:// neither
// refuses anything: TLS protects the packet, and a RadSec proxy relays
// Proxy-State from the hops before it. Its text form is always
// or never (yes and no are read as always and never).
type ProxyStateLimit uint8

// Values of ProxyStateLimit.
const (
	LimitProxyStateAlways ProxyStateLimit = iota
	LimitProxyStateNever
)

// String returns always or never.
func (l ProxyStateLimit) String() string {
	switch l {
	case LimitProxyStateAlways:
		return "always"
	case LimitProxyStateNever:
		return "never"
	}
	return fmt.Sprintf("ProxyStateLimit(%d)", uint8(l))
}

// MarshalText returns String's text.
func (l ProxyStateLimit) MarshalText() ([]byte, error) {
	if l > LimitProxyStateNever {
		return nil, fmt.Errorf("radpeer: unknown %s", l)
	}
	return []byte(l.String()), nil
}

// UnmarshalText reads always (or yes) and never (or no).
func (l *ProxyStateLimit) UnmarshalText(b []byte) error {
	switch string(b) {
	case "always", "yes":
		*l = LimitProxyStateAlways
	case "never", "no":
		*l = LimitProxyStateNever
	default:
		return fmt.Errorf("radpeer: %w: %q: want always or never", ErrConfig, b)
	}
	return nil
}

// attrEAPMessage is EAP-Message (RFC 3579 3.1).
const attrEAPMessage lradius.Type = 79

// DefaultMaxMAClients bounds the clients a server listener remembers as
// having sent a Message-Authenticator (RequireMAAuto). Only a client that
// knows the shared secret gets in, so the bound is a safety net, far
// above the NASes of a deployment; past it the least recently seen
// client is forgotten (and is trusted again until its next signed
// Access-Request).
const DefaultMaxMAClients = 1 << 16

// ErrRefused is matched by the error of a request that a server's
// Message-Authenticator policy refused: it is dropped, counted and never
// answered. It also matches radius.ErrNoMessageAuthenticator.
var ErrRefused = errors.New("radpeer: request refused by the Message-Authenticator policy")

// refusal is a request refused by the policy.
type refusal struct{ reason string }

func (e *refusal) Error() string { return "radpeer: request refused: " + e.reason }

func (e *refusal) Is(target error) bool {
	return target == ErrRefused || target == radius.ErrNoMessageAuthenticator
}

// MAPolicyStats are the counters of a server's Message-Authenticator
// policy.
type MAPolicyStats struct {
	// Refused counts requests dropped for a missing Message-Authenticator:
	// Status-Server without one, Access-Request without one from a client
	// that must send it (RequireMAAlways, or RequireMAAuto once seen).
	Refused uint64 `json:"refused"`
	// ProxyState counts Access-Requests dropped for carrying Proxy-State
	// without a Message-Authenticator (LimitProxyStateAlways).
	ProxyState uint64 `json:"proxy_state"`
	// EAPWithoutMA counts Access-Requests dropped for carrying
	// EAP-Message without a Message-Authenticator (RFC 3579 3.2: always,
	// whatever RequireMessageAuthenticator says).
	EAPWithoutMA uint64 `json:"eap_without_ma"`
	// Clients is how many clients are remembered as sending one, and
	// Forgotten how many were dropped from that table at its bound.
	Clients   int    `json:"clients"`
	Forgotten uint64 `json:"forgotten"`
}

// maPolicy is a server listener's Message-Authenticator state: the
// clients (source addresses) that sent an Access-Request with a valid
// Message-Authenticator, least recently seen at the back. Its zero value
// is ready; its methods are safe for concurrent use.
type maPolicy struct {
	mu      sync.Mutex
	max     int // 0: DefaultMaxMAClients
	clients map[netip.Addr]*list.Element
	lru     list.List // of netip.Addr, most recently seen at the front

	refused, proxyState, eap, forgotten atomic.Uint64
}

// verify checks request b (validated) from client (its source's IP
// address; the zero Addr for one without, such as a pipe), with the
// shared secret and the settings of cfg. The error matches
// radius.ErrAuthenticator when an authenticator fails (over a stream the
// connection must be closed), ErrRefused when the policy refuses the
// request (drop it, never answer it). signed reports that the request
// proved its sender holds the secret: a keyed Request Authenticator
// (Accounting-Request, CoA, Disconnect) or a Message-Authenticator. An
// Access-Request without one passes where the policy allows it, but
// proves nothing: its authenticator is a nonce anyone can make.
//
// Over TLS (overTLS: radsec://) the rules that require a
// Message-Authenticator (RequireMessageAuthenticator, LimitProxyState)
// do not apply: TLS protects the packet, and a Message-Authenticator
// keyed with the public secret "radsec" proves nothing there. One that
// is present is still verified; Status-Server and EAP-Message still
// need one.
func (p *maPolicy) verify(cfg *ServerConfig, b, secret []byte, client netip.Addr, overTLS bool) (signed bool, err error) {
	if err := radius.VerifyRequest(b, secret, false); err != nil {
		if errors.Is(err, radius.ErrNoMessageAuthenticator) { // Status-Server (RFC 5997 3)
			p.refused.Add(1)
			return false, &refusal{err.Error()}
		}
		return false, err
	}
	_, hasMA := radius.Attr(b, radius.AttrMessageAuthenticator) // verified above
	if radius.Code(b) != lradius.CodeAccessRequest {
		return true, nil // Status-Server has one; the others a keyed authenticator
	}
	mode := cfg.RequireMessageAuthenticator
	if !hasMA {
		if _, eap := radius.Attr(b, attrEAPMessage); eap {
			// RFC 3579 3.2: a packet with EAP-Message and no
			// Message-Authenticator MUST be silently discarded, whatever
			// the policy. Every EAP-capable NAS signs; one that does not
			// holds no secret, and would run EAP conversations (password
			// guessing through EAP-TTLS or PEAP) against the back end.
			p.eap.Add(1)
			return false, &refusal{"Access-Request with EAP-Message and no Message-Authenticator (RFC 3579 3.2)"}
		}
	}
	if hasMA {
		if mode == RequireMAAuto && !overTLS {
			p.seen(client)
		}
		return true, nil
	}
	if overTLS {
		return false, nil
	}
	switch {
	case mode == RequireMAAlways:
		p.refused.Add(1)
		return false, &refusal{"Access-Request without Message-Authenticator: required from every client"}
	case mode == RequireMAAuto && p.known(client):
		p.refused.Add(1)
		return false, &refusal{"Access-Request without Message-Authenticator: required from this client, which sent one before"}
	}
	if _, ok := radius.Attr(b, radius.AttrProxyState); ok && cfg.LimitProxyState == LimitProxyStateAlways {
		p.proxyState.Add(1)
		return false, &refusal{"Access-Request with Proxy-State and no Message-Authenticator"}
	}
	return false, nil
}

// seen records that client sent a valid Message-Authenticator.
func (p *maPolicy) seen(client netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clients[client]; ok {
		p.lru.MoveToFront(e)
		return
	}
	if p.clients == nil {
		p.clients = make(map[netip.Addr]*list.Element)
	}
	limit := p.max
	if limit <= 0 {
		limit = DefaultMaxMAClients
	}
	for len(p.clients) >= limit {
		old := p.lru.Back()
		delete(p.clients, p.lru.Remove(old).(netip.Addr))
		p.forgotten.Add(1)
	}
	p.clients[client] = p.lru.PushFront(client)
}

// known reports whether client is remembered as sending one.
func (p *maPolicy) known(client netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.clients[client]
	return ok
}

func (p *maPolicy) stats() MAPolicyStats {
	p.mu.Lock()
	n := len(p.clients)
	p.mu.Unlock()
	return MAPolicyStats{Refused: p.refused.Load(), ProxyState: p.proxyState.Load(), EAPWithoutMA: p.eap.Load(), Clients: n, Forgotten: p.forgotten.Load()}
}

// MAPolicyStats returns the counters of the server's
// Message-Authenticator policy (its refusals are counted in Dropped too).
func (s *Server) MAPolicyStats() MAPolicyStats { return s.maPolicy.stats() }

// MAPolicyStats returns the counters of the server's
// Message-Authenticator policy (its refusals are counted in Dropped too).
func (s *UDPServer) MAPolicyStats() MAPolicyStats { return s.maPolicy.stats() }
