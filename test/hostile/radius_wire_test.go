package hostile

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The RADIUS wire format, written here from RFC 2865, 2866, 3579 and
// 5997 rather than taken from package radius: the attacks build frames
// the server's own encoder would refuse to (wrong authenticators, no
// Message-Authenticator, trailing bytes), and the suite must not change
// when that package does.

// RADIUS codes and attribute types the attacks use.
const (
	codeAccessRequest   = 1
	codeAccessAccept    = 2
	codeAcctRequest     = 4
	codeAcctResponse    = 5
	codeStatusServer    = 12
	attrUserName        = 1
	attrUserPassword    = 2
	attrNASIPAddress    = 4
	attrNASIdentifier   = 32
	attrProxyState      = 33
	attrAcctStatusType  = 40
	attrAcctSessionID   = 44
	attrEventTimestamp  = 55
	attrMessageAuth     = 80
	radHeaderLen        = 20
	radMaxLen           = 4096
	radsecSecret        = "radsec" // RFC 6614 2.3
	radiusSecret        = "hostile-suite-secret"
	radiusStatusStop    = 2
	radiusReadTimeout   = 2 * time.Second
	radiusRefusedWithin = time.Second
)

type attr struct {
	t byte
	v []byte
}

func str(t byte, s string) attr { return attr{t, []byte(s)} }

func u32(t byte, v uint32) attr { return attr{t, binary.BigEndian.AppendUint32(nil, v)} }

// hashedAuthenticator reports whether code's Request Authenticator is the
// packet's MD5 (accounting, CoA, Disconnect) rather than a random nonce.
func hashedAuthenticator(code byte) bool { return code == codeAcctRequest || code == 40 || code == 43 }

// radRequest encodes and signs a request: a random Request Authenticator
// for Access-Request and Status-Server, the MD5 one for the others, and,
// with ma, a Message-Authenticator first.
func radRequest(code, id byte, attrs []attr, secret string, ma bool) []byte {
	b := make([]byte, radHeaderLen, 256)
	b[0], b[1] = code, id
	if !hashedAuthenticator(code) {
		rand.Read(b[4:radHeaderLen])
	}
	if ma {
		b = append(b, attrMessageAuth, 18)
		b = append(b, make([]byte, 16)...)
	}
	for _, a := range attrs {
		b = append(b, a.t, byte(2+len(a.v)))
		b = append(b, a.v...)
	}
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	signRequest(b, secret)
	return b
}

// findMA returns the offset of the first Message-Authenticator's value in
// b, or -1; it tolerates broken attributes (the fuzzer's frames).
func findMA(b []byte) int {
	for off := radHeaderLen; off+2 <= len(b); {
		l := int(b[off+1])
		if l < 2 || off+l > len(b) {
			return -1
		}
		if b[off] == attrMessageAuth && l == 18 {
			return off + 2
		}
		off += l
	}
	return -1
}

// signRequest fills in b's Message-Authenticator, if it has one, and, for
// the hashed codes, its Request Authenticator, as a client holding secret
// would; the header's Length is taken as it is.
func signRequest(b []byte, secret string) {
	if len(b) < radHeaderLen {
		return
	}
	hashed := hashedAuthenticator(b[0])
	if hashed {
		clear(b[4:radHeaderLen])
	}
	if ma := findMA(b); ma >= 0 {
		clear(b[ma : ma+16])
		h := hmac.New(md5.New, []byte(secret))
		h.Write(b)
		copy(b[ma:], h.Sum(nil))
	}
	if hashed {
		s := md5.Sum(append(append([]byte(nil), b...), secret...))
		copy(b[4:radHeaderLen], s[:])
	}
}

// radResponse encodes a response to req, signed with secret: its
// Response Authenticator, and with ma a Message-Authenticator.
func radResponse(req []byte, code byte, secret string, ma bool) []byte {
	b := make([]byte, radHeaderLen, 64)
	b[0], b[1] = code, req[1]
	copy(b[4:], req[4:radHeaderLen])
	if ma {
		b = append(b, attrMessageAuth, 18)
		b = append(b, make([]byte, 16)...)
	}
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	if ma {
		h := hmac.New(md5.New, []byte(secret))
		h.Write(b)
		copy(b[radHeaderLen+2:], h.Sum(nil))
	}
	s := md5.Sum(append(append([]byte(nil), b...), secret...))
	copy(b[4:radHeaderLen], s[:])
	return b
}

