package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderLen is the length of the fixed Diameter header (RFC 6733 section 3).
const HeaderLen = 20

// Version is the only Diameter version defined (RFC 6733 section 3).
const Version = 1

// Command flags, the fifth byte of the header (RFC 6733 section 3).
const (
	FlagRequest    uint8 = 0x80 // 'R': the message is a request
	FlagProxiable  uint8 = 0x40 // 'P': the message may be proxied or relayed
	FlagError      uint8 = 0x20 // 'E': the answer carries a protocol error
	FlagRetransmit uint8 = 0x10 // 'T': the request may be a retransmission (failover)

	// flagsReserved are the four low bits: RFC 6733 section 3 says they
	// must be zero on send and ignored on receive.
	flagsReserved uint8 = 0x0f
)

const (
	// DefaultMaxMessageLen is the default upper bound on a message's length
	// (64 KiB). Diameter's 24-bit length allows 16 MiB; a peer can claim
	// that in 20 bytes, so a reader must bound it before allocating.
	DefaultMaxMessageLen = 64 << 10

	// MaxMessageLen is the largest length the 24-bit length field can hold.
	MaxMessageLen = 1<<24 - 1
)

// Base protocol command codes (RFC 6733 section 3.1).
const (
	CmdCapabilitiesExchange = 257 // CER/CEA
	CmdDeviceWatchdog       = 280 // DWR/DWA
	CmdDisconnectPeer       = 282 // DPR/DPA
)

// ErrBadFrame is matched (with errors.Is) by every *FrameError: the bytes
// are not a well-formed Diameter message.
var ErrBadFrame = errors.New("wire: bad Diameter frame")

// FrameError describes why bytes are not an acceptable Diameter message.
// errors.Is(err, ErrBadFrame) is true for every FrameError, and errors.Is /
// errors.As also reach Err, the underlying cause, when there is one.
type FrameError struct {
	// Reason is a short human-readable explanation meant for logs, e.g.
	// "length 12 below the 20-byte header".
	Reason string
	// Err is the underlying error, if any (for example go-diameter's AVP
	// decoding error, or a recovered panic).
	Err error
	// Failed is the offending AVP of an error about one AVP (one matching
	// ErrAVPLength or ErrAVPTooDeep, or a value go-diameter refuses), for
	// the Failed-AVP of the answer (RFC 6733 7.1.5): its Data is what the
	// message holds of it (empty when its header is all there is),
	// aliasing the message; nil otherwise.
	Failed *AVP
}

func (e *FrameError) Error() string {
	if e.Err != nil {
		return "wire: bad Diameter frame: " + e.Reason + ": " + e.Err.Error()
	}
	return "wire: bad Diameter frame: " + e.Reason
}

// Is reports whether target is ErrBadFrame.
func (e *FrameError) Is(target error) bool { return target == ErrBadFrame }

// Unwrap returns the underlying cause, if any.
func (e *FrameError) Unwrap() error { return e.Err }

func frameErr(format string, args ...any) *FrameError {
	return &FrameError{Reason: fmt.Sprintf(format, args...)}
}

// Header is the decoded fixed header of a Diameter message.
type Header struct {
	Version     uint8
	Length      uint32 // 24 bits on the wire: header plus AVPs, in bytes
	Flags       uint8
	CommandCode uint32 // 24 bits on the wire
	AppID       uint32
	HopByHop    uint32
	EndToEnd    uint32
}

// IsRequest reports whether the 'R' flag is set.
func (h Header) IsRequest() bool { return h.Flags&FlagRequest != 0 }

// IsProxiable reports whether the 'P' flag is set.
func (h Header) IsProxiable() bool { return h.Flags&FlagProxiable != 0 }

// IsError reports whether the 'E' flag is set.
func (h Header) IsError() bool { return h.Flags&FlagError != 0 }

// IsRetransmit reports whether the 'T' flag is set.
func (h Header) IsRetransmit() bool { return h.Flags&FlagRetransmit != 0 }

// ParseHeader decodes the first HeaderLen bytes of b. It only fails when b
// is shorter than HeaderLen; it does not check the values: call Validate
// before trusting Length.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, frameErr("%d bytes, too short for the %d-byte header", len(b), HeaderLen)
	}
	return Header{
		Version:     b[0],
		Length:      uint24(b[1:4]),
		Flags:       b[4],
		CommandCode: uint24(b[5:8]),
		AppID:       binary.BigEndian.Uint32(b[8:12]),
		HopByHop:    binary.BigEndian.Uint32(b[12:16]),
		EndToEnd:    binary.BigEndian.Uint32(b[16:20]),
	}, nil
}

// Validate checks a header before its Length is trusted: version 1,
// HeaderLen <= Length <= maxLen, and Length a multiple of 4 (RFC 6733
// section 3: AVPs are padded so the message length always is). These are
// framing errors: the stream cannot be trusted past them. The flags are not
// checked: reserved bits are ignored on receipt (RFC 6733 section 3), and a
// request with the 'E' bit is a well-framed message that deserves an
// answer (DIAMETER_INVALID_HDR_BITS), not a closed connection.
//
// maxLen 0 means DefaultMaxMessageLen. The returned error is a *FrameError.
func Validate(h Header, maxLen uint32) error {
	if maxLen == 0 {
		maxLen = DefaultMaxMessageLen
	}
	switch {
	case h.Version != Version:
		return frameErr("version %d, want %d", h.Version, Version)
	case h.Length < HeaderLen:
		return frameErr("length %d below the %d-byte header", h.Length, HeaderLen)
	case h.Length > maxLen:
		return frameErr("length %d above the maximum %d", h.Length, maxLen)
	case h.Length%4 != 0:
		return frameErr("length %d not a multiple of 4", h.Length)
	}
	return nil
}

func uint24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}
