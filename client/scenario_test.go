package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/internal/testhook"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// TestScenarios runs every testdata/*.txt script: a Client over net.Pipe
// to fake servers, in virtual time (synctest), driven line by line. The
// commands are documented in scriptCommands below; a line starting with #
// is a comment. A script whose header says "known-broken: why" documents a
// defect not fixed yet: it must fail (the test is then skipped, saying
// why), and passing makes the test fail so that the line is removed.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			lines, broken := readScript(t, f)
			var failure string
			synctest.Test(t, func(t *testing.T) {
				s := &scenario{t: t, file: f}
				failure = s.run(lines)
			})
			switch {
			case broken != "" && failure != "":
				t.Skipf("known broken (%s): %s", broken, failure)
			case broken != "":
				t.Errorf("passes now: remove its known-broken line (%s)", broken)
			case failure != "":
				t.Error(failure)
			}
		})
	}
}

type scriptLine struct {
	no     int
	fields []string
}

func readScript(t *testing.T, path string) (lines []scriptLine, broken string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for no := 1; sc.Scan(); no++ {
		l := strings.TrimSpace(sc.Text())
		if after, ok := strings.CutPrefix(l, "# known-broken:"); ok {
			broken = strings.TrimSpace(after)
			continue
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines = append(lines, scriptLine{no, strings.Fields(l)})
	}
	return lines, broken
}

// scriptCommands, one per line:
//
//	servers a b [dedup]        fake servers a.example.net, b.example.net
//	                           (URLs tcp://a:3868...); dedup: one shared store
//	mode failover|balance      the Client's mode (default failover)
//	set deadline D|default     Config.RequestTimeout (default: 1h; "default": unset)
//	set max-connections N      Config.MaxConnections
//	start                      New, then wait until every dialed peer is OKAY
//	handler a ok|silent|busy|unable|reject|delay D
//	                           how server a answers requests (2001, never,
//	                           3004, 3002, 5012, 2001 after D)
//	set forward-t on           Config.ForwardRetransmitFlag
//	freeze a / thaw a          server a stops reading and writing / resumes
//	drop a                     server a's connections are reset
//	send r1 [dest=H] [session=S] [record=start|interim|stop] [number=N] [ts=N] [t-flag]
//	                           a Send in the background, End-to-End id by name
//	hook after-queue r1 D      the first queueing of r1 stalls its sender for D
//	sleep D                    virtual time passes
//	close                      Client.Close in the background
//	raw a / raw send r1 / raw dpr
//	                           a hand-driven client connection to server a
//	expect ...                 see expect
type scenario struct {
	t    *testing.T
	file string
	line int

	mode     Mode
	deadline time.Duration
	maxConns int
	forwardT bool
	servers  map[string]*scenServer
	order    []string
	store    *dedup.Memory
	n        network
	c        *Client
	closing  sync.WaitGroup

	mu      sync.Mutex
	applied map[uint32]int
	reqs    map[string]*scenReq
	nextID  uint32

	raw *rawConn
}

type scenServer struct {
	name string
	f    *fakeServer

	mu    sync.Mutex
	kind  string
	delay time.Duration
}

type scenReq struct {
	id   uint32
	done chan struct{}
	ans  []byte
	err  error
}

type scriptError struct{ msg string }

func (s *scenario) failf(format string, args ...any) {
	panic(scriptError{fmt.Sprintf("%s:%d: %s", filepath.Base(s.file), s.line, fmt.Sprintf(format, args...))})
}

// run executes the script and returns the first failure, "" if none.
func (s *scenario) run(lines []scriptLine) (failure string) {
	s.servers = map[string]*scenServer{}
	s.applied = map[uint32]int{}
	s.reqs = map[string]*scenReq{}
	s.deadline = time.Hour
	s.nextID = 1000
	defer s.teardown()
	defer func() {
		if r := recover(); r != nil {
			se, ok := r.(scriptError)
			if !ok {
				panic(r)
			}
			failure = se.msg
		}
	}()
	for _, l := range lines {
		s.line = l.no
		s.exec(l.fields)
	}
	return ""
}

func (s *scenario) teardown() {
	testhook.AfterQueue = nil
	for _, sv := range s.servers {
		sv.f.unfreeze()
	}
	if s.raw != nil {
		s.raw.tc.Close()
		s.raw.wg.Wait()
	}
	if s.c != nil {
		s.c.Close(context.Background())
	}
	s.closing.Wait()
	for _, sv := range s.servers {
		sv.f.close()
	}
	if s.store != nil {
		s.store.Close()
	}
	// Every Send returned exactly once (the Client is closed: none waits).
	for name, r := range s.reqs {
		select {
		case <-r.done:
		case <-time.After(24 * time.Hour):
			s.t.Errorf("%s: request %s never returned", s.file, name)
		}
	}
}

func (s *scenario) dur(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		s.failf("bad duration %q", v)
	}
	return d
}

