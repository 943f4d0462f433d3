package peer

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

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

// serverEnd is one way an accepted connection ends, scripted on far; it
// returns once the server Peer p has ended.
type serverEnd func(t *testing.T, p *Peer, far transport.Conn)

// clientEnd is one way a client Peer's dial or connection ends; fars
// yields the far end of each connection it dials, table and cfg are for
// the server Peers the scenario accepts. It returns once p has ended.
type clientEnd func(t *testing.T, p *Peer, fars <-chan transport.Conn, table *Table, cfg Config)

// acceptCER accepts one connection from host on a server Peer of cfg and
// returns the CEA's Result-Code.
func acceptCER(t *testing.T, cfg Config, host string) (*Peer, transport.Conn, uint32) {
	t.Helper()
	ours, far := pipePair()
	p, err := Accept(ours, cfg)
	require.NoError(t, err)
	sendCER(t, far, host)
	return p, far, readRC(t, far)
}

// However a connection or a dial ends, the Table forgets it: once every
// Peer has ended, it holds nothing.
func TestTableEmptyAfterEveryEnd(t *testing.T) {
	srvCfg := func(table *Table) Config {
		cfg := clientConfig("server.example.net")
		cfg.Table = table
		return cfg
	}
	served := map[string]serverEnd{
		"closed by the remote": func(t *testing.T, p *Peer, far transport.Conn) {
			far.Close()
			<-p.Done()
		},
		"DPR from the remote": func(t *testing.T, p *Peer, far transport.Conn) {
			cfg := clientConfig("client.example.net")
			require.NoError(t, far.WriteMessages(cfg.newDPR(message.DisconnectDoNotWantToTalkToU)))
			dpa, err := far.ReadMessage()
			require.NoError(t, err)
			assert.Equal(t, uint32(wire.CmdDisconnectPeer), wire.CommandCode(dpa))
			drain(far)
			<-p.Done()
		},
		"our Close": func(t *testing.T, p *Peer, far transport.Conn) {
			drain(far)
			require.NoError(t, p.Close(context.Background()))
		},
		"watchdog: no DWA": func(t *testing.T, p *Peer, far transport.Conn) {
			drain(far) // reads the DWRs, answers none
			<-p.Done()
		},
		"bad frame": func(t *testing.T, p *Peer, far transport.Conn) {
			drain(far)
			bad := make([]byte, wire.HeaderLen)
			bad[0], bad[3] = 2, wire.HeaderLen // version 2
			require.NoError(t, far.WriteMessages(bad))
			<-p.Done()
		},
	}
	for name, end := range served {
		t.Run("server/"+name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				table := NewTable()
				p, far, rc := acceptCER(t, srvCfg(table), "client.example.net")
				defer far.Close()
				require.Equal(t, uint32(message.Success), rc)
				synctest.Wait()
				require.Equal(t, 1, tableLen(table))
				end(t, p, far)
				synctest.Wait()
				assert.Zero(t, tableLen(table))
			})
		})
	}
	t.Run("server/refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			table := NewTable()
			cfg := srvCfg(table)
			p1, far1, rc := acceptCER(t, cfg, "client.example.net")
			defer far1.Close()
			require.Equal(t, uint32(message.Success), rc)
			p2, far2, rc := acceptCER(t, cfg, "client.example.net")
			defer far2.Close()
			assert.Equal(t, uint32(message.UnableToComply), rc)
			<-p2.Done()
			cfg.AllowHosts = []string{"other.example.net"}
			p3, far3, rc := acceptCER(t, cfg, "stranger.example.net")
			defer far3.Close()
			assert.Equal(t, uint32(message.UnknownPeer), rc)
			<-p3.Done()
			synctest.Wait()
			assert.Equal(t, 1, tableLen(table), "only the accepted connection")
			far1.Close()
			<-p1.Done()
			synctest.Wait()
			assert.Zero(t, tableLen(table))
		})
	})
	t.Run("server/closed while its CEA is written", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			table := NewTable()
			ours, far := pipePair()
			defer far.Close()
			p, err := Accept(ours, srvCfg(table))
			require.NoError(t, err)
			sendCER(t, far, "client.example.net")
			synctest.Wait() // the CEA waits for far to read it
			require.Equal(t, 1, tableLen(table))
			require.NoError(t, p.Close(context.Background()))
			synctest.Wait()
			assert.Zero(t, tableLen(table))
		})
	})

	dialed := map[string]clientEnd{
		"CEA refused": func(t *testing.T, p *Peer, fars <-chan transport.Conn, _ *Table, _ Config) {
			far := <-fars
			defer far.Close()
			answerCER(t, far, "server.example.net", message.NoCommonApplication)
			synctest.Wait()
			require.NoError(t, p.Close(context.Background()))
		},
		"no CEA": func(t *testing.T, p *Peer, fars <-chan transport.Conn, _ *Table, _ Config) {
			far := <-fars
			defer far.Close()
			drain(far)
			time.Sleep(p.cfg.CEATimeout + time.Second)
			require.NoError(t, p.Close(context.Background()))
		},
		"closed while waiting for the CEA": func(t *testing.T, p *Peer, fars <-chan transport.Conn, _ *Table, _ Config) {
			far := <-fars
			defer far.Close()
			drain(far)
			synctest.Wait()
			require.NoError(t, p.Close(context.Background()))
		},
		"open, then our Close": func(t *testing.T, p *Peer, fars <-chan transport.Conn, _ *Table, _ Config) {
			far := <-fars
			defer far.Close()
			answerCER(t, far, "server.example.net", message.Success)
			drain(far)
			synctest.Wait()
			require.Equal(t, watchdog.Okay, p.State())
			require.NoError(t, p.Close(context.Background()))
		},
		"open, then closed by the remote": func(t *testing.T, p *Peer, fars <-chan transport.Conn, _ *Table, _ Config) {
			far := <-fars
			answerCER(t, far, "server.example.net", message.Success)
			synctest.Wait()
			require.Equal(t, watchdog.Okay, p.State())
			far.Close()
			synctest.Wait()
			require.Equal(t, watchdog.Down, p.State())
			require.NoError(t, p.Close(context.Background()))
		},
		"CEA says the peer lost the election": func(t *testing.T, p *Peer, fars <-chan transport.Conn, _ *Table, _ Config) {
			far := <-fars
			defer far.Close()
			answerCER(t, far, "server.example.net", message.ElectionLost)
			synctest.Wait()
			require.NoError(t, p.Close(context.Background()))
		},
		"election won: the peer's connection replaces the dial": func(t *testing.T, p *Peer, fars <-chan transport.Conn, table *Table, cfg Config) {
			far := <-fars
			defer far.Close()
			drain(far) // our CER, never answered
			synctest.Wait()
			sp, far2, rc := acceptCER(t, cfg, "server.example.net")
			defer far2.Close()
			assert.Equal(t, uint32(message.Success), rc)
			<-sp.Done()
			synctest.Wait()
			require.Equal(t, watchdog.Okay, p.State(), "the client Peer has the peer's connection")
			far2.Close()
			synctest.Wait()
			require.NoError(t, p.Close(context.Background()))
		},
		"election lost: the dial goes on": func(t *testing.T, p *Peer, fars <-chan transport.Conn, table *Table, cfg Config) {
			far := <-fars
			defer far.Close()
			cer, err := far.ReadMessage()
			require.NoError(t, err)
			sp, far2, rc := acceptCER(t, cfg, "server.example.net") // client.example.net is lower
			defer far2.Close()
			assert.Equal(t, uint32(message.ElectionLost), rc)
			<-sp.Done()
			scfg, err := clientConfig("server.example.net").validate()
			require.NoError(t, err)
			require.NoError(t, far.WriteMessages(scfg.newCEA(cer, nil, message.Success, "", nil)))
			drain(far)
			synctest.Wait()
			require.Equal(t, watchdog.Okay, p.State())
			require.NoError(t, p.Close(context.Background()))
		},
		"the peer connects while we have no connection": func(t *testing.T, p *Peer, fars <-chan transport.Conn, table *Table, cfg Config) {
			far := <-fars
			far.Close() // the dial's connection fails before its CEA
			synctest.Wait()
			require.Nil(t, p.cur.Load())
			sp, far2, rc := acceptCER(t, cfg, "server.example.net")
			defer far2.Close()
			assert.Equal(t, uint32(message.Success), rc)
			<-sp.Done()
			drain(far2)
			synctest.Wait()
			require.NotNil(t, p.cur.Load(), "the client Peer took the peer's connection")
			require.NoError(t, p.Close(context.Background()))
		},
	}
	for name, end := range dialed {
		t.Run("client/"+name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				table := NewTable()
				fars := make(chan transport.Conn, 4)
				local := "client.example.net" // lower than the peer's: the peer wins
				if strings.HasPrefix(name, "election won") {
					local = "zzz.example.net"
				}
				cfg := clientConfig(local)
				cfg.Table, cfg.RemoteHost, cfg.Dialer = table, "server.example.net", pipeDialer(fars)
				p, err := Dial("tcp://server.example.net:3868", cfg)
				require.NoError(t, err)
				end(t, p, fars, table, cfg)
				synctest.Wait()
				assert.Zero(t, tableLen(table))
			})
		})
	}
}

