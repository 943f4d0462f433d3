package peer

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// Base protocol messages (RFC 6733 5.3-5.5), built with package message.

// capabilities is what one side advertised in its CER or CEA.
type capabilities struct {
	OriginHost  string
	OriginRealm string
	ResultCode  uint32 // CEA only
	ErrorMsg    string // CEA only
	AuthApps    []uint32
	AcctApps    []uint32
	ProductName string
	Inband      []uint32 // Inband-Security-Id values offered (CER)
	// handTo, for an accepted connection that goes to the client Peer
	// of its identity (an election won, or that Peer had no connection):
	// that Peer, and handWhy the reason for its event.
	handTo  *Peer
	handWhy string
	// bad is the first identity AVP that failed CheckIdentity, for the
	// Failed-AVP of the refusal.
	bad *wire.AVP
	// dup is the first Origin-Host or Origin-Realm AVP that repeats one
	// before it (RFC 6733 5.3.1 has exactly one of each): a server
	// refuses the CER with DIAMETER_AVP_OCCURS_TOO_MANY_TIMES, naming it.
	dup *wire.AVP
	// missing is the code of Origin-Host or Origin-Realm when the message
	// has none (0: both present, or the AVPs did not parse): a server
	// refuses such a CER with DIAMETER_MISSING_AVP.
	missing uint32
}

// identityError is a CER or CEA whose Origin-Host or Origin-Realm is not a
// valid DiameterIdentity.
type identityError struct {
	avp string // "Origin-Host" or "Origin-Realm"
	err error
}

func (e *identityError) Error() string { return e.avp + ": " + e.err.Error() }
func (e *identityError) Unwrap() error { return e.err }

// lengthError is a CER or CEA with an AVP whose length does not fit: one
// running past the message or its Grouped AVP, or shorter than its
// header, or a value not the size of its type (an Application-Id of 2
// octets). A server refuses such a CER with DIAMETER_INVALID_AVP_LENGTH
// naming the AVP (RFC 6733 7.1.5), rather than read it as something else.
type lengthError struct {
	avp    wire.AVP
	reason string
}

func (e *lengthError) Error() string {
	return fmt.Sprintf("AVP %d: %s", e.avp.Code, e.reason)
}

// isU32AVP reports whether code is an Unsigned32 AVP of a CER or CEA (RFC
// 6733 5.3), at the top level or inside a Vendor-Specific-Application-Id.
func isU32AVP(code uint32) bool {
	switch code {
	case message.AuthApplicationID, message.AcctApplicationID, message.InbandSecurityID,
		message.ResultCode, message.OriginStateID, message.SupportedVendorID,
		message.VendorID, message.FirmwareRevision:
		return true
	}
	return false
}

// badLength returns why the value of a, an AVP of a CER or CEA, does not
// fit its type, or "".
func badLength(a wire.AVP) string {
	switch {
	case isU32AVP(a.Code) && len(a.Data) != 4:
		return fmt.Sprintf("Unsigned32 of %d octets, not 4", len(a.Data))
	case a.Code == message.HostIPAddress:
		want := 0
		if len(a.Data) >= 2 {
			switch uint16(a.Data[0])<<8 | uint16(a.Data[1]) {
			case 1:
				want = 2 + 4
			case 2:
				want = 2 + 16
			}
		}
		if len(a.Data) < 2 || want != 0 && len(a.Data) != want {
			return fmt.Sprintf("Address of %d octets", len(a.Data))
		}
	}
	return ""
}

func (c *Config) addIdentity(b *message.Builder) *message.Builder {
	return b.String(message.OriginHost, 0, true, c.OriginHost).
		String(message.OriginRealm, 0, true, c.OriginRealm)
}

func (c *Config) addCapabilities(b *message.Builder, local net.Addr) {
	c.addIdentity(b)
	ips := c.HostIPAddresses
	if len(ips) == 0 {
		// Every local address of the connection: a multi-homed SCTP
		// endpoint lists each (RFC 6733 2.1, 5.3).
		if ips = serve.AddrsOf(local); len(ips) == 0 {
			ips = []netip.Addr{netip.IPv4Unspecified()}
		}
	}
	for _, ip := range ips {
		b.Address(message.HostIPAddress, 0, true, ip)
	}
	b.Uint32(message.VendorID, 0, true, c.VendorID).
		String(message.ProductName, 0, false, c.ProductName).
		Uint32(message.OriginStateID, 0, true, c.OriginStateID)
	var vendors []uint32
	for _, v := range c.VendorApps {
		if !slices.Contains(vendors, v.VendorID) {
			vendors = append(vendors, v.VendorID)
		}
	}
	for _, v := range vendors {
		b.Uint32(message.SupportedVendorID, 0, true, v)
	}
	for _, a := range c.AuthApps {
		b.Uint32(message.AuthApplicationID, 0, true, a)
	}
	for _, a := range c.AcctApps {
		b.Uint32(message.AcctApplicationID, 0, true, a)
	}
	for _, v := range c.VendorApps {
		b.Group(message.VendorSpecificApplicationID, 0, true).Uint32(message.VendorID, 0, true, v.VendorID)
		if v.AuthAppID != 0 {
			b.Uint32(message.AuthApplicationID, 0, true, v.AuthAppID)
		} else {
			b.Uint32(message.AcctApplicationID, 0, true, v.AcctAppID)
		}
		b.End()
	}
}