func (s *scenario) server(name string) *scenServer {
	sv := s.servers[name]
	if sv == nil {
		s.failf("no server %q", name)
	}
	return sv
}

func (s *scenario) req(name string) *scenReq {
	r := s.reqs[name]
	if r == nil {
		s.failf("no request %q", name)
	}
	return r
}

func (s *scenario) exec(f []string) {
	switch f[0] {
	case "servers":
		for _, name := range f[1:] {
			if name == "dedup" {
				s.store = dedup.NewMemory()
				continue
			}
			s.addServer(name)
		}
	case "mode":
		m, err := ParseMode(f[1])
		if err != nil {
			s.failf("%v", err)
		}
		s.mode = m
	case "set":
		switch f[1] {
		case "deadline":
			if f[2] == "default" {
				s.deadline = 0
			} else {
				s.deadline = s.dur(f[2])
			}
		case "max-connections":
			s.maxConns, _ = strconv.Atoi(f[2])
		case "forward-t":
			s.forwardT = f[2] == "on"
		default:
			s.failf("unknown setting %q", f[1])
		}
	case "start":
		s.start()
	case "handler":
		sv := s.server(f[1])
		sv.mu.Lock()
		sv.kind = f[2]
		if f[2] == "delay" {
			sv.delay = s.dur(f[3])
		}
		sv.mu.Unlock()
	case "freeze":
		s.server(f[1]).f.freeze()
	case "thaw":
		s.server(f[1]).f.unfreeze()
	case "drop":
		s.server(f[1]).f.dropConnections()
	case "send":
		s.send(f[1], f[2:])
	case "hook":
		if f[1] != "after-queue" {
			s.failf("unknown hook %q", f[1])
		}
		id, d := s.idOf(f[2]), s.dur(f[3])
		var stalled atomic.Bool
		testhook.AfterQueue = func(e2e uint32) {
			if e2e == id && stalled.CompareAndSwap(false, true) {
				time.Sleep(d)
			}
		}
	case "sleep":
		time.Sleep(s.dur(f[1]))
	case "close":
		c := s.c
		s.closing.Add(1)
		go func() {
			defer s.closing.Done()
			c.Close(context.Background())
		}()
	case "raw":
		s.rawCmd(f[1:])
	case "expect":
		synctest.Wait()
		s.expect(f[1:])
	default:
		s.failf("unknown command %q", f[0])
	}
}

func (s *scenario) addServer(name string) {
	host := name + ".example.net"
	sv := &scenServer{name: name, f: newFakeServer(host), kind: "ok"}
	answer := func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		s.mu.Lock()
		s.applied[wire.EndToEnd(req)]++
		s.mu.Unlock()
		sv.mu.Lock()
		kind, delay := sv.kind, sv.delay
		sv.mu.Unlock()
		switch kind {
		case "silent":
			return nil
		case "busy", "unable", "reject":
			rc := map[string]uint32{"busy": message.TooBusy, "unable": message.UnableToDeliver, "reject": message.UnableToComply}[kind]
			return message.NewAnswer(req).ResultCode(rc). // 3xxx: the E bit
									String(message.OriginHost, 0, true, host).
									String(message.OriginRealm, 0, true, "example.net").Bytes()
		case "delay":
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil
			}
		}
		return sv.f.handler(ctx, p, req)
	}
	sv.f.handle = answer
	s.servers[name] = sv
	s.order = append(s.order, name)
}

