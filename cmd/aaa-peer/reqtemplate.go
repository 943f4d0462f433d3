package main

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// requestTemplate encodes the client's requests without a builder or fmt
// per request: everything that does not depend on the request number is
// encoded once, and each request is the template's pieces copied into one
// new slice (Send takes it over), the number written in decimal into the
// Session-Id and the NAI and in binary into the numbered AVP.
//
// A request n is, for --app acct: Session-Id "<origin-host>;<start>;<n>",
// Origin-Host, Origin-Realm, Destination-Realm, User-Name (--nai with n),
// Accounting-Record-Type START_RECORD (one session per request),
// Accounting-Record-Number n, Acct-Application-Id 3; for --app test the
// same up to User-Name, then test_app's Test-Value n.
type requestTemplate struct {
	head      [wire.HeaderLen]byte // length and End-to-End set per request
	sidPrefix string               // "<origin-host>;<start>;"
	mid       []byte               // Origin-Host, Origin-Realm, Destination-Realm AVPs
	tail      []byte               // the AVPs after User-Name
	numOff    int                  // offset in tail of the uint32 that holds n

	// User-Name: naiPrefix + n + naiSuffix when naiNumbered, else naiFixed
	// when naiFormat is empty, else fmt.Sprintf(naiFormat, n) (a format
	// other than one plain %d: the slow path).
	naiNumbered          bool
	naiPrefix, naiSuffix string
	naiFixed             string
	naiFormat            string
}

const (
	avpSessionID = message.SessionID
	avpUserName  = message.UserName
	avpFlagM     = 0x40
)

func newRequestTemplate(o *clientOptions, start int64) *requestTemplate {
	t := &requestTemplate{sidPrefix: o.originHost + ";" + strconv.FormatInt(start, 10) + ";"}
	var b *message.Builder
	if o.app == "test" {
		b = message.NewRequest(message.CmdTest, message.AppTest, wire.FlagProxiable)
	} else {
		b = message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable)
	}
	copy(t.head[:], b.Bytes()[:wire.HeaderLen])
	t.mid = message.NewRequest(0, 0, 0).
		String(message.OriginHost, 0, true, o.originHost).
		String(message.OriginRealm, 0, true, o.originRealm).
		String(message.DestinationRealm, 0, true, o.destRealm).
		Bytes()[wire.HeaderLen:]
	if o.app == "test" {
		t.tail = message.NewRequest(0, 0, 0).Uint32(message.AVPTestValue, message.VendorTest, true, 0).Bytes()[wire.HeaderLen:]
		t.numOff = 12 // vendor AVP header
	} else {
		t.tail = message.NewRequest(0, 0, 0).
			Uint32(message.AccountingRecordType, 0, true, 2).
			Uint32(message.AccountingRecordNumber, 0, true, 0).
			Uint32(message.AcctApplicationID, 0, true, message.AppAccounting).
			Bytes()[wire.HeaderLen:]
		t.numOff = 12 + 8 // after Accounting-Record-Type (12 bytes) and the number's AVP header
	}
	switch pre, suf, found := strings.Cut(o.nai, "%d"); {
	case !strings.Contains(o.nai, "%"):
		t.naiFixed = o.nai
	case found && !strings.Contains(pre, "%") && !strings.Contains(suf, "%"):
		t.naiNumbered, t.naiPrefix, t.naiSuffix = true, pre, suf
	default:
		t.naiFormat = o.nai
	}
	return t
}

func padded(n int) int { return (n + 3) &^ 3 }

// putAVPHeader writes a mandatory, vendor-less AVP header for dataLen
// bytes of data at b[0:8].
func putAVPHeader(b []byte, code uint32, dataLen int) {
	binary.BigEndian.PutUint32(b, code)
	l := 8 + dataLen
	b[4], b[5], b[6], b[7] = avpFlagM, byte(l>>16), byte(l>>8), byte(l)
}

// build encodes request n with the --nai User-Name, or with user when it
// is not empty, and a fresh End-to-End id.
func (t *requestTemplate) build(n int64, user string) []byte {
	var num [20]byte
	digits := strconv.AppendInt(num[:0], n, 10)
	numbered := false
	if user == "" {
		switch {
		case t.naiNumbered:
			numbered = true
		case t.naiFormat != "":
			user = fmt.Sprintf(t.naiFormat, n)
		default:
			user = t.naiFixed
		}
	}
	sidLen := len(t.sidPrefix) + len(digits)
	naiLen := len(user)
	if numbered {
		naiLen = len(t.naiPrefix) + len(digits) + len(t.naiSuffix)
	}
	total := wire.HeaderLen + 8 + padded(sidLen) + len(t.mid) + 8 + padded(naiLen) + len(t.tail)
	b := make([]byte, total) // zeroed: the padding is
	copy(b, t.head[:])
	b[1], b[2], b[3] = byte(total>>16), byte(total>>8), byte(total)
	off := wire.HeaderLen
	putAVPHeader(b[off:], avpSessionID, sidLen)
	off += 8
	copy(b[off+copy(b[off:], t.sidPrefix):], digits)
	off += padded(sidLen)
	off += copy(b[off:], t.mid)
	putAVPHeader(b[off:], avpUserName, naiLen)
	off += 8
	if numbered {
		o := off + copy(b[off:], t.naiPrefix)
		o += copy(b[o:], digits)
		copy(b[o:], t.naiSuffix)
	} else {
		copy(b[off:], user)
	}
	off += padded(naiLen)
	copy(b[off:], t.tail)
	binary.BigEndian.PutUint32(b[off+t.numOff:], uint32(n))
	wire.SetEndToEnd(b, peer.NextEndToEnd())
	return b
}
