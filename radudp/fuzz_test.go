package radudp

import (
	"testing"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// FuzzDatagram feeds arbitrary datagrams to a socket with a request
// pending on every Identifier: nothing panics, and whatever is not a
// verified reply is counted and dropped, leaving the request pending.
func FuzzDatagram(f *testing.F) {
	req, _, _ := radius.EncodeRequest(&radius.Request{Code: lradius.CodeAccessRequest}, 7, testSecret)
	ok, _ := radius.EncodeResponse(req, lradius.CodeAccessAccept, nil, testSecret)
	f.Add(ok)
	f.Add(req)
	f.Add([]byte{2, 7, 0, 20})
	f.Add(append([]byte{2, 7, 0, 22}, make([]byte, 18)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := NewPeer("fuzz:1812", PeerConfig{Secret: testSecret})
		if err != nil {
			t.Fatal(err)
		}
		s := &socket{free: newRing()}
		pds := make([]*pending, IDsPerSocket)
		for i := range pds {
			pds[i] = &pending{auth: radius.Authenticator(req), code: lradius.CodeAccessRequest, ch: make(chan *Response, 1)}
			s.pend[i] = pds[i]
			s.last[i] = lastUse{auth: pds[i].auth, code: pds[i].code, used: true}
		}
		p.datagram(s, b)
		st := p.Stats()
		delivered := 0
		for i, pd := range pds {
			select {
			case resp := <-pd.ch:
				delivered++
				if radius.VerifyResponse(resp.Raw, pd.auth, testSecret, false) != nil || i != int(radius.Identifier(resp.Raw)) {
					t.Fatalf("delivered an unverified reply or on the wrong Identifier")
				}
			default:
			}
		}
		if delivered+int(st.BadReplies) != 1 {
			t.Fatalf("datagram: %d delivered, %d counted bad; want exactly one of them", delivered, st.BadReplies)
		}
	})
}
