package radudp_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/radudp"
	lradius "layeh.com/radius"
)

// A Client over two servers with direct access: everything goes to the
// first while it is in service.
func Example() {
	secret := []byte("testing123")
	var urls []string
	for range 2 {
		pc, _ := net.ListenPacket("udp", "127.0.0.1:0")
		srv, _ := radpeer.NewUDPServer(pc, radpeer.ServerConfig{Secret: secret})
		go srv.Serve()
		defer srv.Close(context.Background())
		urls = append(urls, "radius://"+pc.LocalAddr().String())
	}
	c, err := radudp.NewClient(radudp.Config{
		Servers: []radudp.ServerSpec{
			{Name: "primary", URL: urls[0]},
			{Name: "secondary", URL: urls[1]},
		},
		Secret:    secret,
		Algorithm: loadbalance.Direct,
		Timeout:   time.Second,
		TestUser:  &radudp.TestUser{Name: "probe", Password: "probe-pw"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	r := &radius.Request{Code: lradius.CodeAccessRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute("alice@example.net"))
	r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("secret-pw"))
	resp, err := c.Exchange(context.Background(), r)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Packet.Code, "from", c.Names()[0] == "primary" && resp.Server == urls[0][len("radius://"):])
	fmt.Println("primary is", c.State(0))
	// Output:
	// Access-Accept from true
	// primary is in-service
}
