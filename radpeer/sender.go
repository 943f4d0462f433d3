package radpeer

import (
	"context"
	"net/netip"
)

// Sender is who sent the request a Handler is answering: the source
// address of its connection or datagram, the identity a RADIUS server
// knows its clients by.
type Sender struct {
	Addr netip.Addr
}

type senderKey struct{}

// SenderOf returns the sender of the request whose Handler got ctx.
func SenderOf(ctx context.Context) (Sender, bool) {
	s, ok := ctx.Value(senderKey{}).(Sender)
	return s, ok
}

// withSender returns ctx carrying s, for the Handler.
func withSender(ctx context.Context, s Sender) context.Context {
	return context.WithValue(ctx, senderKey{}, s)
}
