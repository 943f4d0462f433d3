package wire

import "encoding/binary"

// BadAVP describes the first malformed top-level AVP of a correctly framed
// message: what a receiver needs to answer DIAMETER_INVALID_AVP_LENGTH
// (RFC 6733 7.1.5) with a Failed-AVP rather than close the connection.
type BadAVP struct {
	Offset int    // of the AVP header in the message
	Code   uint32 // 0 when fewer than 4 bytes were left
	Flags  uint8
	Vendor uint32 // 0 unless the V bit is set and the Vendor-ID is present
	Length int    // the AVP Length field, as the peer wrote it
	Reason string
	// Data is what the message holds after the AVP's header, cut at the
	// message's end: the offending value, for a Failed-AVP.
	Data []byte
}

// CheckAVPs walks the top-level AVPs of msg (a whole message whose header
// passed Validate and whose Length is len(msg)) and returns the first
// malformed one, or nil: an AVP header cut by the end of the message, a
// length below the AVP's own header (8 bytes, 12 with the V bit) or
// running past the message. It does not look inside Grouped AVPs (that
// takes a dictionary). It never panics and never allocates on well-formed
// input; BadAVP.Data aliases msg.
func CheckAVPs(msg []byte) *BadAVP {
	if len(msg) < HeaderLen {
		return &BadAVP{Offset: len(msg), Reason: "message shorter than its header"}
	}
	end := min(int(uint24(msg[1:4])), len(msg))
	off, reason := walkAVPs(msg[:end], HeaderLen, func(AVP) bool { return true })
	if reason == "" {
		return nil
	}
	b := &BadAVP{Offset: off, Reason: reason}
	rest := msg[off:end]
	if len(rest) >= 4 {
		b.Code = binary.BigEndian.Uint32(rest)
	}
	if len(rest) >= avpHeaderLen {
		b.Flags = rest[4]
		b.Length = int(uint24(rest[5:8]))
		hl := avpHeaderLen
		if b.Flags&avpFlagVendor != 0 && len(rest) >= avpVendorHeaderLen {
			b.Vendor = binary.BigEndian.Uint32(rest[8:12])
			hl = avpVendorHeaderLen
		}
		b.Data = rest[hl:]
	}
	return b
}
