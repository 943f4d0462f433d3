package message

import (
	"bytes"
	"errors"
	"testing"

	"github.com/aaatp/aaatp/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Builder never writes a length its header cannot hold: the longest
// message builds with its exact length, one AVP more fails with ErrTooLong
// (Build) or a panic (Bytes), not a wrapped length.
func TestBuilderRefusesTooLong(t *testing.T) {
	big := make([]byte, wire.MaxMessageLen&^3-wire.HeaderLen-8) // one AVP filling the longest message
	b, err := NewRequest(CmdTest, AppTest, 0).Octets(AVPTestValue, 0, true, big).Build()
	require.NoError(t, err)
	require.Equal(t, wire.MaxMessageLen&^3, len(b))
	assert.Equal(t, uint32(len(b)), wire.Length(b))

	over := func() *Builder {
		return NewRequest(CmdTest, AppTest, 0).Octets(AVPTestValue, 0, true, big).Uint32(AVPTestValue, 0, true, 1)
	}
	b, err = over().Build()
	assert.Nil(t, b)
	assert.ErrorIs(t, err, ErrTooLong)
	assert.Contains(t, err.Error(), "16777224 octets, at most 16777215")
	assert.PanicsWithError(t, err.Error(), func() { over().Bytes() })
	// A group left open is closed before the check.
	_, err = NewRequest(CmdTest, AppTest, 0).Group(AVPTestValue, 0, true).Octets(AVPTestValue, 0, true, big).Build()
	assert.ErrorIs(t, err, ErrTooLong)
}

// An answer to a request near wire.MaxMessageLen whose Session-Id is most
// of it left its header saying 24 octets for a 16 MiB answer: the
// Session-Id is now left out when it is longer than MaxEchoedSessionID,
// and echoed when it is not, and the header always says the answer's
// length.
func TestAnswersToHugeSessionIDs(t *testing.T) {
	from := Identity{Host: "server.example.net", Realm: "example.net"}
	for _, n := range []int{wire.MaxMessageLen - 64, MaxEchoedSessionID + 1, MaxEchoedSessionID} {
		sid := bytes.Repeat([]byte("s"), n)
		req := NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable).Octets(SessionID, 0, true, sid).Bytes()
		h, err := wire.ParseHeader(req)
		require.NoError(t, err)
		require.NoError(t, wire.Validate(h, wire.MaxMessageLen))

		errAns := ErrorAnswer(req, from, InvalidAVPValue, "a long enough refusal").
			Group(FailedAVP, 0, true).Octets(SessionID, 0, true, sid[:256]).End().Bytes()
		okAns := SuccessAnswer(req, from, AVPID{Code: AccountingRecordType})
		for name, ans := range map[string][]byte{"ErrorAnswer": errAns, "SuccessAnswer": okAns} {
			assert.Equal(t, uint32(len(ans)), wire.Length(ans), "%s to a Session-Id of %d", name, n)
			assert.LessOrEqual(t, len(ans), wire.MaxMessageLen)
			got, echoed := wire.FindAVP(ans, SessionID, 0)
			assert.Equal(t, n <= MaxEchoedSessionID, echoed, "%s to a Session-Id of %d", name, n)
			if echoed {
				assert.Equal(t, len(sid), len(got))
			}
		}
		assert.Equal(t, successReference(req, from, AVPID{Code: AccountingRecordType}), okAns)
	}
}

// SuccessAnswer panics, as Bytes does, rather than write a wrong length.
func TestSuccessAnswerTooLong(t *testing.T) {
	req := NewRequest(CmdAccounting, AppAccounting, 0).String(SessionID, 0, true, "s;1").Bytes()
	host := string(make([]byte, wire.MaxMessageLen))
	defer func() {
		err, _ := recover().(error)
		assert.True(t, errors.Is(err, ErrTooLong), "recovered %v", err)
	}()
	SuccessAnswer(req, Identity{Host: host})
}
