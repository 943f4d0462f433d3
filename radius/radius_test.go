package radius

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	lradius "layeh.com/radius"
)

var secret = []byte("testing123")

func str(t lradius.Type, s string) *lradius.AVP { return &lradius.AVP{Type: t, Attribute: []byte(s)} }

func accessRequest() *Request {
	return &Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{
		str(AttrUserName, "alice@example.net"), str(AttrUserPassword, "s3cret-pw"),
	}}
}

func accountingRequest() *Request {
	return &Request{Code: lradius.CodeAccountingRequest, Attributes: lradius.Attributes{
		str(AttrAcctSessionID, "sess-1"), {Type: AttrAcctStatusType, Attribute: lradius.NewInteger(1)},
	}}
}

func mustEncode(t *testing.T, r *Request, id byte) ([]byte, [16]byte) {
	t.Helper()
	b, auth, err := EncodeRequest(r, id, secret)
	if err != nil {
		t.Fatal(err)
	}
	return b, auth
}

func TestValidate(t *testing.T) {
	good, _ := mustEncode(t, accessRequest(), 7)
	if err := Validate(good); err != nil {
		t.Fatalf("Validate(good) = %v", err)
	}
	set := func(b []byte, f func([]byte)) []byte { c := bytes.Clone(b); f(c); return c }
	cases := map[string][]byte{
		"short":           good[:19],
		"length below 20": set(good, func(b []byte) { b[2], b[3] = 0, 19 }),
		"length too big":  set(good, func(b []byte) { b[2], b[3] = 0x10, 0x01 }),
		"length != bytes": good[:len(good)-1],
		"attr length 0":   set(good, func(b []byte) { b[HeaderLen+1] = 0 }),
		"attr length 1":   set(good, func(b []byte) { b[HeaderLen+1] = 1 }),
		"attr past end":   set(good, func(b []byte) { b[HeaderLen+1] = 250 }),
		"attr truncated":  append(set(good, func(b []byte) { b[3]++ }), 1),
	}
	for name, b := range cases {
		if err := Validate(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: Validate = %v, want ErrBadFrame", name, err)
		}
	}
}

func TestReadFrame(t *testing.T) {
	a, _ := mustEncode(t, accessRequest(), 1)
	b, _ := mustEncode(t, accountingRequest(), 2)
	r := bufio.NewReader(bytes.NewReader(append(bytes.Clone(a), b...)))
	for i, want := range [][]byte{a, b} {
		got, err := ReadFrame(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %x, %v", i, got, err)
		}
	}
	if _, err := ReadFrame(r); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(a[:30]))); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated: %v, want io.ErrUnexpectedEOF", err)
	}
	huge := bytes.Clone(a)
	huge[2], huge[3] = 0xff, 0xff
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(huge))); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("Length 65535: %v, want ErrBadFrame", err)
	}
	bad := bytes.Clone(a)
	bad[HeaderLen+1] = 0
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(bad))); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("attribute length 0: %v, want ErrBadFrame", err)
	}
}

