package main

import (
	"net"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// A radius:// listener on an accounting port (1813, or 1646 of old)
// answers Status-Server with Accounting-Response, as RFC 5997 asks;
// elsewhere with Access-Accept.
func TestRadiusListenerAccountingPortStatusServer(t *testing.T) {
	if accountingPort(&net.UDPAddr{Port: 1812}) || !accountingPort(&net.UDPAddr{Port: 1646}) {
		t.Fatal("1812 taken for an accounting port, or 1646 not")
	}
	// The port must be free for the server to take it: skip if it is not.
	pc, err := net.ListenPacket("udp", "127.0.0.1:1813")
	if err != nil {
		t.Skipf("127.0.0.1:1813 is taken: %v", err)
	}
	pc.Close()
	sf := secretFile(t)
	startServer(t, "--listen", "radius://127.0.0.1:1813", "--secret-file", sf)
	_, auth := startRADIUSUDPServer(t, sf)
	for _, tc := range []struct {
		url  string
		want lradius.Code
	}{
		{"radius://127.0.0.1:1813", lradius.CodeAccountingResponse},
		{auth, lradius.CodeAccessAccept},
	} {
		addr := tc.url[len("radius://"):]
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		req, ra, err := radius.EncodeRequest(&radius.Request{Code: lradius.CodeStatusServer}, 7, []byte(testRadiusSecret))
		if err != nil {
			t.Fatal(err)
		}
		var ans []byte
		for try := 0; try < 5 && ans == nil; try++ {
			c.Write(req)
			c.SetReadDeadline(time.Now().Add(time.Second))
			b := make([]byte, 4096)
			if n, err := c.Read(b); err == nil {
				ans = b[:n]
			}
		}
		c.Close()
		if ans == nil {
			t.Fatalf("%s: no answer to Status-Server", tc.url)
		}
		if radius.Code(ans) != tc.want || radius.VerifyResponse(ans, ra, []byte(testRadiusSecret), true) != nil {
			t.Errorf("%s: answer %s, want a verified %s", tc.url, radius.Code(ans), tc.want)
		}
	}
}
