package loadbalance

import (
	"testing"
)

// Servers that come into service one after another before any request
// share the first requests by weight: a table nothing was picked from
// holds no conversation to keep.
func TestServersUpBeforeTrafficShareIt(t *testing.T) {
	b, err := New(Pearson, []Server{{Name: "s1", Weight: 1}, {Name: "s2", Weight: 1}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"s1", "s2"} {
		if _, err := b.SetState(n, Down); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"s2", "s1"} {
		if _, err := b.SetState(n, InService); err != nil {
			t.Fatal(err)
		}
	}
	cs := startConversations(t, b, 2000, "up")
	n := 0
	for _, c := range cs {
		if c.server == "s1" {
			n++
		}
	}
	if n < 800 || n > 1200 {
		t.Fatalf("s1 got %d of %d new conversations, want about half", n, len(cs))
	}
}