// The election (RFC 6733 5.6.4) on the responder: we win when our
// Origin-Host succeeds the CER's, octet by octet with ASCII letters folded
// to lower case (as freeDiameter's strcasecmp does, so that both sides
// agree on the one winner: '_' sorts below the letters). The winner closes
// the connection it initiated; the loser answers DIAMETER_ELECTION_LOST.
func TestElectionOrder(t *testing.T) {
	for _, c := range []struct {
		local, remote string
		win           bool
	}{
		{"b.example.net", "a.example.net", true},
		{"a.example.net", "b.example.net", false},
		{"B.EXAMPLE.NET", "a.example.net", true},
		{"a.example.net", "B.example.net", false},
		{"aab.example.net", "A_B.example.net", true},
		{"A_B.example.net", "aab.example.net", false},
		{"a.example.net.org", "a.example.net", true}, // a longer identity succeeds its prefix
		{"a.example.net", "a.example.net.org", false},
		{"a.example.net", "A.Example.Net", false}, // equal does not succeed
	} {
		table := NewTable()
		p := &Peer{}
		require.True(t, table.register(p, c.remote))
		dial, dialFar := pipePair()
		w, err := table.startDial(p, c.remote, dial)
		require.NoError(t, err)
		accepted, acceptedFar := pipePair()
		v := table.onCER(c.local, c.remote, accepted)
		if c.win {
			assert.Zero(t, v.rc, "%s vs %s", c.local, c.remote)
			assert.Same(t, p, v.adopt, "the dialing Peer takes the accepted connection")
			assert.Equal(t, dial, v.closeDial, "and its own dial is closed")
			assert.True(t, w.won)
			assert.True(t, v.dialEnded)
		} else {
			assert.Equal(t, uint32(message.ElectionLost), v.rc, "%s vs %s", c.local, c.remote)
			assert.Nil(t, v.closeDial, "the dial goes on")
			assert.False(t, w.won)
		}
		for _, c := range []transport.Conn{dial, dialFar, accepted, acceptedFar} {
			c.Close()
		}
	}
}

// A Table has one client Peer per remote identity: Dial refuses a second
// while the first lives, and accepts one once it has closed.
func TestOneClientPeerPerIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fars := make(chan transport.Conn, 4)
		cfg := clientConfig("client.example.net")
		cfg.Table, cfg.RemoteHost, cfg.Dialer = NewTable(), "server.example.net", pipeDialer(fars)
		p1, err := Dial("tcp://server.example.net:3868", cfg)
		require.NoError(t, err)
		_, err = Dial("tcp://other.example.net:3868", func() Config { c := cfg; c.RemoteHost = "SERVER.example.net"; return c }())
		assert.ErrorIs(t, err, ErrConfig)
		require.NoError(t, p1.Close(context.Background()))
		p3, err := Dial("tcp://server.example.net:3868", cfg)
		require.NoError(t, err)
		require.NoError(t, p3.Close(context.Background()))
		close(fars)
		for far := range fars {
			far.Close()
		}
		assert.Zero(t, tableLen(cfg.Table))
	})
}
