package peer

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// cerWithInband sends a CER from host offering the given
// Inband-Security-Ids on tc and returns the CEA's Result-Code. Each
// connection of a test names a host of its own: the server refuses a
// second connection from one identity (5012) until it has seen the
// first one close, which a test closing it just before cannot wait for.
func cerWithInband(t *testing.T, tc transport.Conn, host string, ids ...uint32) uint32 {
	t.Helper()
	cfg, err := clientConfig(host).validate()
	require.NoError(t, err)
	b := message.NewRequest(wire.CmdCapabilitiesExchange, message.AppCommon, 0)
	cfg.addCapabilities(b, tc.LocalAddr())
	for _, id := range ids {
		b.Uint32(message.InbandSecurityID, 0, true, id)
	}
	require.NoError(t, tc.WriteMessages(withIDs(b.Bytes(), wire.NewHopByHopGenRandom())))
	cea, err := tc.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, uint32(wire.CmdCapabilitiesExchange), wire.CommandCode(cea))
	rc, _ := message.ResultCodeOf(cea)
	return rc
}

// A CER that offers only in-band TLS on a plain TCP connection gets
// DIAMETER_NO_COMMON_SECURITY; NO_INBAND_SECURITY, alone or besides TLS,
// or no Inband-Security-Id at all, is accepted.
func TestInbandSecurityOverTCP(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	for name, tc := range map[string]struct {
		host string
		ids  []uint32
		want uint32
	}{
		"TLS only":         {"tls-only.example.net", []uint32{1}, message.NoCommonSecurity},
		"NO_INBAND":        {"no-inband.example.net", []uint32{0}, message.Success},
		"NO_INBAND, TLS":   {"both.example.net", []uint32{1, 0}, message.Success},
		"none offered":     {"none.example.net", nil, message.Success},
		"unknown (7) only": {"unknown.example.net", []uint32{7}, message.NoCommonSecurity},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
			require.NoError(t, err)
			defer c.Close()
			assert.Equal(t, tc.want, cerWithInband(t, c, tc.host, tc.ids...))
			if tc.want != message.Success {
				_, err := c.ReadMessage()
				assert.Error(t, err, "the connection is closed after the refusal")
			}
		})
	}
}

// On a TLS-on-connect listener a CER with NO_INBAND_SECURITY is accepted
// (RFC 6733 2.2), and so is one asking for TLS, which it already has.
func TestInbandSecurityOverTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := testhelp.SelfSigned(t, dir, "localhost")
	srvTLS, err := transport.ServerTLSConfig(cert, key, "")
	require.NoError(t, err)
	s := startServer(t, "tls://127.0.0.1:0", func(c *Config) { c.Transport.TLS = srvTLS })
	cliTLS, err := transport.ClientTLSConfig(cert, "", "", "localhost")
	require.NoError(t, err)
	for i, ids := range [][]uint32{{0}, {1}} {
		c, err := transport.Dial(bounded(t), "tls://"+s.Addr().String(), transport.Options{TLS: cliTLS})
		require.NoError(t, err)
		assert.Equal(t, uint32(message.Success), cerWithInband(t, c, fmt.Sprintf("client-%d.example.net", i), ids...), "Inband-Security-Id %v over TLS", ids)
		c.Close()
	}
}
