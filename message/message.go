// Package message builds Diameter messages by appending bytes, without
// go-diameter's reflection-heavy encoder, and reads the few AVPs the engine
// needs (capabilities, Result-Code, Session-Id) through package wire.
//
// It exists for the hot path and for AVPs no dictionary knows (the test
// application's vendor AVP 345678): a Builder appends the header and AVPs
// into one slice and patches the lengths at the end. A Builder is not safe
// for concurrent use; the []byte it returns is the caller's. Two fast paths
// make the Builder's bytes with one allocation: SuccessAnswer, a server's
// answer, and RequestTemplate, a load generator's numbered requests.
package message

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/aaatp/aaatp/wire"
)

// AVP codes of RFC 6733 (base protocol) and RFC 6733 accounting that the
// engine reads or writes.
const (
	UserName                    = 1
	NASIPAddress                = 4
	NASIdentifier               = 32
	EventTimestamp              = 55
	HostIPAddress               = 257
	AuthApplicationID           = 258
	AcctApplicationID           = 259
	VendorSpecificApplicationID = 260
	SessionID                   = 263
	OriginHost                  = 264
	SupportedVendorID           = 265
	VendorID                    = 266
	FirmwareRevision            = 267
	ResultCode                  = 268
	ProductName                 = 269
	DisconnectCause             = 273
	OriginStateID               = 278
	FailedAVP                   = 279
	ErrorMessage                = 281
	DestinationRealm            = 283
	DestinationHost             = 293
	ProxyInfo                   = 284 // Grouped: Proxy-Host and Proxy-State (RFC 6733 6.7.2)
	ProxyHost                   = 280
	ProxyState                  = 33
	OriginRealm                 = 296
	InbandSecurityID            = 299
	AccountingRecordType        = 480
	AccountingRecordNumber      = 485
)

// Application ids and command codes the engine uses.
const (
	AppCommon     = 0          // base protocol messages
	AppAccounting = 3          // base accounting
	AppRelay      = 0xffffffff // Relay: accepts any application

	CmdAccounting = 271

	// The test application of freeDiameter's test_app extension.
	AppTest      = 16777214
	CmdTest      = 16777214
	VendorTest   = 999999
	AVPTestValue = 345678
)

// Result codes (RFC 6733 7.1).
const (
	Success              = 2001
	UnableToDeliver      = 3002
	RealmNotServed       = 3003
	TooBusy              = 3004
	UnknownPeer          = 3010
	InvalidAVPValue      = 5004
	UnableToComply       = 5012
	NoCommonApplication  = 5010
	CommandUnsupported   = 3001
	ApplicationNoSupport = 3007
	InvalidHdrBits       = 3008
	ElectionLost         = 4003
	NoCommonSecurity     = 5017
)

// Disconnect-Cause values (RFC 6733 5.4.3).
const (
	DisconnectRebooting          = 0
	DisconnectBusy               = 1
	DisconnectDoNotWantToTalkToU = 2
)

// DisconnectCauseName names a Disconnect-Cause as RFC 6733 does
// ("REBOOTING"), or "Disconnect-Cause N" for a value it does not define.
func DisconnectCauseName(cause uint32) string {
	switch cause {
	case DisconnectRebooting:
		return "REBOOTING"
	case DisconnectBusy:
		return "BUSY"
	case DisconnectDoNotWantToTalkToU:
		return "DO_NOT_WANT_TO_TALK_TO_YOU"
	}
	return "Disconnect-Cause " + strconv.FormatUint(uint64(cause), 10)
}

const (
	flagV = 0x80
	flagM = 0x40
)

// Builder appends one message. The zero value is not usable: start with
// NewRequest or NewAnswer.
type Builder struct {
	b        []byte
	groups   []int // start offsets of open Grouped AVPs
	protoErr bool  // a 3xxx Result-Code was added: Bytes sets the E bit
}

// NewRequest starts a request with the R bit and the given extra flags
// (wire.FlagProxiable...). Hop-by-Hop and End-to-End are zero: the peer
// that sends it assigns them.
func NewRequest(cmd, app uint32, flags uint8) *Builder {
	return start(make([]byte, 0, 256), cmd, app, flags|wire.FlagRequest, 0, 0)
}

