package dedup

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// Scenario files in testdata/ are scripts of requests reaching a server
// whose handler is wrapped by Wrap, one per line:
//
//	NAME: ACR field=value ... [t] => applied       the handler runs for it
//	NAME: REQ field=value ... [t] => replay OTHER  answered with OTHER's answer, handler not run
//	check applied=N                                 the handler has run N times
//
// ACR is a base accounting request (application 3, command 271), REQ a
// test application request. Fields: origin (Origin-Host), e2e (End-to-End
// Identifier), session (Session-Id), type (Accounting-Record-Type: EVENT,
// START, INTERIM, STOP or a number), number (Accounting-Record-Number), ts
// (Event-Timestamp, seconds since 1900), nas (NAS-Identifier); t sets the T
// flag. Every request gets a new Hop-by-Hop Identifier. Each file runs
// against the in-memory store and, when redis-server is installed, the
// Redis store.
func TestScenarioFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		t.Run(name+"/memory", func(t *testing.T) {
			s := NewMemory()
			defer s.Close()
			runScenario(t, f, s)
		})
		t.Run(name+"/redis", func(t *testing.T) {
			runScenario(t, f, newRedisStore(t, ""))
		})
	}
}

var recordTypes = map[string]uint32{"EVENT": 1, "START": 2, "INTERIM": 3, "STOP": 4}

func runScenario(t *testing.T, path string, s Store) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	applied := 0
	h := Wrap(s, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		applied++
		// The answer names the run, so that a replay shows whose it is.
		return message.NewAnswer(req).ResultCode(message.Success).
			Uint32(message.AccountingRecordNumber, 0, true, uint32(applied)).Bytes()
	}, nil)
	answers := map[string][]byte{} // by line name: the answer it got
	hbh := uint32(0)
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := path + ":" + strconv.Itoa(n) + ": " + line
		if rest, ok := strings.CutPrefix(line, "check "); ok {
			k, v, _ := strings.Cut(rest, "=")
			if want, err := strconv.Atoi(v); k != "applied" || err != nil {
				t.Fatalf("%s: want check applied=N", where)
			} else if applied != want {
				t.Fatalf("%s: the handler ran %d times, want %d", where, applied, want)
			}
			continue
		}
		name, rest, ok := strings.Cut(line, ":")
		lhs, rhs, ok2 := strings.Cut(rest, "=>")
		if !ok || !ok2 {
			t.Fatalf("%s: want NAME: CMD fields => applied|replay NAME", where)
		}
		hbh++
		req := scenarioRequest(t, where, strings.Fields(lhs), hbh)
		before := applied
		ans := h(context.Background(), nil, req)
		if ans == nil {
			t.Fatalf("%s: no answer", where)
		}
		answers[strings.TrimSpace(name)] = ans
		want := strings.Fields(rhs)
		switch {
		case len(want) == 1 && want[0] == "applied":
			if applied != before+1 {
				t.Fatalf("%s: not applied (answered from the store: run %d's answer)", where, runOf(ans))
			}
		case len(want) == 2 && want[0] == "replay":
			first, ok := answers[want[1]]
			if !ok {
				t.Fatalf("%s: no line named %q before", where, want[1])
			}
			if applied != before {
				t.Fatalf("%s: applied again (run %d), want a replay of %s", where, applied, want[1])
			}
			// The body, not the header: the peer writes the replay's own
			// Hop-by-Hop Identifier into its header.
			if !bytes.Equal(ans[wire.HeaderLen:], first[wire.HeaderLen:]) {
				t.Fatalf("%s: replayed run %d's answer, want %s's (run %d)", where, runOf(ans), want[1], runOf(first))
			}
		default:
			t.Fatalf("%s: want => applied or => replay NAME", where)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// runOf returns the run number the scenario handler put in its answer.
func runOf(ans []byte) uint32 {
	v, _ := message.Uint32Of(ans, message.AccountingRecordNumber, 0)
	return v
}

func scenarioRequest(t *testing.T, where string, f []string, hbh uint32) []byte {
	t.Helper()
	if len(f) == 0 {
		t.Fatalf("%s: no command", where)
	}
	var b *message.Builder
	switch f[0] {
	case "ACR":
		b = message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable)
	case "REQ":
		b = message.NewRequest(message.CmdTest, message.AppTest, wire.FlagProxiable)
	default:
		t.Fatalf("%s: unknown command %q", where, f[0])
	}
	var e2e uint32
	retransmit := false
	num := func(v string) uint32 {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		return uint32(n)
	}
	// Session-Id goes first, as RFC 6733 wants.
	for _, kv := range f[1:] {
		if k, v, _ := strings.Cut(kv, "="); k == "session" {
			b.String(message.SessionID, 0, true, v)
		}
	}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "session":
		case "origin":
			b.String(message.OriginHost, 0, true, v)
		case "e2e":
			e2e = num(v)
		case "type":
			rt, ok := recordTypes[v]
			if !ok {
				rt = num(v)
			}
			b.Uint32(message.AccountingRecordType, 0, true, rt)
		case "number":
			b.Uint32(message.AccountingRecordNumber, 0, true, num(v))
		case "ts":
			var d [4]byte
			binary.BigEndian.PutUint32(d[:], num(v))
			b.Octets(message.EventTimestamp, 0, true, d[:])
		case "nas":
			b.String(message.NASIdentifier, 0, true, v)
		case "t":
			retransmit = true
		default:
			t.Fatalf("%s: unknown field %q", where, k)
		}
	}
	req := b.Bytes()
	wire.SetEndToEnd(req, e2e)
	wire.SetHopByHop(req, hbh)
	if retransmit {
		wire.SetRetransmit(req)
	}
	return req
}
