package dedup

import (
	"encoding/binary"
	"errors"
)

// HeaderLen is the length of the Diameter header (RFC 6733 3).
const HeaderLen = 20

// ErrShortMessage is returned for a message shorter than the Diameter header.
var ErrShortMessage = errors.New("dedup: message shorter than the 20-byte Diameter header")

// HopByHop returns the Hop-by-Hop Identifier of a Diameter message
// (header bytes 12..16).
func HopByHop(msg []byte) (uint32, error) {
	if len(msg) < HeaderLen {
		return 0, ErrShortMessage
	}
	return binary.BigEndian.Uint32(msg[12:16]), nil
}

// EndToEnd returns the End-to-End Identifier of a Diameter message
// (header bytes 16..20).
func EndToEnd(msg []byte) (uint32, error) {
	if len(msg) < HeaderLen {
		return 0, ErrShortMessage
	}
	return binary.BigEndian.Uint32(msg[16:20]), nil
}

// SetHopByHop writes hopByHop into the header of the Diameter message msg,
// in place. A replayed answer must carry the Hop-by-Hop Identifier of the
// duplicate request it answers (that request may have come over another
// connection or agent); the End-to-End Identifier is the same in both and
// stays as stored:
//
//	ans := o.Answer() // a fresh copy, safe to modify
//	hbh, _ := dedup.HopByHop(request)
//	_ = dedup.SetHopByHop(ans, hbh)
func SetHopByHop(msg []byte, hopByHop uint32) error {
	if len(msg) < HeaderLen {
		return ErrShortMessage
	}
	binary.BigEndian.PutUint32(msg[12:16], hopByHop)
	return nil
}
