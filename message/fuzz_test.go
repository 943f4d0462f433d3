package message

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	"github.com/aaatp/aaatp/wire"
)

// AddressOf accepts exactly the Address data of an IP family with its
// exact length (RFC 6733 4.3.1), returns the address it holds, and the
// Builder writes that address back as the same data (an IPv4-mapped IPv6
// address as the IPv4 address it maps, the Builder's choice).
func FuzzAddressOf(f *testing.F) {
	f.Add([]byte{0, 1, 10, 0, 0, 1})
	f.Add([]byte{0, 2, 0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1})
	f.Add([]byte{0, 1, 10, 0, 0})
	f.Add([]byte{0, 1, 10, 0, 0, 1, 0})
	f.Add([]byte{0, 2, 10, 0, 0, 1})
	f.Add([]byte{0, 8, '1', '2', '3', '4'})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, d []byte) {
		addr, ok := AddressOf(d)
		want := len(d) == 6 && d[0] == 0 && d[1] == 1 || len(d) == 18 && d[0] == 0 && d[1] == 2
		if ok != want {
			t.Fatalf("AddressOf(%x) ok = %v", d, ok)
		}
		if !ok {
			if addr.IsValid() {
				t.Fatalf("AddressOf(%x) refused it but returned %v", d, addr)
			}
			return
		}
		if !bytes.Equal(addr.AsSlice(), d[2:]) || addr.Is4() != (d[1] == 1) {
			t.Fatalf("AddressOf(%x) = %v", d, addr)
		}
		msg := NewRequest(CmdTest, AppTest, 0).Address(HostIPAddress, 0, true, addr).Bytes()
		back, found := wire.FindAVP(msg, HostIPAddress, 0)
		wantBack := d
		if addr.Is4In6() {
			wantBack = append([]byte{0, 1}, d[14:]...)
		}
		if !found || !bytes.Equal(back, wantBack) {
			t.Fatalf("Address(%v) wrote %x, want %x", addr, back, wantBack)
		}
	})
}

// Uint32Of, StringOf and ResultCodeOf read what wire.FindAVP finds, on
// any bytes: an Unsigned32 only with exactly 4 octets, a string always;
// CommandName names a framed message by its command and R bit.
func FuzzReaders(f *testing.F) {
	acr := NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable).String(SessionID, 0, true, "c;1;2").
		Uint32(AccountingRecordType, 0, true, 2).Uint32(AVPTestValue, VendorTest, true, 7).Bytes()
	f.Add(acr, uint32(AccountingRecordType), uint32(0))
	f.Add(acr, uint32(AVPTestValue), uint32(VendorTest))
	f.Add(acr, uint32(SessionID), uint32(0))
	f.Add(NewAnswer(acr).Octets(ResultCode, 0, true, []byte{0, 0, 7}).ResultCode(Success).Bytes(), uint32(ResultCode), uint32(0))
	f.Add(NewAnswer(acr).ResultCode(TooBusy).Bytes()[:30], uint32(ResultCode), uint32(0))
	f.Add(NewRequest(123456, 0, 0).Bytes(), uint32(1), uint32(0))
	f.Add([]byte{1, 0, 0}, uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, msg []byte, code, vendor uint32) {
		d, ok := wire.FindAVP(msg, code, vendor)
		v, vok := Uint32Of(msg, code, vendor)
		if vok != (ok && len(d) == 4) || vok && v != binary.BigEndian.Uint32(d) || !vok && v != 0 {
			t.Fatalf("Uint32Of = %d, %v where FindAVP finds %x, %v", v, vok, d, ok)
		}
		s, sok := StringOf(msg, code, vendor)
		if sok != ok || s != string(d) {
			t.Fatalf("StringOf = %q, %v where FindAVP finds %x, %v", s, sok, d, ok)
		}
		rc, rok := ResultCodeOf(msg)
		if wrc, wok := Uint32Of(msg, ResultCode, 0); rc != wrc || rok != wok {
			t.Fatalf("ResultCodeOf = %d, %v; Uint32Of(Result-Code) = %d, %v", rc, rok, wrc, wok)
		}
		if len(msg) < wire.HeaderLen {
			return // CommandName, like the header getters, wants a header
		}
		name, cmd := CommandName(msg), wire.CommandCode(msg)
		suffix := "A"
		if wire.IsRequest(msg) {
			suffix = "R"
		}
		generic := "cmd-" + strconv.FormatUint(uint64(cmd), 10) + "-" + suffix
		if !strings.HasSuffix(name, suffix) || KnownCommand(cmd) == (name == generic) || !KnownCommand(cmd) && name != generic {
			t.Fatalf("CommandName = %q for command %d, flags %#x", name, cmd, wire.Flags(msg))
		}
	})
}