func (s *scenario) start() {
	if s.store != nil {
		for _, sv := range s.servers {
			sv.f.handle = dedup.Wrap(s.store, sv.f.handle, nil)
		}
	}
	s.n = network{}
	var urls []string
	for _, name := range s.order {
		u := "tcp://" + name + ":3868"
		s.n[u] = s.servers[name].f
		urls = append(urls, u)
	}
	cfg := clientConfig(s.n, s.mode, urls...)
	cfg.RequestTimeout = s.deadline
	cfg.Peer.RequestTimeout = s.deadline
	cfg.MaxConnections = s.maxConns
	cfg.ForwardRetransmitFlag = s.forwardT
	c, err := New(cfg)
	if err != nil {
		s.failf("New: %v", err)
	}
	s.c = c
	synctest.Wait()
	for _, p := range c.Peers() {
		if p != nil && p.State() != watchdog.Okay {
			s.failf("peer %s is %s after start", p.Name(), p.State())
		}
	}
}

func (s *scenario) idOf(name string) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.reqs[name]; ok {
		return r.id
	}
	s.nextID++
	r := &scenReq{id: s.nextID, done: make(chan struct{})}
	s.reqs[name] = r
	return r.id
}

func (s *scenario) send(name string, opts []string) {
	id := s.idOf(name)
	req := s.request(id, opts)
	r := s.reqs[name]
	c := s.c
	go func() {
		defer close(r.done)
		r.ans, r.err = c.Send(context.Background(), req)
	}()
}

// request builds an Accounting-Request for the script's options.
func (s *scenario) request(id uint32, opts []string) []byte {
	session, record, number := "client.example.net;1;"+itoa(int(id)), uint32(2), id
	var dest string
	var ts uint32
	origin := "client.example.net"
	tflag := false
	for _, o := range opts {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "t-flag":
			tflag = true
		case "from": // the Origin-Host, which a server checks against the connection's peer
			origin = v
		case "dest":
			dest = v
		case "session":
			session = v
		case "record":
			record = map[string]uint32{"event": 1, "start": 2, "interim": 3, "stop": 4}[v]
		case "number":
			n, _ := strconv.Atoi(v)
			number = uint32(n)
		case "ts":
			n, _ := strconv.Atoi(v)
			ts = uint32(n)
		default:
			s.failf("unknown send option %q", o)
		}
	}
	b := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, session).
		String(message.OriginHost, 0, true, origin).
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net")
	if dest != "" {
		b.String(message.DestinationHost, 0, true, dest)
	}
	b.String(message.UserName, 0, true, "user@example.net").
		Uint32(message.AccountingRecordType, 0, true, record).
		Uint32(message.AccountingRecordNumber, 0, true, number)
	if ts != 0 {
		b.Uint32(message.EventTimestamp, 0, true, ts)
	}
	req := b.Bytes()
	wire.SetEndToEnd(req, id)
	if tflag {
		wire.SetRetransmit(req)
	}
	return req
}

