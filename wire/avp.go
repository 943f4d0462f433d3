package wire

import "encoding/binary"

// AVP header layout (RFC 6733 section 4.1).
const (
	avpHeaderLen       = 8
	avpVendorHeaderLen = 12
	avpFlagVendor      = 0x80 // 'V': a Vendor-ID field follows the header
)

// FindAVP returns the data of the first top-level AVP with the given code
// and vendor (0 for IETF AVPs, which carry no Vendor-ID) in the message
// msg, without decoding the message. It does not descend into Grouped AVPs.
//
// Every length is bounds-checked against the header's Length and len(msg):
// on malformed input FindAVP returns false, never panics. The returned
// slice aliases msg (no copy, no allocation); copy it if msg is reused.
//
// Typical uses: Result-Code (268) in an answer, Session-Id (263),
// Destination-Host (293).
func FindAVP(msg []byte, code uint32, vendor uint32) ([]byte, bool) {
	if len(msg) < HeaderLen {
		return nil, false
	}
	end := int(uint24(msg[1:4]))
	if end > len(msg) {
		return nil, false
	}
	found := false
	var data []byte
	walkAVPs(msg[:end], HeaderLen, func(a AVP) bool {
		if a.Code == code && a.Vendor == vendor {
			data, found = a.Data, true
			return false
		}
		return true
	})
	return data, found
}

// walkAVPs visits the AVPs of b starting at off, calling fn with each AVP
// until fn returns false. It returns the offset where
// it stopped and a reason if it stopped on malformed input ("" otherwise).
// All arithmetic is on int with values bounded by 2^24, so it cannot
// overflow on 64- or 32-bit platforms.
func walkAVPs(b []byte, off int, fn func(a AVP) bool) (int, string) {
	for off < len(b) {
		if len(b)-off < avpHeaderLen {
			return off, "AVP header truncated"
		}
		code := binary.BigEndian.Uint32(b[off : off+4])
		flags := b[off+4]
		l := int(uint24(b[off+5 : off+8]))
		hl := avpHeaderLen
		var vendor uint32
		if flags&avpFlagVendor != 0 {
			hl = avpVendorHeaderLen
		}
		if l < hl {
			return off, "AVP length below its header"
		}
		if l > len(b)-off {
			return off, "AVP length runs past the end of the message"
		}
		if hl == avpVendorHeaderLen {
			vendor = binary.BigEndian.Uint32(b[off+8 : off+12])
		}
		if !fn(AVP{Code: code, Vendor: vendor, Data: b[off+hl : off+l]}) {
			return off, ""
		}
		// Padding to a 4-byte boundary; the last AVP's padding may be
		// cut by the bounds only if the message length itself is not a
		// multiple of 4, which Validate rejects.
		off += (l + 3) &^ 3
	}
	return off, ""
}