// ErrorAnswer and NewAnswer, on any request a frame reader lets through:
// the answer is well framed and its AVPs well formed; it has the
// request's command, application and ids, its P bit, neither R nor T, and
// the E bit exactly for a 3xxx result; the request's first Session-Id
// comes first, then the Result-Code, the identity and Error-Message
// given, and every top-level Proxy-Info of the request (vendor 0), in
// order (RFC 6733 6.2); every AVP has the M bit but Error-Message, and
// none the V bit.
func FuzzErrorAnswer(f *testing.F) {
	req := NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable|wire.FlagRetransmit).
		String(OriginHost, 0, true, "client.example.net").String(SessionID, 0, true, "client.example.net;1;2").Bytes()
	f.Add(req, uint32(TooBusy), "server.example.net", "example.net", "busy")
	f.Add(req, uint32(Success), "", "", "")
	f.Add(NewRequest(wire.CmdDeviceWatchdog, AppCommon, 0).String(SessionID, 7, true, "vendor").
		String(SessionID, 0, true, "").String(SessionID, 0, true, "second").Bytes(), uint32(InvalidAVPValue), "h", "", "x")
	f.Add(append(NewRequest(CmdTest, AppTest, 0).Bytes()[:20:20], 0, 0, 1, 7, 0, 0, 0, 4), uint32(5014), "h", "r", "")
	f.Add(withRaw(req, proxyInfo("dra.example.net", "s1"), proxyInfo("x", "")), uint32(Success), "", "", "")
	// A code-284 (Proxy-Info) AVP the oracle once left out (review 34b, finding 4).
	f.Add([]byte("\x01\x00\x00P0000000000000000\x00\x00\x01\x1c0\x00\x0000000000000000000000000000000000000000000000000000000"), uint32(1959), "", "0", "0")
	f.Fuzz(func(t *testing.T, req []byte, rc uint32, host, realm, errMsg string) {
		if h, err := wire.ParseHeader(req); err != nil || wire.Validate(h, wire.DefaultMaxMessageLen) != nil || int(h.Length) != len(req) {
			return // a frame reader refuses it before
		}
		plain := NewAnswer(req).Bytes()
		ans := ErrorAnswer(req, Identity{host, realm}, rc, errMsg).Bytes()
		for _, a := range [][]byte{plain, ans} {
			h, err := wire.ParseHeader(a)
			if err != nil || wire.Validate(h, wire.MaxMessageLen) != nil || int(h.Length) != len(a) {
				t.Fatalf("answer not well framed: %x", a)
			}
			if bad := wire.CheckAVPs(a); bad != nil {
				t.Fatalf("answer has a malformed AVP: %+v", bad)
			}
			if wire.CommandCode(a) != wire.CommandCode(req) || wire.AppID(a) != wire.AppID(req) ||
				wire.HopByHop(a) != wire.HopByHop(req) || wire.EndToEnd(a) != wire.EndToEnd(req) {
				t.Fatal("answer's command, application or ids differ from the request's")
			}
			if fl := wire.Flags(a); fl&^wire.FlagError != wire.Flags(req)&wire.FlagProxiable {
				t.Fatalf("answer flags %#x to request flags %#x", fl, wire.Flags(req))
			}
		}
		if len(plain) != wire.HeaderLen || wire.Flags(plain)&wire.FlagError != 0 {
			t.Fatalf("NewAnswer(req).Bytes() = %x", plain)
		}
		if e := wire.Flags(ans)&wire.FlagError != 0; e != (rc >= 3000 && rc < 4000) {
			t.Fatalf("E bit %v for result %d", e, rc)
		}
		var got []wire.AVP
		_ = wire.WalkAVPs(ans, func(a wire.AVP) bool { got = append(got, a); return true })
		var want []wire.AVP
		if sid, ok := wire.FindAVP(req, SessionID, 0); ok {
			want = append(want, wire.AVP{Code: SessionID, Data: sid})
		}
		want = append(want, wire.AVP{Code: ResultCode, Data: binary.BigEndian.AppendUint32(nil, rc)})
		for _, a := range []wire.AVP{{Code: OriginHost, Data: []byte(host)}, {Code: OriginRealm, Data: []byte(realm)}, {Code: ErrorMessage, Data: []byte(errMsg)}} {
			if len(a.Data) > 0 {
				want = append(want, a)
			}
		}
		// A request a frame reader lets through is far shorter than
		// MaxEchoedSessionID, so every Proxy-Info is echoed.
		_ = wire.WalkAVPs(req, func(a wire.AVP) bool {
			if a.Code == ProxyInfo && a.Vendor == 0 {
				want = append(want, wire.AVP{Code: ProxyInfo, Data: a.Data})
			}
			return true
		})
		if len(got) != len(want) {
			t.Fatalf("answer has %d AVPs, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i].Code != want[i].Code || got[i].Vendor != 0 || !bytes.Equal(got[i].Data, want[i].Data) {
				t.Fatalf("answer AVP %d is %d = %q, want %d = %q", i, got[i].Code, got[i].Data, want[i].Code, want[i].Data)
			}
		}
		for off := wire.HeaderLen; off+8 <= len(ans); {
			code, fl := binary.BigEndian.Uint32(ans[off:]), ans[off+4]
			if fl&flagV != 0 || (fl&flagM != 0) == (code == ErrorMessage) {
				t.Fatalf("answer AVP %d has flags %#x", code, fl)
			}
			off += (int(binary.BigEndian.Uint32(ans[off+4:])&0xffffff) + 3) &^ 3
		}
	})
}