// NewAnswer starts the answer to req: same command, application,
// Hop-by-Hop and End-to-End ids; the P bit copied; R and T cleared (an
// answer never carries the T flag).
func NewAnswer(req []byte) *Builder {
	return start(make([]byte, 0, 256), wire.CommandCode(req), wire.AppID(req),
		wire.Flags(req)&wire.FlagProxiable, wire.HopByHop(req), wire.EndToEnd(req))
}

func start(b []byte, cmd, app uint32, flags uint8, hbh, e2e uint32) *Builder {
	b = append(b, wire.Version, 0, 0, 0, flags, byte(cmd>>16), byte(cmd>>8), byte(cmd))
	b = binary.BigEndian.AppendUint32(b, app)
	b = binary.BigEndian.AppendUint32(b, hbh)
	b = binary.BigEndian.AppendUint32(b, e2e)
	return &Builder{b: b}
}

func (m *Builder) header(code, vendor uint32, mandatory bool, dataLen int) {
	m.b = appendHeader(m.b, code, vendor, mandatory, dataLen)
}

func (m *Builder) pad() { m.b = pad(m.b) }

// appendHeader appends an AVP's header: code, flags (M when mandatory, V
// with a vendor), the length of a header and dataLen octets, the vendor.
func appendHeader(b []byte, code, vendor uint32, mandatory bool, dataLen int) []byte {
	var flags byte
	if mandatory {
		flags |= flagM
	}
	hl := 8
	if vendor != 0 {
		flags |= flagV
		hl = 12
	}
	l := hl + dataLen
	b = binary.BigEndian.AppendUint32(b, code)
	b = append(b, flags, byte(l>>16), byte(l>>8), byte(l))
	if vendor != 0 {
		b = binary.BigEndian.AppendUint32(b, vendor)
	}
	return b
}

// avpLen is the size of an AVP holding dataLen octets, padding included.
func avpLen(vendor uint32, dataLen int) int {
	if vendor != 0 {
		return 12 + (dataLen+3)&^3
	}
	return 8 + (dataLen+3)&^3
}

