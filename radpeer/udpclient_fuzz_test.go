package radpeer

import (
	"testing"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// FuzzDatagram feeds arbitrary datagrams to the reader path of a
// UDPPeer's socket with a request in flight on every Identifier: nothing
// panics; the datagram completes at most one request, with a reply that
// verifies against it on its Identifier, and what does not is counted
// (bad, or without a required Message-Authenticator) and dropped, leaving
// every request in flight.
func FuzzDatagram(f *testing.F) {
	req, _, err := radius.EncodeRequest(accessReq("alice"), 7, testSecret)
	if err != nil {
		f.Fatal(err)
	}
	ok, _ := radius.EncodeResponse(req, lradius.CodeAccessAccept, nil, testSecret)
	f.Add(ok)
	f.Add(append(ok, 0, 0, 0)) // padding
	f.Add(ok[:len(ok)-1])
	f.Add(unsignedAnswer(req, lradius.CodeAccessAccept, nil))
	f.Add(req)
	f.Add([]byte{2, 7, 0, 20})
	f.Add(append([]byte{2, 7, 0, 22}, make([]byte, 18)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := NewUDPPeer("radius://fuzz:1812", UDPConfig{Secret: testSecret, Logger: quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		s := &udpSocket{free: newRing256()}
		snds := make([]*udpSend, IDsPerSocket)
		for i := range snds {
			id, _ := s.free.pop()
			rc := newCall(accessReq("alice"))
			rc.Lock()
			if _, err := rc.BoardLocked(&p.h); err != nil {
				t.Fatal(err)
			}
			rc.Unlock()
			snd := &udpSend{rc: rc, at: p.auth, s: s, id: id, auth: radius.Authenticator(req), attempts: 1, max: p.cfg.Retries}
			snds[i] = snd
			s.pend[id] = snd
			s.last[id] = lastUse{auth: snd.auth, code: lradius.CodeAccessRequest, used: true}
			p.sending[rc] = snd
		}
		p.datagram(s, b)
		st := p.Stats()
		delivered := 0
		for i, snd := range snds {
			if !snd.rc.IsDone() {
				if s.pend[i] != snd || p.sending[snd.rc] != snd {
					t.Fatalf("Identifier %d: request not complete, and no longer in flight", i)
				}
				continue
			}
			delivered++
			resp := ResponseOf(&snd.rc.Call)
			if resp == nil || radius.VerifyResponse(resp.Raw, snd.auth, testSecret, true) != nil || i != int(radius.Identifier(resp.Raw)) {
				t.Fatalf("delivered an unverified reply or on the wrong Identifier")
			}
			if s.pend[i] != nil || p.sending[snd.rc] != nil || s.free.size != 1 {
				t.Fatalf("answered, and its Identifier still held")
			}
		}
		if delivered != int(st.Answered) || delivered+int(st.BadReplies)+int(st.NoMA) != 1 || st.Late+st.Duplicates != 0 {
			t.Fatalf("datagram: %d delivered, stats %+v; want exactly one of delivered, bad or without Message-Authenticator", delivered, st)
		}
	})
}
