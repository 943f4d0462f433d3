package wire_test

import (
	"testing"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/test/benchcmp"
	"github.com/aaatp/aaatp/wire"
)

// A walk over every AVP of the harness's ACR, as a server's request checks
// and dedup's keys make, and a search for its last AVP.
func BenchmarkWalkAVPs(b *testing.B) {
	req := benchcmp.ACR()
	n := 0
	for b.Loop() {
		_ = wire.WalkAVPs(req, func(wire.AVP) bool { n++; return true })
	}
	if n == 0 {
		b.Fatal("no AVP walked")
	}
}

func BenchmarkFindAVP(b *testing.B) {
	req := benchcmp.ACR()
	for b.Loop() {
		if _, ok := wire.FindAVP(req, message.AccountingRecordNumber, 0); !ok {
			b.Fatal("not found")
		}
	}
}

// The check a client makes of every answer before its caller reads it,
// over an answer to the harness's ACR.
func BenchmarkCheckAVPsAnswer(b *testing.B) {
	ans := message.NewAnswer(benchcmp.ACR()).Uint32(message.ResultCode, 0, true, message.Success).Bytes()
	for b.Loop() {
		if wire.CheckAVPs(ans) != nil {
			b.Fatal("malformed")
		}
	}
}