func TestAccessRequestSigned(t *testing.T) {
	b, auth := mustEncode(t, accessRequest(), 9)
	if b[0] != byte(lradius.CodeAccessRequest) || b[1] != 9 || Authenticator(b) != auth {
		t.Fatalf("header %x, auth %x", b[:HeaderLen], auth)
	}
	if b[HeaderLen] != byte(AttrMessageAuthenticator) {
		t.Fatalf("first attribute is %d, want Message-Authenticator first", b[HeaderLen])
	}
	if err := VerifyRequest(b, secret, true); err != nil {
		t.Fatalf("VerifyRequest = %v", err)
	}
	if err := VerifyRequest(b, []byte("other"), false); !errors.Is(err, ErrAuthenticator) {
		t.Fatalf("wrong secret: %v, want ErrAuthenticator", err)
	}
	// The password is hidden with this send's authenticator and secret.
	p, err := Decode(b, secret)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := lradius.UserPassword(p.Get(AttrUserPassword), secret, auth[:])
	if err != nil || string(pw) != "s3cret-pw" {
		t.Fatalf("User-Password decrypts to %q, %v", pw, err)
	}
	// Two sends of one Request have different authenticators.
	_, auth2 := mustEncode(t, accessRequest(), 9)
	if auth2 == auth {
		t.Fatal("two Access-Requests got the same authenticator")
	}
	// Any flipped byte after the header breaks the Message-Authenticator.
	for i := HeaderLen + 18; i < len(b); i++ {
		c := bytes.Clone(b)
		c[i] ^= 1
		if err := VerifyRequest(c, secret, false); !errors.Is(err, ErrAuthenticator) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
}

func TestAccessRequestWithoutMA(t *testing.T) {
	p := lradius.New(lradius.CodeAccessRequest, secret)
	p.Add(AttrUserName, []byte("bob"))
	b, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyRequest(b, secret, false); err != nil {
		t.Fatalf("not required: %v", err)
	}
	if err := VerifyRequest(b, secret, true); !errors.Is(err, ErrNoMessageAuthenticator) {
		t.Fatalf("required: %v, want ErrNoMessageAuthenticator", err)
	}
	p.Code = lradius.CodeStatusServer
	b, _ = p.Encode()
	if err := VerifyRequest(b, secret, false); !errors.Is(err, ErrNoMessageAuthenticator) {
		t.Fatalf("Status-Server without Message-Authenticator: %v", err)
	}
}

func TestAccountingRequestAuthenticator(t *testing.T) {
	for _, code := range []lradius.Code{lradius.CodeAccountingRequest, lradius.CodeCoARequest, lradius.CodeDisconnectRequest} {
		r := accountingRequest()
		r.Code = code
		b, _ := mustEncode(t, r, 3)
		if !lradius.IsAuthenticRequest(b, secret) {
			t.Fatalf("%s: layeh.com/radius does not accept our Request Authenticator", code)
		}
		if err := VerifyRequest(b, secret, false); err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		b[len(b)-1] ^= 1
		if err := VerifyRequest(b, secret, false); !errors.Is(err, ErrAuthenticator) {
			t.Fatalf("%s tampered: %v", code, err)
		}
	}
	// With a Message-Authenticator as well (computed with a zero
	// authenticator, RFC 5176 3.3).
	r := accountingRequest()
	r.Attributes = append(r.Attributes, &lradius.AVP{Type: AttrMessageAuthenticator})
	b, _ := mustEncode(t, r, 4)
	if !lradius.IsAuthenticRequest(b, secret) {
		t.Fatal("layeh.com/radius rejects the accounting request with a Message-Authenticator")
	}
	if err := VerifyRequest(b, secret, false); err != nil {
		t.Fatal(err)
	}
}

func TestResign(t *testing.T) {
	for _, r := range []*Request{accessRequest(), accountingRequest()} {
		b, auth := mustEncode(t, r, 1)
		na, err := Resign(b, 200, secret)
		if err != nil {
			t.Fatal(err)
		}
		if b[1] != 200 || VerifyRequest(b, secret, false) != nil {
			t.Fatalf("%s: after Resign ID %d, verify %v", r.Code, b[1], VerifyRequest(b, secret, false))
		}
		if (r.Code == lradius.CodeAccessRequest) != (na == auth) {
			t.Fatalf("%s: authenticator %x -> %x", r.Code, auth, na)
		}
	}
}

func TestResponses(t *testing.T) {
	req := accessRequest()
	req.Attributes = append(req.Attributes, str(AttrProxyState, "first"), str(AttrUserName, "x"), str(AttrProxyState, "second"))
	b, auth := mustEncode(t, req, 42)
	resp, err := EncodeResponse(b, lradius.CodeAccessAccept, lradius.Attributes{str(18, "welcome")}, secret)
	if err != nil {
		t.Fatal(err)
	}
	if resp[1] != 42 {
		t.Fatalf("response ID %d", resp[1])
	}
	if !lradius.IsAuthenticResponse(resp, b, secret) {
		t.Fatal("layeh.com/radius rejects our Response Authenticator")
	}
	if err := VerifyResponse(resp, auth, secret, true); err != nil {
		t.Fatalf("VerifyResponse = %v", err)
	}
	p, _ := Decode(resp, secret)
	var ps []string
	for _, a := range p.Attributes {
		if a.Type == AttrProxyState {
			ps = append(ps, string(a.Attribute))
		}
	}
	if len(ps) != 2 || ps[0] != "first" || ps[1] != "second" {
		t.Fatalf("Proxy-State in the answer: %q", ps)
	}
	var other [16]byte
	if err := VerifyResponse(resp, other, secret, false); !errors.Is(err, ErrAuthenticator) {
		t.Fatalf("against another request: %v", err)
	}
	// A response whose Response Authenticator is right but whose
	// Message-Authenticator was computed with another key is rejected.
	forged := bytes.Clone(resp)
	forged[HeaderLen+2] ^= 1
	fix := packetHash(forged, &auth, secret)
	copy(forged[4:HeaderLen], fix[:])
	if err := VerifyResponse(forged, auth, secret, false); !errors.Is(err, ErrAuthenticator) {
		t.Fatalf("bad Message-Authenticator: %v", err)
	}

	// Accounting: no Message-Authenticator unless the request had one;
	// then requiring one fails with ErrNoMessageAuthenticator.
	ab, aauth := mustEncode(t, accountingRequest(), 5)
	aresp, err := EncodeResponse(ab, lradius.CodeAccountingResponse, nil, secret)
	if err != nil {
		t.Fatal(err)
	}
	if len(aresp) != HeaderLen {
		t.Fatalf("Accounting-Response of %d bytes", len(aresp))
	}
	if err := VerifyResponse(aresp, aauth, secret, false); err != nil {
		t.Fatal(err)
	}
	if err := VerifyResponse(aresp, aauth, secret, true); !errors.Is(err, ErrNoMessageAuthenticator) {
		t.Fatalf("required: %v", err)
	}
}

func TestEncodeRequestErrors(t *testing.T) {
	if _, _, err := EncodeRequest(&Request{Code: lradius.CodeAccessAccept}, 1, secret); err == nil {
		t.Fatal("encoded an Access-Accept as a request")
	}
	if _, _, err := EncodeRequest(accessRequest(), 1, nil); err == nil {
		t.Fatal("encoded with an empty secret")
	}
	big := &Request{Code: lradius.CodeAccountingRequest}
	for range 20 {
		big.Attributes = append(big.Attributes, &lradius.AVP{Type: 26, Attribute: make([]byte, 250)})
	}
	if _, _, err := EncodeRequest(big, 1, secret); err == nil {
		t.Fatal("encoded a request over 4096 bytes")
	}
}

func TestAnswers(t *testing.T) {
	if !Answers(lradius.CodeStatusServer, lradius.CodeAccessAccept) || Answers(lradius.CodeAccessRequest, lradius.CodeAccountingResponse) {
		t.Fatal("Answers")
	}
}

// firstAttr returns the type of the first attribute of packet b, 0 if it
// has none.
func firstAttr(b []byte) lradius.Type {
	if len(b) <= HeaderLen {
		return 0
	}
	return lradius.Type(b[HeaderLen])
}

// Every answer to an Access-Request or a Status-Server carries a
// Message-Authenticator as its first attribute, whether the request had
// one or not, ahead of the handler's attributes and the Proxy-State
// copied from the request; answers to the other requests have one (first)
// only when the request had one.
func TestMessageAuthenticatorFirstInAnswers(t *testing.T) {
	attrs := lradius.Attributes{str(18, "welcome"), {Type: AttrMessageAuthenticator, Attribute: make([]byte, 16)}, str(25, "class")}
	signed := accessRequest()
	signed.Attributes = append(signed.Attributes, str(AttrProxyState, "ps1"))
	withMA, _ := mustEncode(t, signed, 1)
	p := lradius.New(lradius.CodeAccessRequest, secret) // no Message-Authenticator
	p.Add(AttrProxyState, []byte("ps1"))
	p.Add(AttrUserName, []byte("bob"))
	withoutMA, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	status, _ := mustEncode(t, &Request{Code: lradius.CodeStatusServer}, 0)
	acct, _ := mustEncode(t, accountingRequest(), 2)
	acctMA := accountingRequest()
	acctMA.Attributes = append(acctMA.Attributes, &lradius.AVP{Type: AttrMessageAuthenticator})
	acctWithMA, _ := mustEncode(t, acctMA, 3)
	coa := accountingRequest()
	coa.Code = lradius.CodeCoARequest
	coaReq, _ := mustEncode(t, coa, 4)
	for _, tc := range []struct {
		name  string
		req   []byte
		code  lradius.Code
		first bool // Message-Authenticator first; false: none at all
	}{
		{"Access-Accept to a signed request", withMA, lradius.CodeAccessAccept, true},
		{"Access-Reject to a signed request", withMA, lradius.CodeAccessReject, true},
		{"Access-Challenge to a signed request", withMA, lradius.CodeAccessChallenge, true},
		{"Access-Accept to an unsigned request", withoutMA, lradius.CodeAccessAccept, true},
		{"Access-Reject to an unsigned request", withoutMA, lradius.CodeAccessReject, true},
		{"Access-Accept to Status-Server", status, lradius.CodeAccessAccept, true},
		{"Accounting-Response to Status-Server", status, lradius.CodeAccountingResponse, true},
		{"Accounting-Response", acct, lradius.CodeAccountingResponse, false},
		{"Accounting-Response to a signed request", acctWithMA, lradius.CodeAccountingResponse, true},
		{"CoA-NAK", coaReq, lradius.CodeCoANAK, false},
	} {
		resp, err := EncodeResponse(tc.req, tc.code, attrs, secret)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		n := 0
		for off := HeaderLen; off < len(resp); off += int(resp[off+1]) {
			if lradius.Type(resp[off]) == AttrMessageAuthenticator {
				n++
			}
		}
		switch {
		case tc.first && (firstAttr(resp) != AttrMessageAuthenticator || n != 1):
			t.Errorf("%s: first attribute %d, %d Message-Authenticator(s); want it first, once", tc.name, firstAttr(resp), n)
		case !tc.first && n != 0:
			t.Errorf("%s: %d Message-Authenticator(s), want none", tc.name, n)
		}
		if err := VerifyResponse(resp, Authenticator(tc.req), secret, tc.first); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestWithAcctDelay(t *testing.T) {
	delayOf := func(r *Request) (uint32, int) {
		n, d := 0, uint32(0)
		for _, a := range r.Attributes {
			if a.Type == AttrAcctDelayTime {
				n++
				d, _ = lradius.Integer(a.Attribute)
			}
		}
		return d, n
	}
	acct := &Request{Code: lradius.CodeAccountingRequest, Attributes: lradius.Attributes{
		{Type: AttrAcctSessionID, Attribute: []byte("s")},
		{Type: AttrAcctDelayTime, Attribute: lradius.NewInteger(7)},
	}}
	if got := acct.WithAcctDelay(0); got != acct {
		t.Error("0 s: a new request, want r itself")
	}
	got := acct.WithAcctDelay(3)
	if d, n := delayOf(got); d != 10 || n != 1 {
		t.Errorf("7 + 3 s: Acct-Delay-Time %d (%d of them), want 10", d, n)
	}
	if d, _ := delayOf(acct); d != 7 {
		t.Errorf("r changed: %d", d)
	}
	if d, _ := delayOf(acct.WithAcctDelay(^uint32(0))); d != ^uint32(0) {
		t.Errorf("overflow: %d, want the maximum", d)
	}
	bare := &Request{Code: lradius.CodeAccountingRequest, Attributes: lradius.Attributes{{Type: AttrAcctSessionID, Attribute: []byte("s")}}}
	if d, n := delayOf(bare.WithAcctDelay(4)); d != 4 || n != 1 {
		t.Errorf("absent: Acct-Delay-Time %d (%d of them), want 4 added", d, n)
	}
	if len(bare.Attributes) != 1 {
		t.Error("r changed")
	}
	access := &Request{Code: lradius.CodeAccessRequest}
	if access.WithAcctDelay(4) != access {
		t.Error("an Access-Request changed")
	}
	odd := &Request{Code: lradius.CodeAccountingRequest, Attributes: lradius.Attributes{{Type: AttrAcctDelayTime, Attribute: []byte{1}}}}
	if odd.WithAcctDelay(4) != odd {
		t.Error("a malformed Acct-Delay-Time changed")
	}
}
