package peer

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noJitter makes every Tw exactly Twinit.
type noJitter struct{}

func (noJitter) Int64N(n int64) int64 { return n / 2 }

var quiet = slog.New(slog.DiscardHandler)

func clientConfig(host string) Config {
	return Config{
		OriginHost: host, OriginRealm: "example.net",
		Watchdog: watchdog.Config{Twinit: 30 * time.Second, Rand: noJitter{}},
		Logger:   quiet,
	}
}

// fakePeer is a scripted Diameter server on the far end of a net.Pipe. It
// answers CER, and DWRs and requests while its switches say so. It records
// when each DWR arrived (in the synctest bubble, exact virtual times).
type fakePeer struct {
	answerDWR  atomic.Bool
	answerReqs atomic.Bool
	dropDPR    atomic.Bool // never answer a DPR
	wrongHbH   atomic.Bool // answer requests with a Hop-by-Hop id nobody sent
	badAVP     atomic.Bool // answer requests with a last AVP that runs past the message
	host       string
	dwaDelay   time.Duration // set before dialing
	// pause, when set, stops the fake reading before its next message
	// until the channel closes: the client's writes block.
	pause atomic.Pointer[chan struct{}]

	wmu    sync.Mutex // serialises writes on the fake's connections
	mu     sync.Mutex
	dpas   int      // DPAs the fake received
	dprs   int      // DPRs the fake received
	causes []uint32 // their Disconnect-Causes
	dwrs   []time.Time
	reqs   int
	got    []seenReq // every application request read, in order
	held   [][]byte  // requests read while answerReqs was off (answerHeld answers them)
	conns  []transport.Conn
	wg     sync.WaitGroup
}

func newFakePeer(host string) *fakePeer {
	f := &fakePeer{host: host}
	f.answerDWR.Store(true)
	f.answerReqs.Store(true)
	return f
}

// dialer returns a Config.Dialer that connects to a fresh fake connection.
func (f *fakePeer) dialer() func(context.Context, string) (transport.Conn, error) {
	return func(ctx context.Context, url string) (transport.Conn, error) {
		a, b := net.Pipe()
		far := transport.NewStreamConn(b, "pipe", transport.Options{})
		f.mu.Lock()
		f.conns = append(f.conns, far)
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(far)
		return transport.NewStreamConn(a, "pipe", transport.Options{}), nil
	}
}

func (f *fakePeer) serve(c transport.Conn) {
	defer f.wg.Done()
	defer c.Close()
	cfg := Config{OriginHost: f.host, OriginRealm: "example.net", OriginStateID: 1, ProductName: "fake", AcctApps: []uint32{3}}
	for {
		if ch := f.pause.Load(); ch != nil {
			<-*ch
		}
		msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		if !wire.IsRequest(msg) {
			if wire.CommandCode(msg) == wire.CmdDisconnectPeer {
				f.mu.Lock()
				f.dpas++
				f.mu.Unlock()
			}
			continue
		}
		var ans []byte
		switch wire.CommandCode(msg) {
		case wire.CmdCapabilitiesExchange:
			ans = cfg.newCEA(msg, nil, message.Success, "", nil)
		case wire.CmdDeviceWatchdog:
			f.mu.Lock()
			f.dwrs = append(f.dwrs, time.Now())
			f.mu.Unlock()
			if f.answerDWR.Load() {
				ans = cfg.newDWA(msg)
				time.Sleep(f.dwaDelay)
			}
		case wire.CmdDisconnectPeer:
			f.mu.Lock()
			f.dprs++
			cause, _ := message.Uint32Of(msg, message.DisconnectCause, 0)
			f.causes = append(f.causes, cause)
			drop := f.dropDPR.Load()
			f.mu.Unlock()
			if !drop {
				ans = cfg.newDPA(msg)
			}
		default:
			f.mu.Lock()
			f.reqs++
			f.got = append(f.got, seenReq{wire.EndToEnd(msg), wire.Flags(msg)&wire.FlagRetransmit != 0})
			f.mu.Unlock()
			if !f.answerReqs.Load() {
				f.mu.Lock()
				f.held = append(f.held, msg)
				f.mu.Unlock()
			} else {
				ans = message.NewAnswer(msg).Uint32(message.ResultCode, 0, true, message.Success).Bytes()
				if f.wrongHbH.Load() {
					wire.SetHopByHop(ans, ^wire.HopByHop(msg))
				}
				if f.badAVP.Load() {
					ans = malformed(ans)
				}
			}
		}
		if ans != nil {
			f.wmu.Lock()
			err := c.WriteMessages(ans)
			f.wmu.Unlock()
			if err != nil {
				return
			}
		}
	}
}

// malformed appends to ans an AVP header announcing 255 bytes, with none
// of them, and sets the message's length to match: a last AVP that runs
// past the message.
func malformed(ans []byte) []byte {
	ans = append(ans, 0, 0, 0, 1, 0x40, 0, 0, 0xff)
	n := len(ans)
	ans[1], ans[2], ans[3] = byte(n>>16), byte(n>>8), byte(n)
	return ans
}

// answerHeld answers the requests held while answerReqs was off, on the
// newest connection: 2001, or malformed when bad.
func (f *fakePeer) answerHeld(bad bool) error {
	f.mu.Lock()
	c, held := f.conns[len(f.conns)-1], f.held
	f.held = nil
	f.mu.Unlock()
	f.wmu.Lock()
	defer f.wmu.Unlock()
	for _, req := range held {
		ans := message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).Bytes()
		if bad {
			ans = malformed(ans)
		}
		if err := c.WriteMessages(ans); err != nil {
			return err
		}
	}
	return nil
}

// sendDPR sends a DPR on the newest connection.
func (f *fakePeer) sendDPR(cause uint32) error {
	f.mu.Lock()
	c := f.conns[len(f.conns)-1]
	f.mu.Unlock()
	cfg := Config{OriginHost: f.host, OriginRealm: "example.net"}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	return c.WriteMessages(cfg.newDPR(cause))
}

// seenReq is an application request the fake read: its End-to-End id
// and whether it had the T flag.
type seenReq struct {
	e2e uint32
	t   bool
}

func (f *fakePeer) requests() []seenReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenReq(nil), f.got...)
}

func (f *fakePeer) dials() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

func (f *fakePeer) dwrTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.dwrs...)
}

func (f *fakePeer) close() {
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// recorder keeps every event published on a bus.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func record(b *Bus) (*recorder, func()) {
	r := &recorder{}
	cancel := b.Subscribe(func(_ context.Context, e Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	})
	return r, cancel
}

func (r *recorder) watchdog() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.events {
		if e.Kind == EventWatchdog {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) ofKind(k EventKind) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func acr() []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "client;1;1").
		String(message.OriginHost, 0, true, "client.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, 0).Bytes()
}
