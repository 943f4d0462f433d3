package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/datatype"
	"github.com/fiorix/go-diameter/v4/diam/dict"
)

// Decode decodes one complete Diameter message (len(msg) must equal the
// header's Length) into a go-diameter Message using dictionary d
// (dict.Default when nil). Every error is a *FrameError matching ErrBadFrame;
// note that some of them are AVP-level problems in a correctly framed
// message, so the connection it came from need not be closed for them.
//
// Decode deliberately does not call diam.ReadMessage, because go-diameter
// v4.0.4 has these traps (see message.go and avp.go in its diam package):
//
//  1. readBody allocates int(MessageLength-HeaderLength) with uint32
//     arithmetic before any check: a length below 20 underflows to about
//     4 GiB, and any length up to 16 MiB is allocated as claimed. Decode
//     validates the header first and never allocates more than len(msg).
//  2. AVP.DecodeFromBytes reads data[8:12] for a Vendor-ID when the 'V'
//     flag is set without checking the AVP is 12 bytes long, and panics.
//     Decode checks every AVP's bounds, in Grouped AVPs too, before
//     decoding, and also recovers any panic from go-diameter, returning it
//     as a FrameError.
//  3. ReadMessage reads bodies of up to MessageBufferLength (1024) bytes
//     into a pooled buffer that goes back to a sync.Pool when it returns,
//     and the []byte-based values (Address, IPv4, IPv6, and Unknown, i.e.
//     every AVP missing from the dictionary) are sub-slices of it: the next
//     ReadMessage in any goroutine overwrites them (string-based types such
//     as OctetString and DiameterIdentity are copied by the conversion). Decode decodes from a fresh copy of msg, so the returned
//     message owns its bytes and shares nothing with msg either.
//  4. Fixed-size types (Unsigned32, Integer64, Time, ...) with a wrong
//     length decode silently as zero, and the walk inside a Grouped AVP
//     then advances by the re-computed length instead of the wire length,
//     misreading the AVPs that follow. Before go-diameter sees the message,
//     Decode walks every AVP, into Grouped AVPs too, and refuses one whose
//     Length does not fit: below its header, past the end of the message
//     or of its group, or not the exact size of its type (an Unsigned32 of
//     2 octets, an IPv4 Address of 5). It checks the decoded AVPs again
//     afterwards, refusing any whose value would not re-encode to its wire
//     length.
//  5. diam.NewMessage replaces a zero Hop-by-Hop or End-to-End Identifier
//     with a random one; Decode sets the header it read verbatim.
//
// Like diam.ReadMessage, Decode fails on a command the dictionary does not
// know. AVPs the dictionary does not know decode as datatype.Unknown.
//
// An error about an AVP's length also matches ErrAVPLength: the message is
// correctly framed, and a receiver answers a request with such an AVP
// DIAMETER_INVALID_AVP_LENGTH (5014, RFC 6733 section 7.1.5) rather than
// close the connection. A message whose AVPs nest deeper than MaxAVPDepth
// is refused with an error matching ErrAVPTooDeep (answered
// DIAMETER_INVALID_AVP_VALUE, 5004), before any recursion into it.
//
// An error about one AVP names it in FrameError.Failed, for the Failed-AVP
// of the answer (RFC 6733 7.1.5): the AVP whose length does not fit, or,
// when go-diameter refuses a value (an Address of a family it does not
// know), the innermost AVP it refuses on its own.
func Decode(msg []byte, d *dict.Parser) (m *diam.Message, err error) {
	if d == nil {
		d = dict.Default
	}
	h, err := ParseHeader(msg)
	if err != nil {
		return nil, err
	}
	if err := Validate(h, MaxMessageLen); err != nil {
		return nil, err
	}
	if int(h.Length) != len(msg) {
		return nil, frameErr("header length %d but %d bytes given", h.Length, len(msg))
	}
	// Check every AVP's length, Grouped AVPs' contents included, before
	// go-diameter sees them.
	if err := checkAVPTree(msg, HeaderLen, 0, 1, h.AppID, d); err != nil {
		return nil, err
	}
	if _, err := d.FindCommand(h.AppID, h.CommandCode); err != nil {
		return nil, &FrameError{Reason: fmt.Sprintf("unknown command %d (application %d)", h.CommandCode, h.AppID), Err: err}
	}

	at := -1 // the offset in msg of the top-level AVP being decoded
	defer func() {
		// go-diameter's decoders index slices without checks in places
		// (trap 2 and whatever else a fuzzer finds in grouped AVPs); a
		// peer's bytes must never take the process down.
		if r := recover(); r != nil {
			m = nil
			fe := &FrameError{Reason: "go-diameter panicked decoding AVPs", Err: fmt.Errorf("%v", r)}
			if at >= 0 {
				fe.Failed = failedIn(msg, at, h.AppID, d, 1)
			}
			err = fe
		}
	}()

	body := make([]byte, len(msg)-HeaderLen)
	copy(body, msg[HeaderLen:])

	m = diam.NewMessage(h.CommandCode, h.Flags, h.AppID, h.HopByHop, h.EndToEnd, d)
	m.Header = &diam.Header{
		Version:       h.Version,
		MessageLength: h.Length,
		CommandFlags:  h.Flags,
		CommandCode:   h.CommandCode,
		ApplicationID: h.AppID,
		HopByHopID:    h.HopByHop,
		EndToEndID:    h.EndToEnd,
	}
	for off := 0; off < len(body); {
		wireLen := int(uint24(body[off+5 : off+8])) // bounds checked by walkAVPs
		padded := (wireLen + 3) &^ 3
		at = HeaderLen + off
		a, err := diam.DecodeAVP(body[off:off+wireLen], h.AppID, d)
		if err != nil {
			return nil, &FrameError{
				Reason: fmt.Sprintf("AVP %d at offset %d", binary.BigEndian.Uint32(body[off:off+4]), HeaderLen+off),
				Err:    err,
				Failed: failedIn(msg, at, h.AppID, d, 1),
			}
		}
		if bad := misdecoded(a); bad != nil {
			hl := avpHeaderLen
			if bad.Flags&avpFlagVendor != 0 {
				hl = avpVendorHeaderLen
			}
			return nil, &FrameError{
				Reason: fmt.Sprintf("AVP %d (vendor %d) in the AVP at offset %d: %d bytes on the wire, but its decoded %s value would be %d",
					bad.Code, bad.VendorID, HeaderLen+off, bad.Length, typeName(bad), hl+bad.Data.Len()),
				Err:    ErrAVPLength,
				Failed: &AVP{Code: bad.Code, Vendor: bad.VendorID, Data: serialized(bad)},
			}
		}
		m.AVP = append(m.AVP, a)
		off += padded
	}
	return m, nil
}

