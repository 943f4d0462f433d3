package loadbalance

import (
	"errors"
	"fmt"
	"testing"
)

// A Picker keeps the table of its moment: a change makes a new one and
// leaves the old one as it was.
func TestPickerIsASnapshot(t *testing.T) {
	b, err := New(Pearson, []Server{{Name: "s1", Weight: 1}, {Name: "s2", Weight: 1}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := b.Picker()
	if before.p != b.Picker().p {
		t.Fatal("two Pickers of one moment differ")
	}
	if _, err := b.SetState("s1", Down); err != nil {
		t.Fatal(err)
	}
	after := b.Picker()
	if after.p == before.p {
		t.Fatal("a change kept the Picker")
	}
	got := map[string]int{}
	for i := range 200 {
		r := Request{NAI: fmt.Sprintf("user%d@example.net", i)}
		s, err := before.Pick(r)
		if err != nil {
			t.Fatal(err)
		}
		got[s.Name]++
		if s, err := after.Pick(r); err != nil || s.Name != "s2" {
			t.Fatalf("after s1 went down: %v %v", s.Name, err)
		}
	}
	if got["s1"] == 0 || got["s2"] == 0 {
		t.Fatalf("the Picker before the change picked %v", got)
	}
	if _, err := (Picker{}).Pick(Request{NAI: "x"}); !errors.Is(err, ErrNoServer) {
		t.Fatalf("zero Picker: %v", err)
	}
}
