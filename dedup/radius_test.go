package dedup

import (
	"testing"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

func radiusAcct(t *testing.T, id byte, status byte, ts []byte, delay []byte, extra ...*lradius.AVP) []byte {
	t.Helper()
	r := &radius.Request{Code: lradius.CodeAccountingRequest}
	r.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute("nas1"))
	r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute("sess-1"))
	r.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, status}))
	if ts != nil {
		r.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute(ts))
	}
	if delay != nil {
		r.Attributes.Add(radius.AttrAcctDelayTime, lradius.Attribute(delay))
	}
	r.Attributes = append(r.Attributes, extra...)
	b, _, err := radius.EncodeRequest(r, id, []byte("s"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRADIUSAccountingKey(t *testing.T) {
	ts := []byte{0x66, 0, 0, 1}
	base, ok := RADIUSAccountingKey(radiusAcct(t, 1, 2, ts, nil))
	if !ok {
		t.Fatal("no key for a Stop record")
	}
	// Same record under another Identifier, with Acct-Delay-Time and
	// Proxy-State: the same key.
	same := radiusAcct(t, 77, 2, ts, []byte{0, 0, 0, 9}, &lradius.AVP{Type: radius.AttrProxyState, Attribute: []byte("px")})
	if k, _ := RADIUSAccountingKey(same); k != base {
		t.Error("retried record (new Identifier, Acct-Delay-Time, Proxy-State) has another key")
	}
	// Another status type or timestamp: another record.
	if k, _ := RADIUSAccountingKey(radiusAcct(t, 1, 1, ts, nil)); k == base {
		t.Error("Start and Stop share a key")
	}
	if k, _ := RADIUSAccountingKey(radiusAcct(t, 1, 2, []byte{0x66, 0, 0, 2}, nil)); k == base {
		t.Error("two timestamps share a key")
	}
	// An Interim-Update without Event-Timestamp has no content key.
	if _, ok := RADIUSAccountingKey(radiusAcct(t, 1, 3, nil, nil)); ok {
		t.Error("Interim-Update without Event-Timestamp got a key")
	}
	if _, ok := RADIUSAccountingKey(radiusAcct(t, 1, 2, nil, nil)); !ok {
		t.Error("Stop without Event-Timestamp got no key")
	}
	// Not accounting.
	acc, _, _ := radius.EncodeRequest(&radius.Request{Code: lradius.CodeAccessRequest}, 1, []byte("s"))
	if _, ok := RADIUSAccountingKey(acc); ok {
		t.Error("Access-Request got an accounting key")
	}
}
