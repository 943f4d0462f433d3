package testhelp

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// SelfSigned writes into dir (cert.pem, key.pem) a self-signed ECDSA
// certificate for name and 127.0.0.1, valid an hour either side of now,
// usable as its own CA, by a server and by a client.
func SelfSigned(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return WritePEM(t, dir, "cert.pem", "CERTIFICATE", der), writeKey(t, dir, "key.pem", key)
}

// PKI is a CA, a server certificate for 127.0.0.1 signed by it and a
// client certificate, all PEM files in Dir.
type PKI struct {
	Dir                   string
	CAFile                string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	OtherCAFile           string // a CA that signed nothing here
}

// NewPKI writes a PKI into a temporary directory of t.
func NewPKI(t testing.TB) PKI {
	t.Helper()
	dir := t.TempDir()
	p := PKI{Dir: dir}
	caKey, caCert, caDER := newCA(t, "aaatp test CA")
	p.CAFile = WritePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	_, _, otherDER := newCA(t, "unrelated CA")
	p.OtherCAFile = WritePEM(t, dir, "other-ca.pem", "CERTIFICATE", otherDER)

	leaf := func(name string, usage x509.ExtKeyUsage, ips []net.IP) (string, string) {
		key := newKey(t)
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
		if err != nil {
			t.Fatal(err)
		}
		return WritePEM(t, dir, name+".pem", "CERTIFICATE", der), writeKey(t, dir, name+"-key.pem", key)
	}
	p.ServerCert, p.ServerKey = leaf("server.example.net", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.ClientCert, p.ClientKey = leaf("client.example.net", x509.ExtKeyUsageClientAuth, nil)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	key := newKey(t)
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
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func writeKey(t testing.TB, dir, name string, key *ecdsa.PrivateKey) string {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return WritePEM(t, dir, name, "EC PRIVATE KEY", der)
}

// WritePEM writes der as one PEM block of type typ to dir/name and
// returns the path.
func WritePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
