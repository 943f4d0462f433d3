package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/fiorix/go-diameter/v4/diam"
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
//     Decode checks every top-level AVP's bounds before decoding and also
//     recovers any panic from go-diameter, returning it as a FrameError.
//  3. ReadMessage reads bodies of up to MessageBufferLength (1024) bytes
//     into a pooled buffer that goes back to a sync.Pool when it returns,
//     and the []byte-based values (Address, IPv4, IPv6, and Unknown, i.e.
//     every AVP missing from the dictionary) are sub-slices of it: the next
//     ReadMessage in any goroutine overwrites them (string-based types such
//     as OctetString and DiameterIdentity are copied by the conversion). Decode decodes from a fresh copy of msg, so the returned
//     message owns its bytes and shares nothing with msg either.
//  4. Fixed-size types (Unsigned32, Integer64, Time, ...) with a wrong
//     length decode silently as zero, and the walk then advances by the
//     re-computed length instead of the wire length, misreading the rest.
//     Decode advances by the wire length and rejects an AVP whose decoded
//     form does not have its wire length.
//  5. diam.NewMessage replaces a zero Hop-by-Hop or End-to-End Identifier
//     with a random one; Decode sets the header it read verbatim.
//
// Like diam.ReadMessage, Decode fails on a command the dictionary does not
// know. AVPs the dictionary does not know decode as datatype.Unknown.
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
	// Bounds-check all top-level AVPs before go-diameter sees them.
	if off, reason := walkAVPs(msg, HeaderLen, func(AVP) bool { return true }); reason != "" {
		return nil, frameErr("%s at offset %d", reason, off)
	}
	if _, err := d.FindCommand(h.AppID, h.CommandCode); err != nil {
		return nil, &FrameError{Reason: fmt.Sprintf("unknown command %d (application %d)", h.CommandCode, h.AppID), Err: err}
	}

	defer func() {
		// go-diameter's decoders index slices without checks in places
		// (trap 2 and whatever else a fuzzer finds in grouped AVPs); a
		// peer's bytes must never take the process down.
		if r := recover(); r != nil {
			m = nil
			err = &FrameError{Reason: "go-diameter panicked decoding AVPs", Err: fmt.Errorf("%v", r)}
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
		a, err := diam.DecodeAVP(body[off:off+wireLen], h.AppID, d)
		if err != nil {
			return nil, &FrameError{
				Reason: fmt.Sprintf("AVP %d at offset %d", binary.BigEndian.Uint32(body[off:off+4]), HeaderLen+off),
				Err:    err,
			}
		}
		if a.Len() != padded {
			return nil, frameErr("AVP %d (vendor %d) at offset %d: %d bytes on the wire, but its decoded %s value would be %d",
				a.Code, a.VendorID, HeaderLen+off, padded, typeName(a), a.Len())
		}
		m.AVP = append(m.AVP, a)
		off += padded
	}
	return m, nil
}

func typeName(a *diam.AVP) string {
	if a.Data == nil {
		return "nil"
	}
	return fmt.Sprintf("%T", a.Data)
}
