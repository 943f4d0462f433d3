package view

import "testing"

func TestStringSharesTheBytes(t *testing.T) {
	b := []byte("nas1.example.net")
	s := String(b)
	if s != "nas1.example.net" {
		t.Fatalf("String = %q", s)
	}
	b[0] = 'N' // shared memory: the string sees the change
	if s[0] != 'N' {
		t.Fatalf("String copied the bytes: %q", s)
	}
	if String(nil) != "" || String([]byte{}) != "" {
		t.Fatal("empty input must give the empty string")
	}
	if n := testing.AllocsPerRun(100, func() { _ = String(b) }); n != 0 {
		t.Fatalf("String allocates %v times", n)
	}
}