// expect checks one thing, after every goroutine of the bubble is idle:
//
//	expect r1 answered-by a     Send returned server a's answer
//	expect r1 result N          ...whose Result-Code is N
//	expect r1 error KIND        Send failed: timeout, closed, unable-to-deliver, no-peer
//	expect r1 waiting           Send has not returned yet
//	expect a received r1 N [plain|retransmit]
//	                            server a read r1 N times (with the T flag clear / set)
//	expect r1 applied N         the servers' application ran N times for r1
//	expect a pending N          the Client's peer for a holds N pending requests
//	expect a late N             ...and counted N late answers
//	expect a premature N        the Client counted N premature failovers from a
//	expect raw answers r1 r2... before-dpa
//	                            the raw connection got those answers, then the DPA
func (s *scenario) expect(f []string) {
	if f[0] == "raw" {
		s.expectRaw(f[1:])
		return
	}
	if sv, ok := s.servers[f[0]]; ok {
		switch f[1] {
		case "received":
			id := s.idOf(f[2])
			want, _ := strconv.Atoi(f[3])
			got := 0
			for _, r := range sv.f.received() {
				if r.e2e != id {
					continue
				}
				if len(f) > 4 && (f[4] == "plain") == r.tflag {
					continue
				}
				got++
			}
			if got != want {
				s.failf("server %s read %s %d times %s, want %d", f[0], f[2], got, strings.Join(f[4:], " "), want)
			}
		case "premature":
			want, _ := strconv.Atoi(f[2])
			for _, st := range s.c.ServerStats() {
				if st.Server == sv.f.host && int(st.Premature) != want {
					s.failf("server %s: %d premature failovers counted, want %d", f[0], st.Premature, want)
				}
			}
		case "pending", "late":
			want, _ := strconv.Atoi(f[2])
			st := s.peerOf(f[0]).Stats()
			got := st.Pending
			if f[1] == "late" {
				got = int(st.Late)
			}
			if got != want {
				s.failf("peer %s: %s %d, want %d", f[0], f[1], got, want)
			}
		default:
			s.failf("unknown server expectation %q", f[1])
		}
		return
	}
	r := s.req(f[0])
	switch f[1] {
	case "waiting":
		select {
		case <-r.done:
			s.failf("%s returned (%v)", f[0], r.err)
		default:
		}
		return
	case "applied":
		want, _ := strconv.Atoi(f[2])
		s.mu.Lock()
		got := s.applied[r.id]
		s.mu.Unlock()
		if got != want {
			s.failf("%s applied %d times, want %d", f[0], got, want)
		}
		return
	}
	select {
	case <-r.done:
	default:
		s.failf("%s has not returned", f[0])
	}
	switch f[1] {
	case "answered-by", "result":
		if r.err != nil {
			s.failf("%s failed: %v", f[0], r.err)
		}
		if wire.EndToEnd(r.ans) != r.id {
			s.failf("%s got the answer to %d", f[0], wire.EndToEnd(r.ans))
		}
		host, _ := message.StringOf(r.ans, message.OriginHost, 0)
		rc, _ := message.ResultCodeOf(r.ans)
		if f[1] == "answered-by" {
			if host != f[2]+".example.net" || rc != message.Success {
				s.failf("%s answered by %s with %d, want %s with 2001", f[0], host, rc, f[2])
			}
		} else if want, _ := strconv.Atoi(f[2]); rc != uint32(want) {
			s.failf("%s answered by %s with %d, want %d", f[0], host, rc, want)
		}
	case "error":
		want := map[string]error{"timeout": peer.ErrTimeout, "closed": peer.ErrClosed,
			"unable-to-deliver": ErrUnableToDeliver, "no-peer": ErrNoPeer, "lost": peer.ErrConnectionLost}[f[2]]
		if want == nil {
			s.failf("unknown error kind %q", f[2])
		}
		if !errors.Is(r.err, want) {
			host, _ := message.StringOf(r.ans, message.OriginHost, 0)
			s.failf("%s: got (%s, %v), want an error matching %v", f[0], host, r.err, want)
		}
	default:
		s.failf("unknown request expectation %q", f[1])
	}
}

func (s *scenario) peerOf(name string) *peer.Peer {
	host := name + ".example.net"
	for _, p := range s.c.Peers() {
		if p != nil && p.Name() == host {
			return p
		}
	}
	s.failf("no connected peer for %s", name)
	return nil
}

