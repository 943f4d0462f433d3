package radius_test

import (
	"fmt"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// A client encodes a request for one send, a server checks it and
// answers, and the client verifies the answer against the request.
func Example() {
	secret := []byte("testing123")
	req := &radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrUserName, Attribute: []byte("alice")},
		{Type: radius.AttrUserPassword, Attribute: []byte("password in the clear")},
	}}
	pkt, auth, err := radius.EncodeRequest(req, 1, secret)
	if err != nil {
		panic(err)
	}

	// Server side.
	if err := radius.VerifyRequest(pkt, secret, true); err != nil {
		panic(err)
	}
	ans, err := radius.EncodeResponse(pkt, lradius.CodeAccessAccept, nil, secret)
	if err != nil {
		panic(err)
	}

	// Client side.
	fmt.Println(radius.Code(ans), radius.Identifier(ans), radius.VerifyResponse(ans, auth, secret, true))
	// Output: Access-Accept 1 <nil>
}
