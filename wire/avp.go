// The AVPs of a message: walking them, finding one, checking them all,
// in one pass each, without decoding the message.

package wire

import (
	"encoding/binary"
	"fmt"
)

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

// FindAVPs is FindAVP for several IETF AVPs (vendor 0) in one walk: for
// each codes[i] (at most 32) found, data[i] is the data of its first AVP
// and bit i of found is set. The walk ends once every code is found, or
// at a malformed AVP (what it found before is returned). data must be as
// long as codes; its slices alias msg.
func FindAVPs(msg []byte, codes []uint32, data [][]byte) (found uint32) {
	if len(msg) < HeaderLen || len(codes) > 32 {
		return 0
	}
	end := int(uint24(msg[1:4]))
	if end > len(msg) {
		return 0
	}
	all := uint32(1)<<len(codes) - 1
	walkAVPs(msg[:end], HeaderLen, func(a AVP) bool {
		if a.Vendor != 0 {
			return true
		}
		for i, c := range codes {
			if c == a.Code && found&(1<<i) == 0 {
				found |= 1 << i
				data[i] = a.Data
				break
			}
		}
		return found != all
	})
	return found
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

// AVP is one AVP as WalkAVPs sees it. Data aliases the message.
type AVP struct {
	Code   uint32
	Vendor uint32 // 0 for IETF AVPs (no V bit)
	Data   []byte
}

// WalkAVPs calls fn for each top-level AVP of msg (a whole message, header
// included), or, with grouped set, for each AVP inside the Grouped AVP data
// b. It stops early when fn returns false. Malformed AVPs end the walk with
// an error matching ErrBadFrame; it never panics and never allocates on
// well-formed input.
func WalkAVPs(msg []byte, fn func(a AVP) bool) error {
	if len(msg) < HeaderLen {
		return frameErr("message of %d bytes is shorter than the header", len(msg))
	}
	end := int(uint24(msg[1:4]))
	if end > len(msg) {
		return frameErr("header length %d exceeds the %d bytes present", end, len(msg))
	}
	return walkChecked(msg[:end], HeaderLen, fn)
}

// WalkGrouped is WalkAVPs over the data of a Grouped AVP.
func WalkGrouped(data []byte, fn func(a AVP) bool) error {
	return walkChecked(data, 0, fn)
}

func walkChecked(b []byte, off int, fn func(a AVP) bool) error {
	_, reason := walkAVPs(b, off, fn)
	if reason != "" {
		return &FrameError{Reason: fmt.Sprintf("malformed AVP: %s", reason)}
	}
	return nil
}

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
	return checkAVPs(msg, func(AVP) {})
}

// The AVPs that say how a request went (RFC 6733 7.1, 7.6).
const (
	avpResultCode             = 268
	avpExperimentalResult     = 297
	avpExperimentalResultCode = 298
)

// CheckAnswer is CheckAVPs for an answer, reading in the same walk the
// code that says how its request went: its Result-Code, or, when it has
// none, the Experimental-Result-Code inside its Experimental-Result
// (RFC 6733 7.6); 0 when it has neither. As with message.ResultCodeOf,
// the first of each AVP counts, and only with a 4-byte value.
func CheckAnswer(msg []byte) (code uint32, bad *BadAVP) {
	var rc, exp uint32
	var seenRC, seenExp bool
	bad = checkAVPs(msg, func(a AVP) {
		switch {
		case a.Vendor != 0:
		case a.Code == avpResultCode && !seenRC:
			seenRC = true
			if len(a.Data) == 4 {
				rc = binary.BigEndian.Uint32(a.Data)
			}
		case a.Code == avpExperimentalResult && !seenExp:
			seenExp = true
			walkAVPs(a.Data, 0, func(g AVP) bool {
				if g.Code == avpExperimentalResultCode && g.Vendor == 0 && len(g.Data) == 4 {
					exp = binary.BigEndian.Uint32(g.Data)
					return false
				}
				return true
			})
		}
	})
	if seenRC {
		return rc, bad
	}
	return exp, bad
}

// checkAVPs is CheckAVPs calling visit with each well-formed AVP.
func checkAVPs(msg []byte, visit func(AVP)) *BadAVP {
	if len(msg) < HeaderLen {
		return &BadAVP{Offset: len(msg), Reason: "message shorter than its header"}
	}
	end := min(int(uint24(msg[1:4])), len(msg))
	off, reason := walkAVPs(msg[:end], HeaderLen, func(a AVP) bool { visit(a); return true })
	if reason == "" {
		return nil
	}
	return badAVP(msg[:end], off, reason)
}

// CheckGrouped is CheckAVPs for the data of a Grouped AVP: it returns the
// first malformed AVP inside it, or nil. BadAVP.Offset is from the start
// of data, and BadAVP.Data aliases data.
func CheckGrouped(data []byte) *BadAVP {
	off, reason := walkAVPs(data, 0, func(AVP) bool { return true })
	if reason == "" {
		return nil
	}
	return badAVP(data, off, reason)
}

// badAVP describes the malformed AVP whose header starts at off in b.
func badAVP(b []byte, off int, reason string) *BadAVP {
	bad := &BadAVP{Offset: off, Reason: reason}
	rest := b[off:]
	if len(rest) >= 4 {
		bad.Code = binary.BigEndian.Uint32(rest)
	}
	if len(rest) >= avpHeaderLen {
		bad.Flags = rest[4]
		bad.Length = int(uint24(rest[5:8]))
		hl := avpHeaderLen
		if bad.Flags&avpFlagVendor != 0 && len(rest) >= avpVendorHeaderLen {
			bad.Vendor = binary.BigEndian.Uint32(rest[8:12])
			hl = avpVendorHeaderLen
		}
		bad.Data = rest[hl:]
	}
	return bad
}
