package radpeer

import (
	"testing"

	"github.com/aaatp/aaatp/internal/serve"
	lradius "layeh.com/radius"
)

// Over TCP, a packet that is not a request (an Access-Accept sent to the
// server: a client and a server swapped) is dropped, counted and logged
// at the log's rate, as over UDP; the connection goes on.
func TestServerNonRequestLogged(t *testing.T) {
	var lines lineBuffer
	srv, c := startMATCP(t, ServerConfig{Logger: lines.logger()})
	logged := serve.Count(serve.KindBadRequest)
	req := signedRequest(t, 1, "alice")
	c.send(t, unsignedAnswer(req, lradius.CodeAccessAccept, nil))
	c.exchange(t, signedRequest(t, 2, "after"))
	if n := serve.Count(serve.KindBadRequest) - logged; n != 1 {
		t.Errorf("an Access-Accept sent to the server: %d bad_request log events, want 1 (log: %q)", n, lines.String())
	}
	if st := srv.Stats(); st.Dropped != 1 {
		t.Errorf("Dropped %d, want 1", st.Dropped)
	}
}
