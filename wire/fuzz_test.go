package wire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/datatype"
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

// decodeSeeds are fuzzSeeds plus the AVP lengths and nestings Decode
// once let through: fixed-size AVPs a few octets short, an ill-sized AVP
// inside a group, and chains of Grouped AVPs just past MaxAVPDepth and
// filling 64 KiB (which a fuzzer would not build by itself).
func decodeSeeds(f *testing.F) {
	fuzzSeeds(f)
	oh := rawAVP(264, 0x40, 0, 12, []byte("host"))
	or := rawAVP(296, 0x40, 0, 13, []byte("realm"))
	f.Add(rawMsg(0, 280, 0, rawAVP(268, 0x40, 0, 10, []byte{0x07, 0xd1}), oh, or))          // Result-Code of 2 octets
	f.Add(rawMsg(FlagRequest, 280, 0, oh, rawAVP(287, 0x40, 0, 13, []byte{1, 2, 3, 4, 5}))) // Unsigned64 of 5 octets
	misread := append(rawAVP(266, 0x40, 0, 16, []byte{0, 0, 0, 10, 0, 0, 1, 2}), 0x40, 0, 0, 12, 0, 0, 0, 5)
	f.Add(rawMsg(FlagRequest, 257, 0, oh, or, rawAVP(260, 0x40, 0, uint32(8+len(misread)), misread)))
	f.Add(rawMsg(FlagRequest, 280, 0, oh, or, failedChain(MaxAVPDepth)))
	f.Add(rawMsg(FlagRequest, 280, 0, oh, or, failedChain(MaxAVPDepth+1)))
	f.Add(rawMsg(FlagRequest, 280, 0, oh, or, failedChain((DefaultMaxMessageLen-100)/8)))
}

// FuzzDecode: Decode never panics, its errors are FrameErrors, and what it
// accepts is what the wire holds, read by a walker of its own: the same
// AVPs in the same order and nesting (no deeper than MaxAVPDepth), each
// value the exact length of its data on the wire and, but for the types
// go-diameter normalizes (Time, Address), re-encoding to those bytes.
func FuzzDecode(f *testing.F) {
	decodeSeeds(f)
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
		want, malformed := refAVPs(b)
		if malformed {
			t.Fatal("Decode accepted a message the reference walker finds malformed")
		}
		sameAsWire(t, m.AVP, want, 1)
		// A decoded message re-encodes to the length it had on the wire.
		if m.Len() != len(b) {
			t.Fatalf("decoded message re-encodes to %d bytes, wire had %d", m.Len(), len(b))
		}
	})
}

// sameAsWire fails t unless the decoded AVPs got are the wire's AVPs want,
// at the given depth, recursively into Grouped AVPs.
func sameAsWire(t *testing.T, got []*diam.AVP, want []refAVP, depth int) {
	t.Helper()
	if depth > MaxAVPDepth && len(got) > 0 {
		t.Fatalf("accepted AVPs nested %d deep", depth)
	}
	if len(got) != len(want) {
		t.Fatalf("decoded %d AVPs at depth %d, the wire holds %d", len(got), depth, len(want))
	}
	for i, a := range got {
		w := want[i]
		if a.Code != w.code || a.VendorID != w.vendor {
			t.Fatalf("decoded AVP %d (vendor %d) where the wire holds %d (vendor %d)", a.Code, a.VendorID, w.code, w.vendor)
		}
		switch v := a.Data.(type) {
		case *diam.GroupedAVP:
			inner, malformed := refGroup(w.data)
			if malformed {
				t.Fatalf("accepted Grouped AVP %d whose AVPs the reference finds malformed", a.Code)
			}
			sameAsWire(t, v.AVP, inner, depth+1)
		case datatype.Time, *datatype.Time, datatype.Address:
			if v.Len() != len(w.data) {
				t.Fatalf("accepted AVP %d of %d octets as %T of %d", a.Code, len(w.data), v, v.Len())
			}
		default:
			if v.Len() != len(w.data) || !bytes.Equal(v.Serialize(), w.data) {
				t.Fatalf("accepted AVP %d with %d octets %x as %T %v", a.Code, len(w.data), w.data, v, v)
			}
		}
	}
}
