package testhelp

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

func TestSelfSignedLoadsAndVerifies(t *testing.T) {
	cert, key := SelfSigned(t, t.TempDir(), "node.example.net")
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "node.example.net"}); err != nil {
		t.Errorf("verify by name: %v", err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("verify 127.0.0.1: %v", err)
	}
}

func TestPKIChains(t *testing.T) {
	p := NewPKI(t)
	roots := pool(t, p.CAFile)
	other := pool(t, p.OtherCAFile)
	for _, c := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
	}{{p.ServerCert, p.ServerKey, x509.ExtKeyUsageServerAuth}, {p.ClientCert, p.ClientKey, x509.ExtKeyUsageClientAuth}} {
		pair, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s: %v", leaf.Subject.CommonName, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: other, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err == nil {
			t.Errorf("%s verifies against the unrelated CA", leaf.Subject.CommonName)
		}
	}
}

func pool(t *testing.T, file string) *x509.CertPool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatalf("%s: no certificate", file)
	}
	return p
}

func TestTail(t *testing.T) {
	if got := Tail("abcdef", 3); got != "...def" {
		t.Errorf("Tail cut = %q", got)
	}
	if got := Tail("abc", 3); got != "abc" {
		t.Errorf("Tail short = %q", got)
	}
}

// RecordBuildInputs reads the module's non-test sources, go.mod among
// them, from a package directory below the module root.
func TestRecordBuildInputs(t *testing.T) {
	n, err := RecordBuildInputs()
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 { // this module has hundreds of non-test Go files
		t.Errorf("read %d files, want the module's non-test sources", n)
	}
}
