package godiam

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/fiorix/go-diameter/v4/diam"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// Whatever a peer sends, the adapted handler neither panics nor hands the
// handler a message wire.Decode refused; it answers with a message that
// parses, or with nothing.
func FuzzHandler(f *testing.F) {
	good, _ := Codec{}.Encode(acr("seed;1"))
	f.Add(good)
	f.Add(malformed())
	f.Add(good[:wire.HeaderLen])
	h := NewHandler(func(_ context.Context, _ *peer.Peer, req *diam.Message) *diam.Message {
		return req.Answer(diam.Success)
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= wire.HeaderLen {
			// As a Peer delivers it: a frame whose length is its size.
			binary.BigEndian.PutUint32(b[0:4], uint32(len(b))&0xffffff|1<<24)
		}
		ans := h(context.Background(), nil, b)
		if ans == nil {
			return
		}
		if _, err := wire.ParseHeader(ans); err != nil {
			t.Fatalf("answer does not parse: %v", err)
		}
	})
}