// withIDs gives a base request its Hop-by-Hop id (from the connection's
// counter) and a fresh End-to-End id: RFC 6733 3 wants both unique on
// every request, CER, DWR and DPR included.
func withIDs(req []byte, hbh interface{ Next() uint32 }) []byte {
	wire.SetHopByHop(req, hbh.Next())
	wire.SetEndToEnd(req, e2e.Next())
	return req
}

func (c *Config) newCER(local net.Addr) []byte {
	b := message.NewRequest(wire.CmdCapabilitiesExchange, message.AppCommon, 0)
	c.addCapabilities(b, local)
	return b.Bytes()
}

// newCEA answers cer. failed, when not nil, is an AVP of cer that goes
// back in a Failed-AVP; its value is cut to MaxIdentityLen+1 bytes so that a
// refusal never echoes a huge value.
func (c *Config) newCEA(cer []byte, local net.Addr, result uint32, errMsg string, failed *wire.AVP) []byte {
	b := message.NewAnswer(cer).ResultCode(result)
	c.addCapabilities(b, local)
	if errMsg != "" {
		b.String(message.ErrorMessage, 0, false, errMsg)
	}
	if failed != nil {
		v := failed.Data[:min(len(failed.Data), message.MaxIdentityLen+1)]
		b.Group(message.FailedAVP, 0, true).Octets(failed.Code, failed.Vendor, true, v).End()
	}
	return b.Bytes()
}

func (c *Config) newDWR() []byte {
	b := message.NewRequest(wire.CmdDeviceWatchdog, message.AppCommon, 0)
	c.addIdentity(b).Uint32(message.OriginStateID, 0, true, c.OriginStateID)
	return b.Bytes()
}

func (c *Config) newDWA(dwr []byte) []byte {
	b := message.NewAnswer(dwr).Uint32(message.ResultCode, 0, true, message.Success)
	c.addIdentity(b).Uint32(message.OriginStateID, 0, true, c.OriginStateID)
	return b.Bytes()
}

func (c *Config) newDPR(cause uint32) []byte {
	b := message.NewRequest(wire.CmdDisconnectPeer, message.AppCommon, 0)
	c.addIdentity(b).Uint32(message.DisconnectCause, 0, true, cause)
	return b.Bytes()
}

func (c *Config) newDPA(dpr []byte) []byte {
	b := message.NewAnswer(dpr).Uint32(message.ResultCode, 0, true, message.Success)
	return c.addIdentity(b).Bytes()
}

// identity is what this side signs its messages with.
func (c *Config) identity() message.Identity {
	return message.Identity{Host: c.OriginHost, Realm: c.OriginRealm}
}

// LocalIdentity returns the Origin-Host and Origin-Realm this Peer sends:
// handlers sign their answers with it (message.ErrorAnswer).
func (p *Peer) LocalIdentity() message.Identity { return p.cfg.identity() }

