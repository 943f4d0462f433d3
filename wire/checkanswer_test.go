package wire

import (
	"encoding/binary"
	"testing"
)

func TestCheckAnswer(t *testing.T) {
	u32 := func(code, vendor, v uint32) []byte {
		flags := uint8(0x40)
		n := uint32(12)
		if vendor != 0 {
			flags |= avpFlagVendor
			n = 16
		}
		return rawAVP(code, flags, vendor, n, binary.BigEndian.AppendUint32(nil, v))
	}
	grouped := func(code uint32, inner ...[]byte) []byte {
		var d []byte
		for _, a := range inner {
			d = append(d, a...)
		}
		return rawAVP(code, 0x40, 0, uint32(8+len(d)), d)
	}
	session := rawAVP(263, 0x40, 0, 12, []byte("abcd"))
	short := rawAVP(avpResultCode, 0x40, 0, 10, []byte{0x07, 0xd1})
	exp := func(v uint32) []byte {
		return grouped(avpExperimentalResult, u32(266, 0, 10415), u32(avpExperimentalResultCode, 0, v))
	}
	tests := []struct {
		name string
		msg  []byte
		code uint32
		bad  bool
	}{
		{"result code", rawMsg(0, 271, 0, session, u32(avpResultCode, 0, 2001)), 2001, false},
		{"experimental result", rawMsg(0, 316, 0, session, exp(5420)), 5420, false},
		{"result code wins", rawMsg(0, 316, 0, exp(5420), u32(avpResultCode, 0, 3002)), 3002, false},
		{"the first result code counts", rawMsg(0, 271, 0, u32(avpResultCode, 0, 2001), u32(avpResultCode, 0, 5012)), 2001, false},
		{"a result code of the wrong length is none", rawMsg(0, 271, 0, short, exp(4001)), 0, false},
		{"a vendor's result code is not the base one", rawMsg(0, 271, 0, u32(avpResultCode, 10415, 2001)), 0, false},
		{"neither", rawMsg(0, 271, 0, session), 0, false},
		{"malformed after the code", rawMsg(0, 271, 0, u32(avpResultCode, 0, 2001), rawAVP(264, 0x40, 0, 4, nil)), 2001, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, bad := CheckAnswer(tt.msg)
			if code != tt.code {
				t.Errorf("code %d, want %d", code, tt.code)
			}
			if (bad != nil) != tt.bad {
				t.Errorf("bad %+v, want bad %v", bad, tt.bad)
			}
			if want := CheckAVPs(tt.msg); (want == nil) != (bad == nil) || want != nil && want.Offset != bad.Offset {
				t.Errorf("bad %+v where CheckAVPs says %+v", bad, want)
			}
		})
	}
}

// answerCodeRef is CheckAnswer's code found the long way: the first
// Result-Code AVP, else the first Experimental-Result's code.
func answerCodeRef(msg []byte) uint32 {
	if d, ok := FindAVP(msg, avpResultCode, 0); ok {
		if len(d) == 4 {
			return binary.BigEndian.Uint32(d)
		}
		return 0
	}
	var code uint32
	WalkAVPs(msg, func(a AVP) bool {
		if a.Code != avpExperimentalResult || a.Vendor != 0 {
			return true
		}
		WalkGrouped(a.Data, func(g AVP) bool {
			if g.Code == avpExperimentalResultCode && g.Vendor == 0 && len(g.Data) == 4 {
				code = binary.BigEndian.Uint32(g.Data)
				return false
			}
			return true
		})
		return false
	})
	return code
}
