package radpeer

import (
	"context"
	"net/netip"
)

// Sender is who sent the request a Handler is answering, as the server
// authenticated it: the source address of its connection or datagram and,
// over radsec://, the subject of the client's certificate.
type Sender struct {
	Addr netip.Addr
	// Identity names the client beyond its address: the TLS client
	// certificate's subject over radsec://, empty otherwise.
	Identity string
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