// serialized returns a's value as go-diameter encodes it, nil without one.
func serialized(a *diam.AVP) []byte {
	if a.Data == nil {
		return nil
	}
	return a.Data.Serialize()
}

func typeName(a *diam.AVP) string {
	if a.Data == nil {
		return "nil"
	}
	return fmt.Sprintf("%T", a.Data)
}

// ErrAVPLength is matched (with errors.Is) by a Decode error about an AVP
// whose Length does not fit: below its own header, running past the end of
// the message or of the Grouped AVP holding it, or not the size its type
// has. RFC 6733 section 7.1.5 answers it DIAMETER_INVALID_AVP_LENGTH (5014).
var ErrAVPLength = errors.New("AVP length does not fit its value")

// MaxAVPDepth is how deeply Decode lets AVPs nest: a top-level AVP is at
// depth 1, an AVP inside a top-level Grouped AVP at depth 2, and so on.
// Real applications nest 3 to 5 deep, one more inside a Failed-AVP. A
// message with an AVP deeper than this is refused before go-diameter
// decodes it, whose time grows with the square of the depth and whose
// stack grows with the depth: a chain of empty Grouped AVPs nests one
// level every 8 bytes, and overflowing the stack would end the process.
const MaxAVPDepth = 16

// ErrAVPTooDeep is matched (with errors.Is) by a Decode error about an AVP
// nested deeper than MaxAVPDepth. The outermost Grouped AVP's value is what
// is wrong: RFC 6733 section 7.1.5 answers it DIAMETER_INVALID_AVP_VALUE
// (5004).
var ErrAVPTooDeep = errors.New("AVPs nest too deeply")

// fixedLen is the exact data length of the dictionary types that have one,
// 0 for the others. An Address's length depends on its family (addressLen).
func fixedLen(t datatype.TypeID) int {
	switch t {
	case datatype.Unsigned32Type, datatype.Integer32Type, datatype.EnumeratedType,
		datatype.Float32Type, datatype.TimeType, datatype.IPv4Type:
		return 4
	case datatype.Unsigned64Type, datatype.Integer64Type, datatype.Float64Type:
		return 8
	case datatype.IPv6Type:
		return 16
	}
	return 0
}

// addressLen is the exact data length of an Address of an IP family (RFC
// 6733 4.3.1: two octets of family, then the address), 0 for the others.
func addressLen(data []byte) int {
	if len(data) < 2 {
		return 0
	}
	switch binary.BigEndian.Uint16(data) {
	case 1: // IPv4
		return 2 + 4
	case 2: // IPv6
		return 2 + 16
	}
	return 0
}