// checkResponse verifies that resp answers req: same Identifier, the
// Length of the datagram or frame, and its Response Authenticator.
func checkResponse(req, resp []byte, secret string) error {
	if len(resp) < radHeaderLen || int(binary.BigEndian.Uint16(resp[2:4])) != len(resp) {
		return fmt.Errorf("bad response frame of %d bytes", len(resp))
	}
	if resp[1] != req[1] {
		return fmt.Errorf("response to ID %d, want %d", resp[1], req[1])
	}
	h := md5.New()
	h.Write(resp[:4])
	h.Write(req[4:radHeaderLen])
	h.Write(resp[radHeaderLen:])
	h.Write([]byte(secret))
	if !hmac.Equal(h.Sum(nil), resp[4:radHeaderLen]) {
		return errors.New("bad Response Authenticator")
	}
	return nil
}

// readRadiusFrame reads one RADIUS frame from a stream.
func readRadiusFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	l := int(binary.BigEndian.Uint16(h[2:4]))
	if l < radHeaderLen || l > radMaxLen {
		return nil, fmt.Errorf("bad RADIUS frame length %d", l)
	}
	b := make([]byte, l)
	copy(b, h[:])
	_, err := io.ReadFull(r, b[4:])
	return b, err
}

// accessRequest is a valid Access-Request with a Message-Authenticator.
func accessRequest(id byte, user, secret string) []byte {
	return radRequest(codeAccessRequest, id, []attr{str(attrUserName, user), str(attrUserPassword, "0123456789abcdef")}, secret, true)
}

// acctRecord is an Accounting-Request Stop of one session.
func acctRecord(id byte, nas, session string, ts uint32, secret string) []byte {
	return radRequest(codeAcctRequest, id, []attr{
		str(attrUserName, "user@example.net"), str(attrNASIdentifier, nas), str(attrAcctSessionID, session),
		u32(attrAcctStatusType, radiusStatusStop), u32(attrEventTimestamp, ts),
	}, secret, false)
}

// pki is a CA, a server certificate for 127.0.0.1 and client
// certificates, as PEM files, for radsec://.
type pki struct {
	caFile, serverCert, serverKey string
	pool                          *x509.CertPool
	clients                       map[string]tls.Certificate
}

// newPKI writes a CA, a server certificate and one client certificate
// per name in clients to dir.
func newPKI(t *testing.T, dir string, clients ...string) *pki {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hostile test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := &pki{caFile: write("ca.pem", "CERTIFICATE", caDER), pool: x509.NewCertPool(), clients: map[string]tls.Certificate{}}
	p.pool.AddCert(ca)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{name}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	der, k := leaf(2, serverHost, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	p.serverCert, p.serverKey = write("server.pem", "CERTIFICATE", der), write("server.key", "EC PRIVATE KEY", kb)
	for i, name := range clients {
		der, k := leaf(int64(3+i), name, x509.ExtKeyUsageClientAuth, nil)
		p.clients[name] = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	return p
}

// clientTLS is the TLS configuration of a radsec client with the named
// certificate ("" for none).
func (p *pki) clientTLS(name string) *tls.Config {
	c := &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if name != "" {
		c.Certificates = []tls.Certificate{p.clients[name]}
	}
	return c
}

// radConn is a RADIUS client connection of any transport: a UDP socket
// connected to the server, or a TCP or TLS stream.
type radConn struct {
	c      net.Conn
	stream bool
	br     *bufio.Reader
}

// read returns the next datagram or frame, waiting at most d.
func (rc *radConn) read(d time.Duration) ([]byte, error) {
	rc.c.SetReadDeadline(time.Now().Add(d))
	if rc.stream {
		return readRadiusFrame(rc.br)
	}
	buf := make([]byte, radMaxLen+64)
	n, err := rc.c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func (rc *radConn) write(b []byte) error {
	rc.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := rc.c.Write(b)
	return err
}

// Close closes the socket; a TLS connection without its close_notify,
// which would wait up to 5 s for a server that does not read.
func (rc *radConn) Close() error {
	if tc, ok := rc.c.(*tls.Conn); ok {
		return tc.NetConn().Close()
	}
	return rc.c.Close()
}

// ask sends req and waits d for the answer to it (others, late answers
// to earlier requests, are skipped).
func (rc *radConn) ask(req []byte, secret string, d time.Duration) ([]byte, error) {
	if err := rc.write(req); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, os.ErrDeadlineExceeded
		}
		resp, err := rc.read(left)
		if err != nil {
			return nil, err
		}
		if len(resp) >= radHeaderLen && resp[1] == req[1] {
			return resp, checkResponse(req, resp, secret)
		}
	}
}