// parseCapabilities reads a CER or CEA without a full decode. An AVP whose
// length does not fit (see lengthError) fails it with a *lengthError,
// whatever else is wrong; an invalid identity with an *identityError.
func parseCapabilities(msg []byte) (capabilities, error) {
	var cp capabilities
	var inner error
	var short *lengthError
	var hosts, realms int
	err := wire.WalkAVPs(msg, func(a wire.AVP) bool {
		if a.Vendor != 0 {
			return true
		}
		if why := badLength(a); why != "" {
			if short == nil {
				short = &lengthError{a, why}
			}
			return true
		}
		switch a.Code {
		case message.OriginHost:
			if hosts++; hosts > 1 {
				cp.dup = cmp.Or(cp.dup, &a)
				return true // the first one is the identity
			}
			cp.OriginHost = string(a.Data)
			if err := message.CheckIdentity(cp.OriginHost); err != nil && inner == nil {
				inner, cp.bad = &identityError{"Origin-Host", err}, &a
				cp.OriginHost = ""
			}
		case message.OriginRealm:
			if realms++; realms > 1 {
				cp.dup = cmp.Or(cp.dup, &a)
				return true
			}
			cp.OriginRealm = string(a.Data)
			if err := message.CheckIdentity(cp.OriginRealm); err != nil && inner == nil {
				inner, cp.bad = &identityError{"Origin-Realm", err}, &a
				cp.OriginRealm = ""
			}
		case message.ProductName:
			cp.ProductName = string(a.Data)
		case message.InbandSecurityID:
			cp.Inband = append(cp.Inband, u32(a.Data))
		case message.ErrorMessage:
			cp.ErrorMsg = string(a.Data)
		case message.ResultCode:
			cp.ResultCode = u32(a.Data)
		case message.AuthApplicationID:
			cp.AuthApps = append(cp.AuthApps, u32(a.Data))
		case message.AcctApplicationID:
			cp.AcctApps = append(cp.AcctApps, u32(a.Data))
		case message.VendorSpecificApplicationID:
			if b := wire.CheckGrouped(a.Data); b != nil {
				short = cmp.Or(short, &lengthError{wire.AVP{Code: b.Code, Vendor: b.Vendor, Data: b.Data}, b.Reason})
				return true
			}
			wire.WalkGrouped(a.Data, func(g wire.AVP) bool {
				switch why := badLength(g); {
				case g.Vendor != 0:
				case why != "":
					short = cmp.Or(short, &lengthError{g, why})
				case g.Code == message.AuthApplicationID:
					cp.AuthApps = append(cp.AuthApps, u32(g.Data))
				case g.Code == message.AcctApplicationID:
					cp.AcctApps = append(cp.AcctApps, u32(g.Data))
				}
				return true
			})
		}
		return true
	})
	if err != nil {
		// An AVP running past the message, or shorter than its header:
		// the walk stopped on it.
		if b := wire.CheckAVPs(msg); b != nil {
			short = cmp.Or(short, &lengthError{wire.AVP{Code: b.Code, Vendor: b.Vendor, Data: b.Data}, b.Reason})
		}
	}
	switch {
	case short != nil:
		return cp, short
	case err != nil:
		return cp, err
	case inner != nil:
		// The first error is the one to report: an identity that
		// failed before must not be lost (its value is cleared).
		return cp, inner
	}
	switch {
	case hosts == 0:
		cp.missing = message.OriginHost
	case realms == 0:
		cp.missing = message.OriginRealm
	}
	if cp.OriginHost == "" {
		return cp, fmt.Errorf("%s without Origin-Host", message.CommandName(msg))
	}
	return cp, nil
}

func u32(b []byte) uint32 {
	if len(b) != 4 {
		return 0
	}
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// commonApps reports whether our advertised applications and theirs share
// one, counting Relay (0xffffffff) on either side as sharing everything.
func (c *Config) commonApps(their capabilities) bool {
	ours := c.allApps()
	theirs := append(append([]uint32(nil), their.AuthApps...), their.AcctApps...)
	if slices.Contains(ours, message.AppRelay) || slices.Contains(theirs, message.AppRelay) {
		return len(theirs) > 0
	}
	for _, a := range theirs {
		if slices.Contains(ours, a) {
			return true
		}
	}
	return false
}

func (c *Config) allApps() []uint32 {
	apps := append(append([]uint32(nil), c.AuthApps...), c.AcctApps...)
	for _, v := range c.VendorApps {
		apps = append(apps, v.AuthAppID+v.AcctAppID)
	}
	return apps
}

// Inband-Security-Id values (RFC 6733 6.10).
const (
	noInbandSecurity = 0
	inbandTLS        = 1
)

// commonSecurity reports whether one of the Inband-Security-Ids a CER
// offered is possible on a connection that is (secure) or is not already
// TLS. None offered means NO_INBAND_SECURITY. In-band TLS (a handshake
// after the CEA, RFC 3588) is not done here: TLS is on connect (tls://),
// where RFC 6733 2.2 has peers offer NO_INBAND_SECURITY and where a
// peer asking for TLS already has it.
func commonSecurity(offered []uint32, secure bool) bool {
	if len(offered) == 0 || slices.Contains(offered, noInbandSecurity) {
		return true
	}
	return secure && slices.Contains(offered, inbandTLS)
}

// resultName names the result codes a CEA is likely to carry.
func resultName(rc uint32) string {
	switch rc {
	case message.Success:
		return "DIAMETER_SUCCESS"
	case message.UnknownPeer:
		return "DIAMETER_UNKNOWN_PEER"
	case message.NoCommonApplication:
		return "DIAMETER_NO_COMMON_APPLICATION"
	case message.TooBusy:
		return "DIAMETER_TOO_BUSY"
	case message.UnableToDeliver:
		return "DIAMETER_UNABLE_TO_DELIVER"
	case message.CommandUnsupported:
		return "DIAMETER_COMMAND_UNSUPPORTED"
	case message.UnableToComply:
		return "DIAMETER_UNABLE_TO_COMPLY"
	case message.NoCommonSecurity:
		return "DIAMETER_NO_COMMON_SECURITY"
	case message.ElectionLost:
		return "DIAMETER_ELECTION_LOST"
	}
	return "result code"
}
