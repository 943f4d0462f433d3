package message

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aaatp/aaatp/wire"
)

// Series describes the numbered requests of a RequestTemplate, a load
// generator's. Request n carries Session-Id SessionPrefix followed by n
// in decimal, Origin-Host and Origin-Realm (From), Destination-Realm,
// User-Name, then, for AppAccounting, Accounting-Record-Type START_RECORD
// (one session per request), Accounting-Record-Number n and
// Acct-Application-Id 3, or, for AppTest, the test application's
// Test-Value n.
type Series struct {
	App              uint32 // AppAccounting or AppTest
	From             Identity
	DestinationRealm string
	SessionPrefix    string
	// UserName is the User-Name: with one %d (and no other verb) n goes
	// there; with other verbs it is a format for fmt.Sprintf(UserName, n);
	// without any, the same User-Name for every request.
	UserName string
}

// A RequestTemplate encodes the requests of a Series without a Builder or
// fmt per request: what does not depend on n is encoded once, and each
// request is the template's pieces copied into one new slice, n written
// where it goes. A request is the bytes the Builder would make, its
// Hop-by-Hop and End-to-End ids zero (the sender assigns them). A
// RequestTemplate is safe for concurrent use.
type RequestTemplate struct {
	head      [wire.HeaderLen]byte // the length set per request
	sidPrefix string
	mid       []byte // Origin-Host, Origin-Realm, Destination-Realm
	tail      []byte // the AVPs after User-Name
	numOff    int    // offset in tail of the uint32 that holds n

	user userNames
}

// userNames is a User-Name format taken apart: prefix + n + suffix when
// numbered (a lone %d), else fmt.Sprintf(format, n) when format is set
// (other verbs), else fixed (no verb).
type userNames struct {
	numbered       bool
	prefix, suffix string
	format, fixed  string
}

func parseUserNames(format string) userNames {
	switch pre, suf, found := strings.Cut(format, "%d"); {
	case !strings.Contains(format, "%"):
		return userNames{fixed: format}
	case found && !strings.Contains(pre, "%") && !strings.Contains(suf, "%"):
		return userNames{numbered: true, prefix: pre, suffix: suf}
	default:
		return userNames{format: format}
	}
}

// of returns request n's User-Name.
func (u *userNames) of(n int64) string {
	switch {
	case u.numbered:
		return u.prefix + strconv.FormatInt(n, 10) + u.suffix
	case u.format != "":
		return fmt.Sprintf(u.format, n)
	}
	return u.fixed
}

// NewRequestTemplate returns the template of s's requests; an error when
// s.App is neither AppAccounting nor AppTest.
func NewRequestTemplate(s Series) (*RequestTemplate, error) {
	t := &RequestTemplate{sidPrefix: s.SessionPrefix}
	var tail *Builder
	switch s.App {
	case AppAccounting:
		copy(t.head[:], NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable).b)
		tail = NewRequest(0, 0, 0).Uint32(AccountingRecordType, 0, true, 2).
			Uint32(AccountingRecordNumber, 0, true, 0).Uint32(AcctApplicationID, 0, true, AppAccounting)
		t.numOff = 12 + 8 // after Accounting-Record-Type and the number's AVP header
	case AppTest:
		copy(t.head[:], NewRequest(CmdTest, AppTest, wire.FlagProxiable).b)
		tail = NewRequest(0, 0, 0).Uint32(AVPTestValue, VendorTest, true, 0)
		t.numOff = 12 // after the vendor AVP's header
	default:
		return nil, errors.New("message: a request template is of AppAccounting or AppTest, not application " + strconv.FormatUint(uint64(s.App), 10))
	}
	t.tail = tail.b[wire.HeaderLen:]
	t.mid = NewRequest(0, 0, 0).String(OriginHost, 0, true, s.From.Host).String(OriginRealm, 0, true, s.From.Realm).
		String(DestinationRealm, 0, true, s.DestinationRealm).b[wire.HeaderLen:]
	t.user = parseUserNames(s.UserName)
	return t, nil
}

// UserNameOf returns the User-Name of request n for format, as a
// RequestTemplate of a Series with that UserName builds it: n in place
// of a lone %d, fmt.Sprintf(format, n) with other verbs, format itself
// without any.
func UserNameOf(format string, n int64) string {
	u := parseUserNames(format)
	return u.of(n)
}

// Build encodes request n, with userName as its User-Name instead of the
// Series' when it is not empty. The slice is the caller's.
func (t *RequestTemplate) Build(n int64, userName string) []byte {
	var num [20]byte
	digits := strconv.AppendInt(num[:0], n, 10)
	numbered := false
	if userName == "" {
		// Numbered, the digits are written in place below: no string.
		if numbered = t.user.numbered; !numbered {
			userName = t.user.of(n)
		}
	}
	sidLen, userLen := len(t.sidPrefix)+len(digits), len(userName)
	if numbered {
		userLen = len(t.user.prefix) + len(digits) + len(t.user.suffix)
	}
	total := wire.HeaderLen + avpLen(0, sidLen) + len(t.mid) + avpLen(0, userLen) + len(t.tail)
	b := append(make([]byte, 0, total), t.head[:]...)
	b[1], b[2], b[3] = byte(total>>16), byte(total>>8), byte(total)
	b = appendHeader(b, SessionID, 0, true, sidLen)
	b = pad(append(append(b, t.sidPrefix...), digits...))
	b = append(b, t.mid...)
	b = appendHeader(b, UserName, 0, true, userLen)
	if numbered {
		b = append(append(append(b, t.user.prefix...), digits...), t.user.suffix...)
	} else {
		b = append(b, userName...)
	}
	b = pad(b)
	off := len(b)
	b = append(b, t.tail...)
	binary.BigEndian.PutUint32(b[off+t.numOff:], uint32(n))
	return b
}