// checkAVPTree walks the AVPs of b from off (b starts at the message's
// first byte, so offsets are the message's), descending into every AVP that
// d types as Grouped for application app, and returns a FrameError matching
// ErrAVPLength for the first AVP whose length does not fit, one matching
// ErrAVPTooDeep for the first AVP nested deeper than MaxAVPDepth, or nil.
// group is the offset of the Grouped AVP whose data ends b, 0 at the top
// level; depth is that of b's AVPs, 1 at the top level. The recursion is
// at most MaxAVPDepth deep.
func checkAVPTree(b []byte, off, group, depth int, app uint32, d *dict.Parser) error {
	var err error
	pos := off
	stop, reason := walkAVPs(b, off, func(a AVP) bool {
		at := pos
		l := int(uint24(b[at+5 : at+8]))
		hl := l - len(a.Data)
		pos += (l + 3) &^ 3
		if depth > MaxAVPDepth {
			err = &FrameError{
				Reason: fmt.Sprintf("AVP %d (vendor %d) at offset %d, inside AVP %d at offset %d, is nested %d deep, more than %d",
					a.Code, a.Vendor, at, binary.BigEndian.Uint32(b[group:]), group, depth, MaxAVPDepth),
				Err:    ErrAVPTooDeep,
				Failed: &a,
			}
			return false
		}
		da, _ := d.FindAVPWithVendor(app, a.Code, a.Vendor)
		if da == nil || da.Data.Type == datatype.UnknownType {
			return true // go-diameter refuses it, or keeps its bytes as they are
		}
		t := da.Data.Type
		want := fixedLen(t)
		if t == datatype.AddressType {
			want = addressLen(a.Data)
		}
		if want != 0 && len(a.Data) != want {
			err = &FrameError{
				Reason: fmt.Sprintf("AVP %d (vendor %d) at offset %d: %s of %d octets, not %d", a.Code, a.Vendor, at, da.Data.TypeName, len(a.Data), want),
				Err:    ErrAVPLength,
				Failed: &a,
			}
			return false
		}
		if t == datatype.GroupedType {
			err = checkAVPTree(b[:at+l], at+hl, at, depth+1, app, d)
		}
		return err == nil
	})
	if reason != "" {
		where := ""
		if group != 0 {
			where = fmt.Sprintf(" (inside AVP %d at offset %d, which ends at %d)", binary.BigEndian.Uint32(b[group:]), group, len(b))
		}
		return &FrameError{Reason: fmt.Sprintf("%s at offset %d%s", reason, stop, where), Err: ErrAVPLength, Failed: avpAt(b, stop)}
	}
	return err
}

// avpAt returns the AVP whose header starts at off in b, its Data cut to
// what b holds of it, for a Failed-AVP; nil when b does not hold its code,
// flags and length.
func avpAt(b []byte, off int) *AVP {
	if len(b)-off < avpHeaderLen {
		return nil
	}
	a := &AVP{Code: binary.BigEndian.Uint32(b[off:])}
	hl := avpHeaderLen
	if b[off+4]&avpFlagVendor != 0 {
		hl = avpVendorHeaderLen
		if len(b)-off < hl {
			return a
		}
		a.Vendor = binary.BigEndian.Uint32(b[off+8:])
	}
	if end := min(off+int(uint24(b[off+5:off+8])), len(b)); end > off+hl {
		a.Data = b[off+hl : end]
	}
	return a
}

// failedIn returns the AVP go-diameter fails to decode in the AVP whose
// header is at off in msg (an AVP checkAVPTree passed, at the given
// depth): the innermost one, walking into Grouped AVPs to the first child
// that fails on its own, or the AVP at off when none does. Its Data
// aliases msg.
func failedIn(msg []byte, off int, app uint32, d *dict.Parser, depth int) *AVP {
	a := avpAt(msg, off)
	if depth >= MaxAVPDepth {
		return a
	}
	if da, _ := d.FindAVPWithVendor(app, a.Code, a.Vendor); da == nil || da.Data.Type != datatype.GroupedType {
		return a
	}
	end := off + int(uint24(msg[off+5:off+8]))
	pos := end - len(a.Data) // the group's first child
	var bad *AVP
	walkAVPs(msg[:end], pos, func(c AVP) bool {
		at := pos
		l := int(uint24(msg[at+5 : at+8]))
		pos += (l + 3) &^ 3
		if !decodes(msg[at:at+l], app, d) {
			bad = failedIn(msg, at, app, d, depth+1)
			return false
		}
		return true
	})
	if bad != nil {
		return bad
	}
	return a
}

// decodes reports whether go-diameter decodes the AVP b without an error
// or a panic.
func decodes(b []byte, app uint32, d *dict.Parser) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_, err := diam.DecodeAVP(b, app, d)
	return err == nil
}

// misdecoded returns the first AVP of the tree a (a itself or one inside
// it) whose decoded value would not re-encode to its wire length, or nil.
// A Grouped AVP's own length is compared padded: the padding of its last
// AVP may or may not be counted in it.
func misdecoded(a *diam.AVP) *diam.AVP {
	hl := avpHeaderLen
	if a.Flags&avpFlagVendor != 0 {
		hl = avpVendorHeaderLen
	}
	if a.Data == nil {
		return a
	}
	g, ok := a.Data.(*diam.GroupedAVP)
	if !ok {
		if a.Length != hl+a.Data.Len() {
			return a
		}
		return nil
	}
	if (a.Length+3)&^3 != hl+g.Len() {
		return a
	}
	for _, c := range g.AVP {
		if bad := misdecoded(c); bad != nil {
			return bad
		}
	}
	return nil
}
