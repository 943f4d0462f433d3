package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// refAVP is one AVP as refAVPs reads it.
type refAVP struct {
	code, vendor uint32
	data         []byte
}

// refAVPs is a reference reading of msg's top-level AVPs, written apart
// from wire's walker: the AVPs before the first malformed one, and whether
// one ended the list.
func refAVPs(msg []byte) (avps []refAVP, malformed bool) {
	if len(msg) < HeaderLen {
		return nil, true
	}
	end := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
	if end > len(msg) {
		return nil, true
	}
	return refGroup(msg[min(HeaderLen, end):end])
}

// refGroup is refAVPs over the data of a Grouped AVP.
func refGroup(rest []byte) (avps []refAVP, malformed bool) {
	for len(rest) > 0 {
		if len(rest) < 8 {
			return avps, true
		}
		l := int(rest[5])<<16 | int(rest[6])<<8 | int(rest[7])
		hl := 8
		if rest[4]&0x80 != 0 {
			hl = 12
		}
		if l < hl || l > len(rest) {
			return avps, true
		}
		a := refAVP{code: binary.BigEndian.Uint32(rest), data: rest[hl:l]}
		if hl == 12 {
			a.vendor = binary.BigEndian.Uint32(rest[8:])
		}
		avps = append(avps, a)
		rest = rest[min(len(rest), (l+3)&^3):]
	}
	return avps, false
}

// WalkAVPs and FindAVP read what the reference reads, on any bytes: the
// same AVPs in order, an error exactly when it finds a malformed AVP, the
// first AVP of each code; FindAVPs finds what FindAVP finds.
func FuzzWalkAVPs(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, msg []byte) {
		want, malformed := refAVPs(msg)
		n := 0
		err := WalkAVPs(msg, func(a AVP) bool {
			if n >= len(want) || a.Code != want[n].code || a.Vendor != want[n].vendor || !bytes.Equal(a.Data, want[n].data) {
				t.Fatalf("WalkAVPs AVP %d differs from the reference", n)
			}
			n++
			return true
		})
		if n != len(want) || (err != nil) != malformed {
			t.Fatalf("WalkAVPs read %d AVPs, error %v; reference %d, malformed %v", n, err, len(want), malformed)
		}
		for i, a := range want {
			first := true
			for _, b := range want[:i] {
				first = first && (b.code != a.code || b.vendor != a.vendor)
			}
			if d, ok := FindAVP(msg, a.code, a.vendor); first && (!ok || !bytes.Equal(d, a.data)) {
				t.Fatalf("FindAVP(%d, %d) = %q, %v; want %q", a.code, a.vendor, d, ok, a.data)
			}
		}
		codes := []uint32{1, 263, 293}
		for _, a := range want {
			if a.vendor == 0 && !slices.Contains(codes, a.code) && len(codes) < 5 {
				codes = append(codes, a.code)
			}
		}
		data := make([][]byte, len(codes))
		found := FindAVPs(msg, codes, data)
		for i, c := range codes {
			d, ok := FindAVP(msg, c, 0)
			if ok != (found&(1<<i) != 0) || ok && !bytes.Equal(d, data[i]) {
				t.Fatalf("FindAVPs found %v, %q for %d where FindAVP finds %v, %q", found&(1<<i) != 0, data[i], c, ok, d)
			}
		}
	})
}

// WalkGrouped reads what the reference reads on any bytes: the same AVPs
// in order, an error exactly when it finds a malformed AVP, and it stops
// when told to.
func FuzzWalkGrouped(f *testing.F) {
	f.Add(rawAVP(266, 0x40, 0, 12, []byte{0, 0, 0, 10}), 5)
	f.Add(append(rawAVP(266, 0x40, 0, 12, []byte{0, 0, 0, 10}), rawAVP(258, 0xc0, 10415, 16, []byte{0, 0, 0, 4})...), 1)
	f.Add(append(rawAVP(266, 0x40, 0, 16, []byte{0, 0, 0, 10, 0, 0, 1, 2}), 0x40, 0, 0, 12, 0, 0, 0, 5), 5)
	f.Add(rawAVP(266, 0x80, 0, 8, nil), 5)
	f.Add(rawAVP(263, 0x40, 0, 9, []byte("x"))[:9], 5)
	f.Add([]byte{0, 0, 1, 10}, 5)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, data []byte, stopAfter int) {
		want, malformed := refGroup(data)
		n := 0
		err := WalkGrouped(data, func(a AVP) bool {
			if n >= len(want) || a.Code != want[n].code || a.Vendor != want[n].vendor || !bytes.Equal(a.Data, want[n].data) {
				t.Fatalf("WalkGrouped AVP %d differs from the reference", n)
			}
			n++
			return n != stopAfter
		})
		if stopAfter > 0 && stopAfter <= len(want) {
			if n != stopAfter || err != nil {
				t.Fatalf("told to stop after %d AVPs, WalkGrouped read %d, error %v", stopAfter, n, err)
			}
			return
		}
		if n != len(want) || (err != nil) != malformed {
			t.Fatalf("WalkGrouped read %d AVPs, error %v; reference %d, malformed %v", n, err, len(want), malformed)
		}
		if err != nil && !errors.Is(err, ErrBadFrame) {
			t.Fatalf("WalkGrouped error %v does not match ErrBadFrame", err)
		}
	})
}