// pad appends zeros up to a multiple of 4 octets.
func pad(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// Octets appends an OctetString (or UTF8String, DiameterIdentity) AVP.
func (m *Builder) Octets(code, vendor uint32, mandatory bool, data []byte) *Builder {
	m.header(code, vendor, mandatory, len(data))
	m.b = append(m.b, data...)
	m.pad()
	return m
}

// String appends a UTF8String or DiameterIdentity AVP.
func (m *Builder) String(code, vendor uint32, mandatory bool, s string) *Builder {
	m.header(code, vendor, mandatory, len(s))
	m.b = append(m.b, s...)
	m.pad()
	return m
}

// Uint32 appends an Unsigned32 or Enumerated AVP.
func (m *Builder) Uint32(code, vendor uint32, mandatory bool, v uint32) *Builder {
	m.header(code, vendor, mandatory, 4)
	m.b = binary.BigEndian.AppendUint32(m.b, v)
	return m
}

// ResultCode appends the Result-Code AVP. A protocol error (3xxx) also
// makes Bytes set the E bit, as RFC 6733 7.1.3 requires of such answers.
func (m *Builder) ResultCode(rc uint32) *Builder {
	if rc >= 3000 && rc < 4000 {
		m.protoErr = true
	}
	return m.Uint32(ResultCode, 0, true, rc)
}

// Uint64 appends an Unsigned64 AVP.
func (m *Builder) Uint64(code, vendor uint32, mandatory bool, v uint64) *Builder {
	m.header(code, vendor, mandatory, 8)
	m.b = binary.BigEndian.AppendUint64(m.b, v)
	return m
}

// Address appends an Address AVP (RFC 6733 4.3.1: a 2-byte family then the
// address; 1 is IPv4, 2 is IPv6).
func (m *Builder) Address(code, vendor uint32, mandatory bool, a netip.Addr) *Builder {
	a = a.Unmap()
	if a.Is4() {
		v := a.As4()
		m.header(code, vendor, mandatory, 6)
		m.b = append(m.b, 0, 1)
		m.b = append(m.b, v[:]...)
	} else {
		v := a.As16()
		m.header(code, vendor, mandatory, 18)
		m.b = append(m.b, 0, 2)
		m.b = append(m.b, v[:]...)
	}
	m.pad()
	return m
}

// Group opens a Grouped AVP; AVPs appended until End go inside it.
func (m *Builder) Group(code, vendor uint32, mandatory bool) *Builder {
	m.groups = append(m.groups, len(m.b))
	m.header(code, vendor, mandatory, 0)
	return m
}

// End closes the innermost open Grouped AVP.
func (m *Builder) End() *Builder {
	start := m.groups[len(m.groups)-1]
	m.groups = m.groups[:len(m.groups)-1]
	l := len(m.b) - start
	m.b[start+5], m.b[start+6], m.b[start+7] = byte(l>>16), byte(l>>8), byte(l)
	return m
}

// ErrTooLong is the error of Build for a message longer than its header's
// 24-bit Length field can say (wire.MaxMessageLen octets): written anyway,
// the length would wrap and the receiver would read the rest of the message
// as the next ones.
var ErrTooLong = errors.New("message: longer than a Diameter header can say")

// Build finishes the message (closing any open group) and returns it, or,
// when it is longer than wire.MaxMessageLen, nil and an error matching
// ErrTooLong. (No AVP can then be too long for its own 24-bit Length
// either.)
func (m *Builder) Build() ([]byte, error) {
	for len(m.groups) > 0 {
		m.End()
	}
	l := len(m.b)
	if l > wire.MaxMessageLen {
		return nil, fmt.Errorf("%w: %d octets, at most %d", ErrTooLong, l, wire.MaxMessageLen)
	}
	m.b[1], m.b[2], m.b[3] = byte(l>>16), byte(l>>8), byte(l)
	if m.protoErr {
		m.b[4] |= wire.FlagError
	}
	return m.b, nil
}

// Bytes is Build for a message its caller knows to be short enough (every
// message the engine builds, ErrorAnswer's included, whatever the request
// it answers): it panics, rather than write a wrong length, when the
// message is longer than wire.MaxMessageLen.
func (m *Builder) Bytes() []byte {
	b, err := m.Build()
	if err != nil {
		panic(err)
	}
	return b
}

// Uint32Of reads a top-level Unsigned32 AVP without decoding the message.
func Uint32Of(msg []byte, code, vendor uint32) (uint32, bool) {
	d, ok := wire.FindAVP(msg, code, vendor)
	if !ok || len(d) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(d), true
}

// StringOf reads a top-level UTF8String or DiameterIdentity AVP.
func StringOf(msg []byte, code, vendor uint32) (string, bool) {
	d, ok := wire.FindAVP(msg, code, vendor)
	if !ok {
		return "", false
	}
	return string(d), true
}

// ResultCodeOf returns an answer's Result-Code (0, false when absent).
func ResultCodeOf(msg []byte) (uint32, bool) { return Uint32Of(msg, ResultCode, 0) }

// AddressOf decodes Address AVP data.
func AddressOf(d []byte) (netip.Addr, bool) {
	switch {
	case len(d) == 6 && d[0] == 0 && d[1] == 1:
		return netip.AddrFrom4([4]byte(d[2:6])), true
	case len(d) == 18 && d[0] == 0 && d[1] == 2:
		return netip.AddrFrom16([16]byte(d[2:18])), true
	}
	return netip.Addr{}, false
}

// CommandName names a message for logs and labels: "CER", "DWA", "ACR",
// "TR" (the test application), or "cmd-N-R"/"cmd-N-A" for other commands.
func CommandName(msg []byte) string {
	n, ok := abbrev(wire.CommandCode(msg))
	if !ok {
		n = "cmd-" + strconv.FormatUint(uint64(wire.CommandCode(msg)), 10) + "-"
	}
	if wire.IsRequest(msg) {
		return n + "R"
	}
	return n + "A"
}

// KnownCommand reports whether CommandName has a proper name for the code
// (callers that must bound a label's values use it).
func KnownCommand(code uint32) bool {
	_, ok := abbrev(code)
	return ok
}

func abbrev(code uint32) (string, bool) {
	switch code {
	case wire.CmdCapabilitiesExchange:
		return "CE", true
	case wire.CmdDeviceWatchdog:
		return "DW", true
	case wire.CmdDisconnectPeer:
		return "DP", true
	case CmdAccounting:
		return "AC", true
	case CmdTest:
		return "T", true
	}
	return "", false
}
