package main

import (
	"encoding/binary"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// successAnswer is the DIAMETER_SUCCESS answer to req: the header of
// message.NewAnswer, Session-Id copied, Result-Code 2001, our Origin-Host
// and Origin-Realm, then an echo of each of the Unsigned32 AVPs echo names
// (code and vendor) that req carries, in that order. It is the bytes
// message.Builder would produce, in one walk over req and one allocation
// of the answer's exact size: the first AVP of a code counts, as with
// wire.FindAVP, and an echoed AVP must hold 4 octets, as with
// message.Uint32Of.
func (s *server) successAnswer(req []byte, echo ...avpID) []byte {
	const maxEcho = 2
	var (
		sid      []byte
		hasSID   bool
		vals     [maxEcho]uint32
		seen, ok [maxEcho]bool
		left     = 1 + len(echo)
	)
	_ = wire.WalkAVPs(req, func(a wire.AVP) bool { // a malformed AVP ends the walk, as it ends FindAVP's
		if a.Code == message.SessionID && a.Vendor == 0 {
			if !hasSID {
				sid, hasSID = a.Data, true
				left--
			}
			return left > 0
		}
		for i, id := range echo {
			if a.Code == id.code && a.Vendor == id.vendor && !seen[i] {
				seen[i] = true
				left--
				if len(a.Data) == 4 {
					vals[i], ok[i] = binary.BigEndian.Uint32(a.Data), true
				}
			}
		}
		return left > 0
	})
	n := wire.HeaderLen + 12 + avpLen(0, len(s.o.originHost)) + avpLen(0, len(s.o.originRealm))
	if hasSID {
		n += avpLen(0, len(sid))
	}
	for i, id := range echo {
		if ok[i] {
			n += avpLen(id.vendor, 4)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, wire.Version, byte(n>>16), byte(n>>8), byte(n), wire.Flags(req)&wire.FlagProxiable)
	b = append(b, req[5:8]...) // the command code
	b = binary.BigEndian.AppendUint32(b, wire.AppID(req))
	b = binary.BigEndian.AppendUint32(b, wire.HopByHop(req))
	b = binary.BigEndian.AppendUint32(b, wire.EndToEnd(req))
	if hasSID {
		b = appendAVP(b, message.SessionID, 0, sid)
	}
	b = appendAVPHeader(b, message.ResultCode, 0, 4)
	b = binary.BigEndian.AppendUint32(b, message.Success)
	b = appendAVP(b, message.OriginHost, 0, s.o.originHost)
	b = appendAVP(b, message.OriginRealm, 0, s.o.originRealm)
	for i, id := range echo {
		if ok[i] {
			b = appendAVPHeader(b, id.code, id.vendor, 4)
			b = binary.BigEndian.AppendUint32(b, vals[i])
		}
	}
	return b
}

// avpID is an AVP's code and vendor.
type avpID struct{ code, vendor uint32 }

// avpLen is the size of a mandatory AVP of dataLen octets, padding
// included.
func avpLen(vendor uint32, dataLen int) int {
	hl := 8
	if vendor != 0 {
		hl = 12
	}
	return hl + (dataLen+3)&^3
}

// appendAVPHeader appends the header of a mandatory AVP (M bit; V bit
// with a vendor).
func appendAVPHeader(b []byte, code, vendor uint32, dataLen int) []byte {
	flags, hl := byte(0x40), 8
	if vendor != 0 {
		flags, hl = 0xc0, 12
	}
	l := hl + dataLen
	b = binary.BigEndian.AppendUint32(b, code)
	b = append(b, flags, byte(l>>16), byte(l>>8), byte(l))
	if vendor != 0 {
		b = binary.BigEndian.AppendUint32(b, vendor)
	}
	return b
}

// appendAVP appends a mandatory AVP holding data, padded to 4 octets.
func appendAVP[T string | []byte](b []byte, code, vendor uint32, data T) []byte {
	b = appendAVPHeader(b, code, vendor, len(data))
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
