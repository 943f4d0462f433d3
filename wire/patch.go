package wire

import "encoding/binary"

// The getters and patchers below work on a message in wire format. They
// require len(msg) >= HeaderLen, which holds for anything returned by a
// reader that called Validate (such as transport.Conn.ReadMessage); a
// shorter slice is a programming error and panics with an index out of
// range. They never look past the header, so they are O(1).
//
// The patchers exist for failover (RFC 6733 section 5.5.4, RFC 3539 section
// 3.4.2): a pending request is re-sent on another connection with that
// connection's Hop-by-Hop Identifier and the 'T' flag, keeping its
// End-to-End Identifier, and re-encoding it through go-diameter would cost
// an allocation-heavy round trip for a 5-byte change.

// Length returns the message length from the header.
func Length(msg []byte) uint32 { return uint24(msg[1:4]) }

// Flags returns the command flags.
func Flags(msg []byte) uint8 { return msg[4] }

// IsRequest reports whether the 'R' flag is set.
func IsRequest(msg []byte) bool { return msg[4]&FlagRequest != 0 }

// CommandCode returns the 24-bit command code.
func CommandCode(msg []byte) uint32 { return uint24(msg[5:8]) }

// AppID returns the Application-ID.
func AppID(msg []byte) uint32 { return binary.BigEndian.Uint32(msg[8:12]) }

// HopByHop returns the Hop-by-Hop Identifier.
func HopByHop(msg []byte) uint32 { return binary.BigEndian.Uint32(msg[12:16]) }

// EndToEnd returns the End-to-End Identifier.
func EndToEnd(msg []byte) uint32 { return binary.BigEndian.Uint32(msg[16:20]) }

// SetHopByHop overwrites the Hop-by-Hop Identifier in place.
func SetHopByHop(msg []byte, id uint32) { binary.BigEndian.PutUint32(msg[12:16], id) }

// SetEndToEnd overwrites the End-to-End Identifier in place.
func SetEndToEnd(msg []byte, id uint32) { binary.BigEndian.PutUint32(msg[16:20], id) }

// SetFlags overwrites the command flags in place.
func SetFlags(msg []byte, flags uint8) { msg[4] = flags }

// SetRetransmit sets the 'T' flag in place, marking a request re-sent after
// a failover so the server can run duplicate detection (RFC 3539 3.5).
func SetRetransmit(msg []byte) { msg[4] |= FlagRetransmit }

// ClearRetransmit clears the 'T' flag in place.
func ClearRetransmit(msg []byte) { msg[4] &^= FlagRetransmit }
