package radius

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

func fuzzSeeds(f *testing.F) {
	a, _, _ := EncodeRequest(accessRequest(), 1, secret)
	b, _, _ := EncodeRequest(accountingRequest(), 2, secret)
	f.Add(a)
	f.Add(append(bytes.Clone(a), b...))
	f.Add(a[:25])
	bad := bytes.Clone(b)
	bad[HeaderLen+1] = 0
	f.Add(bad)
	huge := bytes.Clone(a)
	huge[2], huge[3] = 0xff, 0xff
	f.Add(huge)
	f.Add([]byte{})
}

func FuzzReadFrame(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			p, err := ReadFrame(r)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrBadFrame) {
					t.Fatalf("ReadFrame error %v", err)
				}
				return
			}
			if err := Validate(p); err != nil {
				t.Fatalf("ReadFrame returned a packet Validate rejects: %v", err)
			}
		}
	})
}

func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b, secret)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("Decode error %v does not match ErrBadFrame", err)
			}
			return
		}
		// Nothing a peer sends makes the checks or the answer builder panic.
		_ = VerifyRequest(b, secret, true)
		_ = VerifyResponse(b, Authenticator(b), secret, true)
		Attr(b, AttrProxyState)
		if IsRequest(Code(b)) {
			if ans, err := EncodeResponse(b, Code(b)+1, nil, secret); err == nil {
				if err := Validate(ans); err != nil {
					t.Fatalf("EncodeResponse built a bad frame: %v", err)
				}
			}
		}
		if len(p.Attributes) > len(b) {
			t.Fatal("more attributes than bytes")
		}
	})
}
