package radudp

import (
	"context"
	"crypto/md5"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	lradius "layeh.com/radius"
)

// unsignedReply answers req with a right Response Authenticator and no
// Message-Authenticator, as a server without the BlastRADIUS fixes does
// (FreeRADIUS before 3.2.5) and as a forgery does, here with a
// Proxy-State the request never had.
func unsignedReply(req []byte, code lradius.Code) []byte {
	attrs := lradius.Attributes{{Type: radius.AttrProxyState, Attribute: []byte("collision-blob")}}
	p := &lradius.Packet{Code: code, Identifier: radius.Identifier(req), Authenticator: radius.Authenticator(req), Attributes: attrs}
	b, err := p.MarshalBinary()
	if err != nil {
		panic(err)
	}
	h := md5.Sum(append(append([]byte(nil), b...), testSecret...))
	copy(b[4:radius.HeaderLen], h[:])
	return b
}

func (f *fakeServer) setEncode(e func(req []byte, code lradius.Code) []byte) {
	f.mu.Lock()
	f.encode = e
	f.mu.Unlock()
}

// By default a reply to an Access-Request without a Message-Authenticator
// is dropped and counted: the exchange gets no reply, and its
// TimeoutError says why. A reply to Status-Server without one is taken
// (FreeRADIUS before 3.2.5 sends them so); accounting replies need none.
func TestReplyWithoutMADroppedByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		f.setEncode(unsignedReply)
		p := newTestPeer(t, n, "srv:1812", PeerConfig{Retries: 2})
		_, err := p.Exchange(context.Background(), accessRequest("alice"))
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, radius.ErrNoMessageAuthenticator) {
			t.Fatalf("Access-Accept without Message-Authenticator: %v, want a timeout matching ErrNoMessageAuthenticator", err)
		}
		if st := p.Stats(); st.NoMessageAuthenticator != 2 || st.Answered != 0 || st.BadReplies != 0 {
			t.Fatalf("stats %+v, want 2 replies dropped for want of a Message-Authenticator", st)
		}
		if _, err := p.Exchange(context.Background(), &radius.Request{Code: lradius.CodeStatusServer}); err != nil {
			t.Fatalf("Status-Server: %v", err)
		}
		if _, err := p.Exchange(context.Background(), accountingStop("s1")); err != nil {
			t.Fatalf("Accounting-Request: %v", err)
		}
	})
}

// RequireMANever takes such replies; RequireMAAlways also drops a reply to
// Status-Server without one.
func TestReplyMASettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		f.setEncode(unsignedReply)
		never := newTestPeer(t, n, "srv:1812", PeerConfig{RequireMessageAuthenticator: radpeer.RequireMANever})
		if r, err := never.Exchange(context.Background(), accessRequest("alice")); err != nil || r.Packet.Code != lradius.CodeAccessAccept {
			t.Fatalf("RequireMANever: %v", err)
		}
		always := newTestPeer(t, n, "srv:1812", PeerConfig{Retries: 1, RequireMessageAuthenticator: radpeer.RequireMAAlways})
		if _, err := always.Exchange(context.Background(), &radius.Request{Code: lradius.CodeStatusServer}); !errors.Is(err, radius.ErrNoMessageAuthenticator) {
			t.Fatalf("RequireMAAlways, Status-Server: %v", err)
		}
		if _, err := NewPeer("srv:1812", PeerConfig{Secret: testSecret, RequireMessageAuthenticator: 7}); !errors.Is(err, ErrConfig) {
			t.Fatalf("unknown setting: %v", err)
		}
	})
}

// The Client's default too: an Access-Accept without one fails over and
// fails, with the reason.
func TestClientRequiresMAByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		f.setEncode(unsignedReply)
		c := newTestClient(t, n, Config{Servers: []ServerSpec{{URL: "radius://srv:1812"}}, Retries: 1})
		if _, err := c.Exchange(context.Background(), accessRequest("alice")); !errors.Is(err, radius.ErrNoMessageAuthenticator) {
			t.Fatalf("Access-Accept without Message-Authenticator: %v", err)
		}
		if st := c.Stats(); st.Servers[0].Auth.NoMessageAuthenticator != 1 {
			t.Fatalf("stats %+v", st.Servers[0].Auth)
		}
	})
}
