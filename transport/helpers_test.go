package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testMsg builds a valid Diameter message of total length n (a multiple of
// 4, >= 20) with the given command code and hop-by-hop id; the body is
// filler the transport does not look at.
func testMsg(n int, cmd uint32, hbh uint32) []byte {
	b := make([]byte, n)
	b[0] = 1
	b[1], b[2], b[3] = byte(n>>16), byte(n>>8), byte(n)
	b[4] = wire.FlagRequest
	b[5], b[6], b[7] = byte(cmd>>16), byte(cmd>>8), byte(cmd)
	binary.BigEndian.PutUint32(b[12:], hbh)
	binary.BigEndian.PutUint32(b[16:], ^hbh)
	for i := wire.HeaderLen; i < n; i++ {
		b[i] = byte(i + int(hbh))
	}
	return b
}

// testCtx bounds a real-socket test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all PEM, into a temporary directory.
type pki struct {
	dir                   string
	caFile                string
	serverCert, serverKey string
	clientCert, clientKey string
	otherCAFile           string // a CA that signed nothing we use
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	p := pki{dir: dir}
	caKey, caCert, caDER := newCA(t, "aaatp test CA")
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	_, _, otherDER := newCA(t, "unrelated CA")
	p.otherCAFile = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", otherDER)

	leaf := func(name string, usage x509.ExtKeyUsage, ips []net.IP) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     []string{name},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
	}
	p.serverCert, p.serverKey = leaf("server.example.net", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.clientCert, p.clientKey = leaf("client.example.net", x509.ExtKeyUsageClientAuth, nil)
	return p
}

func newCA(t *testing.T, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return key, cert, der
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return path
}

// streamOf returns the streamConn of a TCP, TLS or pipe Conn.
func streamOf(c Conn) *streamConn {
	if t, ok := c.(*tcpConn); ok {
		return t.streamConn
	}
	return c.(*streamConn)
}
