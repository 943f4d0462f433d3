package wire

import "fmt"

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
