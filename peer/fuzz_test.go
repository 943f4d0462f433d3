package peer

import (
	"bytes"
	"testing"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// FuzzCheckRequest: any request a connection's reader accepts (its header
// passed wire.Validate) is either refused with an error answer that is a
// valid message, echoes at most a bounded value and names the request's
// ids, or passed on with well-formed AVPs, the connection's own
// Origin-Host and a destination that is this node.
func FuzzCheckRequest(f *testing.F) {
	const remote = "client.example.net"
	cfg, err := Config{OriginHost: "server.example.net", OriginRealm: "example.net", AcctApps: []uint32{message.AppAccounting}, Logger: quiet}.validate()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(acr())
	f.Add(acrFrom("other.example.net"))
	f.Add(bareACR(wire.FlagRequest))
	f.Add(withAVPs(bareACR(wire.FlagRequest), rawAVP(message.OriginHost, 0x40, 7, nil)))
	f.Add(withAVPs(bareACR(wire.FlagRequest), rawAVP(message.OriginHost, 0x40, 0xFFFFFF, []byte(remote))))
	for i, d := range destinationCases {
		f.Add(d.request(uint32(i)))
	}
	f.Fuzz(func(t *testing.T, req []byte) {
		h, err := wire.ParseHeader(req)
		if err != nil || wire.Validate(h, wire.DefaultMaxMessageLen) != nil || int(h.Length) != len(req) || !h.IsRequest() {
			return // the reader never hands these on
		}
		r := cfg.checkRequest(req, remote)
		if r == nil {
			if b := wire.CheckAVPs(req); b != nil {
				t.Fatalf("passed a request with a malformed AVP: %+v", b)
			}
			if oh, _ := wire.FindAVP(req, message.OriginHost, 0); !message.EqualIdentity(string(oh), remote) && !cfg.isAgent(string(oh)) {
				t.Fatalf("passed a request from Origin-Host %q on %s's connection", oh, remote)
			}
			dh, hasHost := wire.FindAVP(req, message.DestinationHost, 0)
			dr, hasRealm := wire.FindAVP(req, message.DestinationRealm, 0)
			if ours := hasHost && message.EqualIdentity(string(dh), cfg.OriginHost); !ours && (hasHost || hasRealm && !cfg.serves(string(dr))) {
				t.Fatalf("passed a request for Destination-Host %q, Destination-Realm %q", dh, dr)
			}
			return
		}
		if r.failed != nil && len(r.failed.data) > maxFailedData {
			t.Fatalf("Failed-AVP echoes %d bytes", len(r.failed.data))
		}
		ans := cfg.refusalAnswer(req, r)
		ah, err := wire.ParseHeader(ans)
		if err != nil || wire.Validate(ah, wire.DefaultMaxMessageLen) != nil || int(ah.Length) != len(ans) || ah.IsRequest() {
			t.Fatalf("refusal answer is not a valid answer: %v %+v", err, ah)
		}
		if ah.HopByHop != h.HopByHop || ah.EndToEnd != h.EndToEnd || ah.CommandCode != h.CommandCode {
			t.Fatalf("refusal answer %+v does not answer %+v", ah, h)
		}
		if rc, ok := message.ResultCodeOf(ans); !ok || rc != r.rc {
			t.Fatalf("refusal answer Result-Code %d (%v), want %d", rc, ok, r.rc)
		}
		if wire.CheckAVPs(ans) != nil {
			t.Fatalf("refusal answer has a malformed AVP")
		}
		if sid, ok := wire.FindAVP(ans, message.SessionID, 0); ok && !bytes.Contains(req, sid) {
			t.Fatalf("refusal answer carries a Session-Id the request did not")
		}
	})
}

// routingKey finds what three FindAVPs find: the first User-Name,
// Session-Id and Destination-Host before any malformed AVP.
func FuzzRoutingKey(f *testing.F) {
	f.Add(acr())
	f.Add(withAVPs(bareACR(wire.FlagRequest), rawAVP(message.UserName, 0x40, 8+1, []byte("a")), rawAVP(message.UserName, 0x40, 8+1, []byte("b"))))
	f.Add(withAVPs(bareACR(wire.FlagRequest), rawAVP(message.DestinationHost, 0x40, 8+1, []byte("h")), rawAVP(message.SessionID, 0x40, 7, nil)))
	f.Add(withAVPs(bareACR(wire.FlagRequest), rawAVP(message.SessionID, 0xC0, 8+4+2, []byte{0, 0, 0, 9, 's', 'x'}), rawAVP(message.SessionID, 0x40, 8+1, []byte("s"))))
	f.Fuzz(func(t *testing.T, req []byte) {
		k := routingKey(req)
		nai, _ := wire.FindAVP(req, message.UserName, 0)
		sid, _ := wire.FindAVP(req, message.SessionID, 0)
		dh, ok := wire.FindAVP(req, message.DestinationHost, 0)
		if !bytes.Equal(k.NAI, nai) || (k.NAI == nil) != (nai == nil) || !bytes.Equal(k.SessionID, sid) || (k.SessionID == nil) != (sid == nil) {
			t.Fatalf("routingKey %q %q, FindAVP %q %q", k.NAI, k.SessionID, nai, sid)
		}
		if want := map[bool]string{true: string(dh)}[ok]; k.Dest != want {
			t.Fatalf("Destination-Host %q, FindAVP %q", k.Dest, want)
		}
	})
}
