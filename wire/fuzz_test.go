package wire

import (
	"errors"
	"testing"

	"github.com/fiorix/go-diameter/v4/diam/dict"
)

// fuzzSeeds are inputs known to break go-diameter v4.0.4's ReadMessage
// (huge allocation, panic) plus well-formed messages to mutate from.
func fuzzSeeds(f *testing.F) {
	oh := rawAVP(264, 0x40, 0, 12, []byte("host"))
	f.Add(newCER(f, "client.example.net"))
	f.Add(rawMsg(FlagRequest, 280, 0, oh))
	f.Add(rawMsg(FlagRequest, 280, 12))                                                        // length below 20
	f.Add(rawMsg(FlagRequest, 280, MaxMessageLen&^3, oh))                                      // length above the maximum
	f.Add(rawMsg(FlagRequest, 280, 0, rawAVP(264, 0xc0, 0, 8, nil)))                           // vendor AVP shorter than 12
	f.Add(rawMsg(FlagRequest, 280, 0, oh, rawAVP(296, 0x40, 0, 0, []byte("realm"))))           // AVP length 0
	f.Add(rawMsg(FlagRequest, 280, 0, rawAVP(264, 0x40, 0, 100, []byte("host"))))              // AVP past the end
	f.Add(rawMsg(FlagRequest, 257, 0, rawAVP(260, 0x40, 0, 16, rawAVP(266, 0x80, 0, 8, nil)))) // short vendor AVP in a group
	f.Add([]byte{})
}

func FuzzParseValidate(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) || len(b) >= HeaderLen {
				t.Fatalf("ParseHeader(%d bytes) = %v", len(b), err)
			}
			return
		}
		// Validate checks the framing only: reserved bits and the E bit of
		// a request are the receiver's to ignore or answer (RFC 6733 3),
		// not reasons to close the connection.
		framed := h.Version == 1 && h.Length >= HeaderLen && h.Length <= DefaultMaxMessageLen && h.Length%4 == 0
		err = Validate(h, DefaultMaxMessageLen)
		switch {
		case err != nil && !errors.Is(err, ErrBadFrame):
			t.Fatalf("Validate error %v does not match ErrBadFrame", err)
		case err == nil && !framed:
			t.Fatalf("Validate accepted %+v", h)
		case err != nil && framed:
			t.Fatalf("Validate refused a well-framed header %+v: %v", h, err)
		}
		// The getters agree with ParseHeader, and FindAVP never panics.
		if CommandCode(b) != h.CommandCode || HopByHop(b) != h.HopByHop || EndToEnd(b) != h.EndToEnd || Flags(b) != h.Flags || Length(b) != h.Length {
			t.Fatalf("getters disagree with ParseHeader %+v", h)
		}
		if d, ok := FindAVP(b, 264, 0); ok && len(d) > len(b) {
			t.Fatalf("FindAVP returned %d bytes from %d", len(d), len(b))
		}
	})
}

func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b, dict.Default)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("Decode error %v does not match ErrBadFrame", err)
			}
			if m != nil {
				t.Fatal("Decode returned a message with an error")
			}
			return
		}
		// A decoded message re-encodes to the length it had on the wire.
		if m.Len() != len(b) {
			t.Fatalf("decoded message re-encodes to %d bytes, wire had %d", m.Len(), len(b))
		}
	})
}
