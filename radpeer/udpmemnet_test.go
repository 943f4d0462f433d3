package radpeer

import "github.com/aaatp/aaatp/internal/memudp"

// memNet is the in-memory datagram network of the UDP client's tests
// (package memudp), with ListenPacket returning the endpoint itself.
type memNet struct{ *memudp.Net }

func newMemNet() *memNet { return &memNet{memudp.New()} }

// memEnd is an endpoint of a memNet.
type memEnd = memudp.Conn

// ListenPacket opens the endpoint at addr; it panics if addr is taken.
func (n *memNet) ListenPacket(addr string) *memEnd {
	pc, err := n.Listen(addr)
	if err != nil {
		panic(err)
	}
	return pc.(*memEnd)
}

// memAddr is an endpoint's address on a memNet.
type memAddr = memudp.Addr