// rawConn is a client connection driven by hand: what a peer that does not
// wait for its answers before DPR looks like to a server.
type rawConn struct {
	tc transport.Conn
	wg sync.WaitGroup

	mu   sync.Mutex
	got  []uint32 // End-to-End ids of answers, in arrival order; 0 for the DPA
	open bool
}

func (s *scenario) rawCmd(f []string) {
	switch f[0] {
	case "send":
		req := s.rawRequest(f[1])
		if err := s.raw.tc.WriteMessages(req); err != nil {
			s.failf("raw send: %v", err)
		}
	case "dpr":
		dpr := message.NewRequest(wire.CmdDisconnectPeer, message.AppCommon, 0).
			String(message.OriginHost, 0, true, "raw.example.net").
			String(message.OriginRealm, 0, true, "example.net").
			Uint32(message.DisconnectCause, 0, true, message.DisconnectRebooting).Bytes()
		wire.SetHopByHop(dpr, 1)
		wire.SetEndToEnd(dpr, 1)
		if err := s.raw.tc.WriteMessages(dpr); err != nil {
			s.failf("raw dpr: %v", err)
		}
	default:
		s.rawOpen(f[0])
	}
}

func (s *scenario) rawRequest(name string) []byte {
	id := s.idOf(name)
	req := s.request(id, []string{"from=raw.example.net"})
	wire.SetHopByHop(req, id)
	close(s.reqs[name].done) // not a Send: nothing waits for it
	return req
}

func (s *scenario) rawOpen(name string) {
	sv := s.server(name)
	tc, err := sv.f.accept()
	if err != nil {
		s.failf("raw: %v", err)
	}
	cer := message.NewRequest(wire.CmdCapabilitiesExchange, message.AppCommon, 0).
		String(message.OriginHost, 0, true, "raw.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		Octets(message.HostIPAddress, 0, true, []byte{0, 1, 127, 0, 0, 1}).
		Uint32(message.VendorID, 0, true, 0).
		String(message.ProductName, 0, false, "raw").
		Uint32(message.AcctApplicationID, 0, true, message.AppAccounting).Bytes()
	if err := tc.WriteMessages(cer); err != nil {
		s.failf("raw CER: %v", err)
	}
	cea, err := tc.ReadMessage()
	if err != nil {
		s.failf("raw CEA: %v", err)
	}
	if rc, _ := message.ResultCodeOf(cea); rc != message.Success {
		s.failf("raw CEA result %d", rc)
	}
	rc := &rawConn{tc: tc, open: true}
	rc.wg.Add(1)
	go func() {
		defer rc.wg.Done()
		for {
			m, err := tc.ReadMessage()
			rc.mu.Lock()
			if err != nil {
				rc.open = false
				rc.mu.Unlock()
				return
			}
			switch {
			case wire.IsRequest(m):
			case wire.CommandCode(m) == wire.CmdDisconnectPeer:
				rc.got = append(rc.got, 0)
			default:
				rc.got = append(rc.got, wire.EndToEnd(m))
			}
			rc.mu.Unlock()
		}
	}()
	s.raw = rc
}

func (s *scenario) expectRaw(f []string) {
	if f[0] != "answers" || f[len(f)-1] != "before-dpa" {
		s.failf("want: expect raw answers r1... before-dpa")
	}
	var want []uint32
	for _, name := range f[1 : len(f)-1] {
		want = append(want, s.idOf(name))
	}
	s.raw.mu.Lock()
	got := slices.Clone(s.raw.got)
	s.raw.mu.Unlock()
	dpa := slices.Index(got, 0)
	if dpa < 0 {
		s.failf("no DPA received (got %v)", got)
	}
	before := got[:dpa]
	for _, id := range want {
		if !slices.Contains(before, id) {
			s.failf("answer to %d not received before the DPA (got %v, want %v first)", id, got, want)
		}
	}
}
