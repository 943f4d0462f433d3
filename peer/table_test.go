package peer

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/internal/testhook"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// sendCER writes a CER from host on far.
func sendCER(t *testing.T, far transport.Conn, host string) {
	t.Helper()
	cfg, err := clientConfig(host).validate()
	require.NoError(t, err)
	require.NoError(t, far.WriteMessages(withIDs(cfg.newCER(far.LocalAddr()), wire.NewHopByHopGenRandom())))
}

// readRC reads the next message on far, a CEA, and returns its Result-Code.
func readRC(t *testing.T, far transport.Conn) uint32 {
	t.Helper()
	cea, err := far.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, uint32(wire.CmdCapabilitiesExchange), wire.CommandCode(cea))
	require.False(t, wire.IsRequest(cea))
	rc, ok := message.ResultCodeOf(cea)
	require.True(t, ok)
	return rc
}

// tableLen is how many identities t holds anything for.
func tableLen(t *Table) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ids)
}

// Two CERs from one identity at the same moment: the first is decided and
// its CEA is on its way (not yet read, so not yet in service) when the
// second is decided. Exactly one gets DIAMETER_SUCCESS and stays in
// service; the other gets DIAMETER_UNABLE_TO_COMPLY, and no connection
// that was answered with success is closed.
func TestSimultaneousCERsFromOneIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("server.example.net")
		cfg.Table = NewTable()
		bus := NewBus()
		rec, cancel := record(bus)
		defer cancel()
		cfg.Events = bus
		ours1, far1 := pipePair()
		ours2, far2 := pipePair()
		p1, err := Accept(ours1, cfg)
		require.NoError(t, err)
		p2, err := Accept(ours2, cfg)
		require.NoError(t, err)

		sendCER(t, far1, "client.example.net")
		synctest.Wait() // p1 decided, and waits for far1 to read its CEA
		sendCER(t, far2, "CLIENT.example.net")
		synctest.Wait() // p2 decided too

		assert.Equal(t, uint32(message.UnableToComply), readRC(t, far2), "the second CER is refused")
		assert.Equal(t, uint32(message.Success), readRC(t, far1), "the first CER is accepted")
		_, err = far2.ReadMessage()
		assert.Error(t, err, "the refused connection is closed")
		synctest.Wait()
		assert.Equal(t, watchdog.Okay, p1.State(), "the accepted connection is in service")
		require.NotNil(t, p1.cur.Load(), "and still open")
		<-p2.Done()
		hasReason(t, rec, "already has an open connection")

		far1.Close()
		<-p1.Done()
		far2.Close()
		synctest.Wait()
		assert.Zero(t, tableLen(cfg.Table), "the table forgets every connection that ended")
	})
}

// A CEA that cannot be sent (the remote end went away first) releases the
// identity: the next CER from it is accepted.
func TestUnsentCEAReleasesIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("server.example.net")
		cfg.Table = NewTable()
		ours1, far1 := pipePair()
		p1, err := Accept(ours1, cfg)
		require.NoError(t, err)
		sendCER(t, far1, "client.example.net")
		synctest.Wait() // the CEA waits for far1 to read it
		far1.Close()
		<-p1.Done()
		assert.Zero(t, tableLen(cfg.Table))

		ours2, far2 := pipePair()
		p2, err := Accept(ours2, cfg)
		require.NoError(t, err)
		sendCER(t, far2, "client.example.net")
		assert.Equal(t, uint32(message.Success), readRC(t, far2))
		synctest.Wait()
		assert.Equal(t, watchdog.Okay, p2.State())
		require.NoError(t, p2.Close(context.Background())) // no DPA: DPATimeout passes in the bubble
		far2.Close()
		assert.Zero(t, tableLen(cfg.Table))
	})
}

// pipeDialer is a Config.Dialer that hands the far end of every connection
// the Peer dials to the test.
func pipeDialer(fars chan<- transport.Conn) func(context.Context, string) (transport.Conn, error) {
	return func(ctx context.Context, _ string) (transport.Conn, error) {
		ours, far := pipePair()
		select {
		case fars <- far:
			return ours, nil
		case <-ctx.Done():
			ours.Close()
			far.Close()
			return nil, ctx.Err()
		}
	}
}

// answerCER reads the CER on far and answers it as host with rc.
func answerCER(t *testing.T, far transport.Conn, host string, rc uint32) {
	t.Helper()
	cer, err := far.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, uint32(wire.CmdCapabilitiesExchange), wire.CommandCode(cer))
	require.True(t, wire.IsRequest(cer))
	cfg, err := clientConfig(host).validate()
	require.NoError(t, err)
	require.NoError(t, far.WriteMessages(cfg.newCEA(cer, nil, rc, "", nil)))
}

// drain reads far until it fails, then closes it.
func drain(far transport.Conn) {
	go func() {
		defer far.Close()
		for {
			if _, err := far.ReadMessage(); err != nil {
				return
			}
		}
	}()
}

// Our dial's CEA has accepted our CER and the connection is not yet in
// the Peer's hands when a CER from the same identity arrives: the
// identity was taken with the CEA, so that CER is refused, and the dial's
// connection comes into service (it is not closed after the peer's 2001).
func TestCERAfterOurCEAIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reached, release := make(chan struct{}), make(chan struct{})
		testhook.Exchanged = func(string) {
			close(reached)
			<-release
		}
		defer func() { testhook.Exchanged = nil }()
		table := NewTable()
		fars := make(chan transport.Conn, 1)
		cfg := clientConfig("client.example.net")
		cfg.Table, cfg.RemoteHost, cfg.Dialer = table, "server.example.net", pipeDialer(fars)
		p, err := Dial("tcp://server.example.net:3868", cfg)
		require.NoError(t, err)
		far := <-fars
		defer far.Close()
		answerCER(t, far, "server.example.net", message.Success)
		<-reached // the dial has its CEA, the Peer not yet its connection

		ours2, far2 := pipePair()
		defer far2.Close()
		scfg := clientConfig("client.example.net")
		scfg.Table = table
		p2, err := Accept(ours2, scfg)
		require.NoError(t, err)
		sendCER(t, far2, "SERVER.example.net")
		assert.Equal(t, uint32(message.UnableToComply), readRC(t, far2), "the identity is taken by our dial")
		<-p2.Done()

		close(release)
		synctest.Wait()
		assert.Equal(t, watchdog.Okay, p.State(), "the dial's connection is in service")
		drain(far)
		require.NoError(t, p.Close(context.Background()))
		assert.Zero(t, tableLen(table))
	})
}
