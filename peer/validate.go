package peer

import (
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/internal/view"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// Checks made on every request from a peer, other than CER, DWR and DPR,
// before the Handler sees it (RFC 6733 3, 6.1 and 7). A request that fails
// one is answered with the error here, the connection stays up, and the
// Handler (and so any duplicate store behind it) never sees it.

// refusal is why a request is answered without the Handler.
type refusal struct {
	rc     uint32
	why    string
	failed *failedAVP // for the Failed-AVP, nil if none
}

// failedAVP is the AVP that goes back in a Failed-AVP.
type failedAVP struct {
	code, vendor uint32
	data         []byte
}

// maxFailedData bounds the value echoed in a Failed-AVP: a refusal never
// sends back a large value the peer chose.
const maxFailedData = message.MaxIdentityLen + 1

// checkRequest returns why req must not reach the Handler, or nil.
// remoteHost is the identity the connection was admitted with.
func (c *Config) checkRequest(req []byte, remoteHost string) *refusal {
	flags := wire.Flags(req)
	if flags&wire.FlagError != 0 {
		return &refusal{rc: message.InvalidHdrBits, why: "E bit set on a request"}
	}
	// One walk reads the AVPs the checks need. The refusals keep their
	// order of precedence: a malformed AVP anywhere first (CheckAVPs finds
	// it when the walk stopped, on it or on an earlier refusal), then the
	// application, then the AVPs' contents, the originator and last the
	// destination.
	var origin, destRealm, destHost []byte
	var seen [5]int // Origin-Host, Origin-Realm, Session-Id, Destination-Realm, Destination-Host
	var r *refusal
	walkErr := wire.WalkAVPs(req, func(a wire.AVP) bool {
		if a.Vendor != 0 {
			return true
		}
		i, identity := -1, false
		switch a.Code {
		case message.OriginHost:
			i, identity = 0, true
			origin = a.Data
		case message.OriginRealm:
			i, identity = 1, true
		case message.SessionID:
			i = 2
		case message.DestinationRealm:
			i, identity = 3, true
			destRealm = a.Data
		case message.DestinationHost:
			i, identity = 4, true
			destHost = a.Data
		case message.RouteRecord:
			identity = true
		}
		if i >= 0 {
			if seen[i]++; seen[i] > 1 {
				r = &refusal{rc: message.AVPOccursTooManyTimes, why: fmt.Sprintf("AVP %d occurs more than once", a.Code), failed: failedOf(a)}
				return false
			}
		}
		if identity {
			// A view of the bytes: CheckIdentity keeps no reference.
			if err := message.CheckIdentity(view.String(a.Data)); err != nil {
				r = &refusal{rc: message.InvalidAVPValue, why: fmt.Sprintf("AVP %d: %v", a.Code, err), failed: failedOf(a)}
				return false
			}
		}
		return true
	})
	if walkErr != nil || r != nil {
		if b := wire.CheckAVPs(req); b != nil {
			return &refusal{
				rc:     message.InvalidAVPLength,
				why:    fmt.Sprintf("AVP %d at offset %d, length %d: %s", b.Code, b.Offset, b.Length, b.Reason),
				failed: &failedAVP{code: b.Code, vendor: b.Vendor, data: b.Data},
			}
		}
		if walkErr != nil { // a header length past the bytes read: not from our transport
			return &refusal{rc: message.InvalidAVPLength, why: walkErr.Error()}
		}
	}
	app := wire.AppID(req)
	if app == message.AppCommon {
		return &refusal{rc: message.CommandUnsupported, why: fmt.Sprintf("command %d is not a base protocol request", wire.CommandCode(req))}
	}
	if !c.supportsApp(app) {
		return &refusal{rc: message.ApplicationNoSupport, why: fmt.Sprintf("application %d was not advertised", app)}
	}
	switch {
	case r != nil:
		return r
	case seen[0] == 0:
		return &refusal{rc: message.MissingAVP, why: "no Origin-Host", failed: &failedAVP{code: message.OriginHost}}
	case seen[1] == 0:
		return &refusal{rc: message.MissingAVP, why: "no Origin-Realm", failed: &failedAVP{code: message.OriginRealm}}
	}
	// The request's originator must be the peer on this connection, unless
	// that peer is an agent forwarding others' requests: otherwise one peer
	// could speak for another, and have its duplicate detection answer the
	// other's next request (Origin-Host and End-to-End id are the key).
	if o := view.String(origin); !message.EqualIdentity(o, remoteHost) && !c.isAgent(remoteHost) {
		return &refusal{
			rc:     message.InvalidAVPValue,
			why:    fmt.Sprintf("Origin-Host %s is not this connection's peer %s", string(origin), remoteHost),
			failed: &failedAVP{code: message.OriginHost, data: origin},
		}
	}
	if c.HandleOtherDestinations {
		return nil
	}
	return c.checkDestination(destHost, destRealm, seen[4] > 0, seen[3] > 0)
}

// checkDestination returns why a request whose Destination-Host and
// Destination-Realm are host and realm (present: hasHost, hasRealm) is
// not for this node, or nil (RFC 6733 6.1.4): a node that does not relay
// answers a Destination-Realm it does not serve DIAMETER_REALM_NOT_SERVED
// (6.1.6), and a Destination-Host that is another node, with or without a
// Destination-Realm, DIAMETER_UNABLE_TO_DELIVER (7.1.3).
func (c *Config) checkDestination(host, realm []byte, hasHost, hasRealm bool) *refusal {
	// Views of the bytes: the comparisons keep no reference.
	h, r := view.String(host), view.String(realm)
	if hasHost && message.EqualIdentity(h, c.OriginHost) {
		return nil // our own identity: ours, whatever the realm says
	}
	if hasRealm && !c.serves(r) {
		return &refusal{
			rc:     message.RealmNotServed,
			why:    fmt.Sprintf("Destination-Realm %s is not served by %s", r, c.OriginHost),
			failed: &failedAVP{code: message.DestinationRealm, data: realm},
		}
	}
	if hasHost {
		return &refusal{
			rc:     message.UnableToDeliver,
			why:    fmt.Sprintf("Destination-Host %s is not this node (%s), which does not relay", h, c.OriginHost),
			failed: &failedAVP{code: message.DestinationHost, data: host},
		}
	}
	return nil
}

// serves reports whether realm is OriginRealm or one of ServedRealms.
func (c *Config) serves(realm string) bool {
	return message.EqualIdentity(realm, c.OriginRealm) ||
		slices.ContainsFunc(c.ServedRealms, func(s string) bool { return message.EqualIdentity(realm, s) })
}

func failedOf(a wire.AVP) *failedAVP {
	return &failedAVP{code: a.Code, vendor: a.Vendor, data: a.Data}
}

// supportsApp reports whether we advertised app (or Relay): whether one of
// allApps is either, without building that list (this runs per request).
func (c *Config) supportsApp(app uint32) bool {
	ok := func(a uint32) bool { return a == app || a == message.AppRelay }
	return slices.ContainsFunc(c.AuthApps, ok) || slices.ContainsFunc(c.AcctApps, ok) ||
		slices.ContainsFunc(c.VendorApps, func(v VendorApp) bool { return ok(v.AuthAppID + v.AcctAppID) })
}

// isAgent reports whether host matches AgentHosts, ignoring ASCII case
// as identities compare (and as allowed matches AllowHosts). ToLower
// allocates only for a name or pattern with upper-case letters.
func (c *Config) isAgent(host string) bool {
	host = strings.ToLower(host)
	for _, g := range c.AgentHosts {
		if ok, _ := path.Match(strings.ToLower(g), host); ok {
			return true
		}
	}
	return false
}

// refusalAnswer builds the error answer for r (message.ErrorAnswer, with
// r's Failed-AVP when it has one).
func (c *Config) refusalAnswer(req []byte, r *refusal) []byte {
	// r.why is made of checked identities and numbers: safe to send.
	b := message.ErrorAnswer(req, c.identity(), r.rc, r.why)
	if f := r.failed; f != nil {
		d := f.data[:min(len(f.data), maxFailedData)]
		b.Group(message.FailedAVP, 0, true).Octets(f.code, f.vendor, true, d).End()
	}
	return b.Bytes()
}

// refuse answers a request that failed checkRequest; the connection stays.
func (p *Peer) refuse(c *conn, req []byte, r *refusal, now int64) {
	p.stats.refused.Add(1)
	reason := fmt.Sprintf("%s refused with %d: %s", message.CommandName(req), r.rc, r.why)
	p.publishPerMessage(Event{Kind: EventError, Reason: reason})
	p.logLimited(slog.LevelWarn, serve.KindBadRequest, "request refused before the handler",
		"peer", p.Name(), "command", message.CommandName(req), "result_code", r.rc, "reason", r.why)
	c.out.Post(p.cfg.refusalAnswer(req, r), false, true, nil) // queued, counted in the backlog
	p.notifyOther(c, now)
}
