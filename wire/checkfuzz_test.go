package wire

import "testing"

// FuzzCheckAVPs: on any message whose header passed Validate, CheckAVPs
// never panics; a message it passes walks to its end without error, and a
// BadAVP points inside the message. CheckAnswer finds the same BadAVP and,
// on a message that passes, the code the long way finds.
func FuzzCheckAVPs(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := ParseHeader(b); err != nil || Validate(h, DefaultMaxMessageLen) != nil || int(h.Length) != len(b) {
			return // the frame reader refuses it before
		}
		bad := CheckAVPs(b)
		code, abad := CheckAnswer(b)
		if (abad == nil) != (bad == nil) || bad != nil && (abad.Offset != bad.Offset || abad.Reason != bad.Reason) {
			t.Fatalf("CheckAnswer found %+v where CheckAVPs found %+v", abad, bad)
		}
		if bad == nil && code != answerCodeRef(b) {
			t.Fatalf("CheckAnswer read code %d, the long way %d", code, answerCodeRef(b))
		}
		if bad == nil {
			if len(b) < HeaderLen {
				t.Fatalf("passed %d bytes", len(b))
			}
			if err := WalkAVPs(b[:min(int(uint24(b[1:4])), len(b))], func(AVP) bool { return true }); err != nil {
				t.Fatalf("passed a message WalkAVPs refuses: %v", err)
			}
			return
		}
		if bad.Reason == "" || bad.Offset < 0 || bad.Offset > len(b) || len(bad.Data) > len(b) {
			t.Fatalf("BadAVP %+v for %d bytes", bad, len(b))
		}
	})
}
