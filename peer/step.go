package peer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/internal/testhook"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// finish runs once when the Peer ends (p.mu held): the connection closes,
// pending calls fail over or fail.
func (p *Peer) finish() {
	p.closing = true // no redial from here on
	p.unregister()
	if c := p.cur.Load(); c != nil {
		// However the peer ends (Close, DPR, context), a connected
		// watchdog goes DOWN through the machine, so the transition is
		// reported and pending requests fail over like any other loss.
		p.closeLater(c, "peer closed")
		if st := p.m.State(); st == watchdog.Okay || st == watchdog.Suspect || st == watchdog.Reopen {
			p.reportDown(c, Event{Reason: "connection closed: " + c.note()})
			p.apply(p.m.Step(watchdog.ConnectionDown), p.mono())
		}
	}
	p.timer.Stop()
	if c := p.cur.Swap(nil); c != nil {
		p.failPending(c, ErrClosed, "")
	}
	p.cancel()
	// Done once the calls above are failed, after the lock: a Close
	// waiting for it must not return before.
	p.out = append(p.out, effect{ended: true})
	p.notes.End()
}

// reportDown publishes e as c's EventConnDown, once per connection: a
// graceful close reports the DPR/DPA outcome, and the end of the Peer
// that follows must not report the same connection again. p.mu is held.
func (p *Peer) reportDown(c *conn, e Event) {
	if c.downReported {
		return
	}
	c.downReported = true
	e.Kind = EventConnDown
	p.publish(e)
}

// timerGrid is the resolution of Tw deadlines: each is moved to the
// nearest whole multiple of timerGrid in wall-clock time. The timers of
// the peers of a process that fall due within the same slot then fire in
// one wake-up of the process, their DWRs (and the far end's DWAs) travel
// together, and the scheduler finds work once instead of once per peer:
// for 10k idle peers (about 330 DWR/DWA exchanges a second) that is most
// of the CPU they cost. Tw stays within Twinit +/- MaxJitter.
const timerGrid = 50 * time.Millisecond

// arm (re)arms the one timer to fire d after base (ns since epoch), d a
// jittered Tw, on timerGrid.
func (p *Peer) arm(base int64, d time.Duration) {
	p.armedAt = base
	p.deadline = p.onGrid(base, d)
	p.tw.Store(int64(d))
	p.timer.Reset(time.Duration(p.deadline - p.mono()))
}

// onGrid returns base+d moved to the nearest multiple of timerGrid in
// wall-clock time, and by one more step inwards if that would leave
// [base+Twinit-MaxJitter, base+Twinit+MaxJitter].
func (p *Peer) onGrid(base int64, d time.Duration) int64 {
	g := int64(timerGrid)
	wall := p.epochWall + base + int64(d)
	at := (wall+g/2)/g*g - p.epochWall
	if hi := base + int64(p.twinit+watchdog.MaxJitter); at > hi {
		at -= g
	} else if lo := base + int64(p.twinit-watchdog.MaxJitter); at < lo {
		at += g
	}
	return at
}

// onTimer handles an expiry of Tw. In OKAY the reader does not report each
// message; it stores the time of the last one. If a message arrived after
// the timer was armed, Tw was reset then (RFC 3539 3.4.1 [2]): step
// "receive non-DWA" and re-arm from that instant instead of expiring.
func (p *Peer) onTimer() {
	if p.closing {
		// A DPR is out: the connection ends with its DPA or DPATimeout,
		// and a DWR now would only confuse the peer (RFC 6733 5.4).
		return
	}
	for {
		// Receipts already stepped explicitly (a DWA, a message
		// while not OKAY) must not count twice: the appendix's REOPEN
		// rows, for one, do not reset Tw on a DWA.
		armed := max(p.armedAt, p.rxSeen)
		rx := p.lastRx.Load()
		if p.m.State() == watchdog.Okay && rx > armed {
			p.apply(p.m.Step(watchdog.ReceiveOther), rx)
			if p.deadline > p.mono() {
				return
			}
			continue // jitter made the new deadline already past
		}
		prev := p.m.State()
		p.apply(p.m.Step(watchdog.TimerExpired), p.mono())
		// The reader stores lastRx before reading the state, and apply
		// stores the state before this load: if a message slipped in while
		// we left OKAY, one of the two sides sees the other and the
		// message is not lost for the watchdog.
		if prev == watchdog.Okay && p.m.State() != watchdog.Okay && p.lastRx.Load() > armed {
			p.apply(p.m.Step(watchdog.ReceiveOther), p.mono())
		}
		p.checkIdle()
		return
	}
}

// apply carries out a step's actions. base is the instant SetWatchdog
// counts from (now, or the last receipt for a lazy reset).
func (p *Peer) apply(o watchdog.Output, base int64) {
	if o.Changed {
		p.transitioned(&o)
	}
	for _, a := range o.Actions() {
		switch a.Kind {
		case watchdog.ActionSetTimer:
			p.arm(base, a.After)
		case watchdog.ActionSendDWR:
			// Not after the peer's DPR, which we answered: the connection
			// only waits for the answers still due (at most DPATimeout).
			// The machine runs on, so that a connection that never
			// closes (its DPA stuck behind a peer that does not read) is
			// still brought down.
			if c := p.cur.Load(); c != nil && !c.dprIn.Load() {
				p.write(c, withIDs(p.cfg.newDWR(), c.hbh))
			}
		case watchdog.ActionFailover:
			p.failover(o.Transition.Reason)
		case watchdog.ActionFailback:
			p.failback()
		case watchdog.ActionCloseConnection:
			p.closeByWatchdog(o.Transition.Reason)
		case watchdog.ActionAttemptOpen:
			p.attemptOpen()
		}
	}
	if p.role == RoleServer && o.State == watchdog.Down {
		p.ended = true // an accepted connection is not reopened by us
	}
}

// transitioned records and reports a change of the watchdog's state;
// after the peer's DPR, a timer's transition gets its own reason, which
// the actions apply carries out then use too.
// The rare steps of apply are functions of their own so that the frequent
// ones (a DWA, a DWR, a timer) run on a small stack: a connection's
// reader, whose stack the garbage collector shrinks while it waits, does
// not have to grow it for each watchdog exchange. p.mu is held.
func (p *Peer) transitioned(o *watchdog.Output) {
	if o.Transition.Event == watchdog.TimerExpired {
		if c := p.cur.Load(); c != nil && c.dprIn.Load() {
			// No DWR goes to a peer that sent a DPR (see apply): the
			// machine's "no DWA" would tell of one never sent.
			o.Transition.Reason = "no message within Tw after the peer's DPR (no DWR is sent to a peer that is leaving)"
			if o.Transition.To == watchdog.Down {
				o.Transition.Reason = "no message for a further Tw after the peer's DPR; closing"
			}
		}
	}
	tr := o.Transition
	p.state.Store(uint32(o.State))
	p.since.Store(time.Now().UnixNano())
	p.stats.transitions.Add(1)
	p.publish(Event{Kind: EventWatchdog, From: tr.From, To: tr.To, Trigger: tr.Event, NumDWA: p.m.NumDWA(), Reason: tr.Reason})
	p.log(slog.LevelInfo, "watchdog", "peer", p.Name(), "from", tr.From.String(), "to", tr.To.String(), "reason", tr.Reason)
}

// failback carries out Failback(). p.mu is held.
func (p *Peer) failback() {
	p.publish(Event{Kind: EventFailback, Reason: "failback: back in service"})
}

// closeByWatchdog carries out CloseConnection(). p.mu is held.
func (p *Peer) closeByWatchdog(reason string) {
	if c := p.cur.Swap(nil); c != nil {
		note := "closed by the watchdog: " + reason
		p.closeLater(c, note)
		p.failPending(c, ErrConnectionLost, note)
		p.reportDown(c, Event{Reason: note})
	}
}

// attemptOpen dials in the background, unless a dial is still running
// (W7: wait for the transport's own failure report first).
func (p *Peer) attemptOpen() {
	if p.role != RoleClient || p.dialing || p.closing {
		return
	}
	if now := p.mono(); now < p.holdUntil {
		p.log(slog.LevelDebug, "reconnection held off after DPR", "peer", p.Name(), "for", time.Duration(p.holdUntil-now))
		return
	}
	p.dialing = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, p.dialBudget())
		defer cancel()
		var tc transport.Conn
		var err error
		if p.cfg.Dialer != nil {
			tc, err = p.cfg.Dialer(ctx, p.url)
		} else {
			tc, err = transport.Dial(ctx, p.url, p.cfg.Transport)
		}
		if err != nil {
			p.step(input{kind: evOpenFailed, note: err.Error()})
			return
		}
		cp, err := p.exchangeClient(tc)
		if err != nil {
			tc.Close()
			var refusal uint32
			if ce := (*CapabilitiesError)(nil); errors.As(err, &ce) {
				refusal = ce.ResultCode
			}
			p.step(input{kind: evOpenFailed, note: err.Error(), cause: refusal})
			return
		}
		if testhook.Exchanged != nil {
			testhook.Exchanged(cp.OriginHost)
		}
		if c := newConn(p, tc, cp.OriginHost); !p.step(input{kind: evConnUp, c: c}) {
			c.close("peer closed")
		}
	}()
}

func (p *Peer) dialBudget() time.Duration {
	d := p.cfg.Transport.DialTimeout
	if d <= 0 {
		d = transport.DefaultDialTimeout
	}
	return d
}

func (p *Peer) stepLocked(e input) {
	cur := p.cur.Load()
	if e.at > p.rxSeen {
		p.rxSeen = e.at
	}
	switch e.kind {
	case evConnUp:
		p.onConnUp(e, cur)
	case evOpenFailed:
		p.onOpenFailed(e)
	case evConnDown:
		p.onConnDown(e, cur)
	case evDWA:
		if e.c == cur {
			p.apply(p.m.Step(watchdog.ReceiveDWA), e.at)
		}
	case evDWR:
		if e.c != cur {
			return
		}
		o := p.m.Step(watchdog.ReceiveDWR)
		if o.Has(watchdog.ActionAnswerDWR) {
			p.write(e.c, p.cfg.newDWA(e.msg))
		}
		p.apply(o, e.at)
	case evOther:
		p.onOther(e, cur)
	case evDPR:
		p.onDPR(e, cur)
	case evClose:
		p.onClose(e, cur)
	case evDrained:
		p.onDrained(e, cur)
	case evCloseDone:
		p.onCloseDone(e)
	case evHandOver:
		p.onHandOver(e, cur)
	}
}

// onHandOver moves the requests pending on the connection to the
// failover hook, as a watchdog failover does, and keeps the connection
// and its watchdog: see HandOver. p.mu is held.
func (p *Peer) onHandOver(e input, cur *conn) {
	if e.done != nil {
		defer p.notify(notice{done: e.done}) // after the hand-over, if any
	}
	if cur == nil || p.cfg.Failover == nil || p.closing {
		// Nothing pending, nowhere to hand it, or a graceful close whose
		// drain gives the requests their time: they wait for answers.
		return
	}
	calls, flush := cur.moveOut(errors.New(e.note), e.keep)
	if len(calls) > 0 {
		p.handOver(calls, e.note)
	}
	p.flushLater(cur, flush)
}

// onConnUp steps a connection whose capabilities exchange succeeded. p.mu is held.
func (p *Peer) onConnUp(e input, cur *conn) {
	p.dialing = false
	if p.closing {
		p.closeLater(e.c, "peer closing")
		return
	}
	t := p.cfg.Table
	if cur != nil && cur.dprIn.Load() && (t == nil || t.up(e.c)) {
		// The peer sent a DPR on cur and has connected again (a
		// restart): the new connection ends cur's wait for the answers
		// to our requests, which the old instance will not send.
		p.replaced(cur, e.c)
		cur = nil
		if e.note != "" {
			e.note += "; "
		}
		e.note += "it replaces the connection the peer sent a DPR on"
	} else if cur != nil || (t != nil && !t.up(e.c)) {
		// Not expected: the Table gave the identity to this
		// connection when its CER or CEA was accepted.
		note := fmt.Sprintf("%s: another connection is in service: closed this one (%s to %s)",
			e.c.remoteHost, e.c.tc.Network(), e.c.tc.RemoteAddr())
		p.publish(Event{Kind: EventError, Reason: note})
		p.closeLater(e.c, note)
		if p.role == RoleServer && cur == nil {
			p.ended = true
		}
		return
	}
	p.cur.Store(e.c)
	if e.c.remoteHost != "" {
		h := e.c.remoteHost
		p.label.Store(&h)
	}
	p.lastApp.Store(p.mono())
	e.c.start()
	network, addr := e.c.tc.Network(), e.c.tc.RemoteAddr().String()
	reason := "connected over " + network + " to " + addr
	if e.note != "" {
		reason += ": " + e.note // why a connection from the peer came to this Peer
	}
	p.publish(Event{Kind: EventConnUp, Network: network, Addr: addr, Reason: reason})
	p.apply(p.m.Step(watchdog.ConnectionUp), p.mono())
}

// replaced closes old, the connection on which the peer sent a DPR, at
// once: the peer has connected again on c (its identity's). What is
// pending on old moves to the failover hook, or fails, as when its wait
// after the DPR runs out (onConnDown). p.mu is held.
func (p *Peer) replaced(old, c *conn) {
	note := fmt.Sprintf("%s; closed: the peer connected again (%s to %s)", old.note(), c.tc.Network(), c.tc.RemoteAddr())
	p.closeLater(old, note)
	p.onConnDown(input{kind: evConnDown, c: old, note: note}, old)
}

// onOpenFailed steps a failed dial or capabilities exchange. p.mu is held.
func (p *Peer) onOpenFailed(e input) {
	p.dialing = false
	if e.note == errElectionWon.Error() {
		return // not a failure: the accepted connection replaces the dial
	}
	p.stats.openFailures.Add(1)
	if p.role == RoleServer {
		p.ended = true
		p.closeErr = errors.New(e.note)
		return
	}
	p.publish(Event{Kind: EventOpenFailed, ResultCode: e.cause, Reason: "open failed: " + e.note})
	p.log(slog.LevelWarn, "open failed", "peer", p.Name(), "err", e.note)
}

// onConnDown steps the loss of a connection. p.mu is held.
func (p *Peer) onConnDown(e input, cur *conn) {
	if e.c != cur {
		return // an older connection, already dealt with
	}
	note, dpa := e.note, false
	select {
	case <-e.c.dpa:
		if p.closing {
			note, dpa = "closed after DPA", true // the DPR receiver closes first (RFC 6733 5.6)
		}
	default:
	}
	p.reportDown(e.c, Event{DPR: p.closing, DPA: dpa, Reason: "connection down: " + note})
	p.logLimited(slog.LevelInfo, serve.KindConnDown, "connection down", "peer", p.Name(), "reason", note)
	// Step while the connection is still current, so that OKAY's
	// Failover() hands its pending requests over with the machine's
	// reason; whatever it still owns afterwards fails or moves below.
	p.downNote = note
	p.apply(p.m.Step(watchdog.ConnectionDown), p.mono())
	p.downNote = ""
	if p.cur.CompareAndSwap(e.c, nil) {
		p.failPending(e.c, ErrConnectionLost, "connection down ("+note+")")
	}
	if p.closing {
		p.ended = true
	}
}

// onOther steps a message other than a DWA while not OKAY. p.mu is held.
func (p *Peer) onOther(e input, cur *conn) {
	if e.c != cur {
		return
	}
	o := p.m.Step(watchdog.ReceiveOther)
	p.apply(o, e.at)
	if e.msg != nil { // a request received while not OKAY
		if o.Has(watchdog.ActionDiscard) {
			p.stats.discarded.Add(1)
			p.publishPerMessage(Event{Kind: EventError, Reason: fmt.Sprintf("%s discarded: watchdog %s", message.CommandName(e.msg), p.m.State())})
		} else {
			p.serveOnWorker(e.c, e.msg) // not on the reader: p.mu is held
		}
	}
}

// onDPR steps a DPR. p.mu is held.
func (p *Peer) onDPR(e input, cur *conn) {
	if e.c != cur {
		return
	}
	cause, _ := message.Uint32Of(e.msg, message.DisconnectCause, 0)
	note := fmt.Sprintf("DPR received (Disconnect-Cause %d %s)", cause, message.DisconnectCauseName(cause))
	if p.role == RoleClient && p.cfg.DPRHoldOff > 0 && (cause == message.DisconnectBusy || cause == message.DisconnectDoNotWantToTalkToU) {
		// RFC 6733 5.4.3: do not reconnect to a peer that is busy or
		// does not want to talk to us; try again after the hold-off.
		p.holdUntil = e.at + int64(p.cfg.DPRHoldOff)
		note += fmt.Sprintf(": no reconnection for %v", p.cfg.DPRHoldOff)
		p.log(slog.LevelWarn, "peer disconnected and asked not to reconnect", "peer", p.Name(),
			"cause", message.DisconnectCauseName(cause), "hold_off", p.cfg.DPRHoldOff)
	}
	if p.cfg.Table != nil {
		// The peer is leaving this connection: a CER it sends on a new
		// one (a restart) is accepted, not refused as a second
		// connection while this one still owes answers and the DPA.
		p.cfg.Table.down(e.c)
	}
	e.c.mu.Lock()
	e.c.downNote = note // after the release: who sees the note finds the identity free
	e.c.mu.Unlock()
	// The peer is leaving this connection: no new request goes on it (a
	// Client sends it elsewhere, InService says so), while the answers to
	// those pending still come in (holdDPA closes it after them).
	if !e.c.dprIn.Swap(true) {
		// Whoever keeps a view of the peers in service (a Client, its
		// throttle) learns it now, not when the connection closes.
		p.publish(Event{Kind: EventDisconnecting, Reason: note + ": the connection takes no new request"})
	}
	_, flush := e.c.startDrain()
	p.flushLater(e.c, flush)
	// The DPA waits for the answers this side still owes (F8), the
	// close for the answers to our requests too.
	p.out = append(p.out, effect{c: e.c, msg: p.cfg.newDPA(e.msg), hold: true})
	// The DPR is traffic too.
	p.apply(p.m.Step(watchdog.ReceiveOther), e.at)
}

// onClose steps Close or Disconnect: the start of a graceful disconnect. p.mu is held.
func (p *Peer) onClose(e input, cur *conn) {
	if p.closing {
		return
	}
	p.closing = true
	p.leaving.Store(true)
	p.unregister() // a CER from the peer goes to a server Peer from now on
	p.closeErr = nil
	if cur == nil {
		p.ended = true
		return
	}
	// Graceful: no new requests here; the answers in flight get up to
	// DrainTimeout, then DPR (F8).
	drained, flush := cur.startDrain()
	p.flushLater(cur, flush)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(p.cfg.drainTimeout())
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
		case <-cur.closed:
		}
		p.step(input{kind: evDrained, c: cur, cause: e.cause})
	}()
}

// onDrained steps the end of a graceful disconnect's wait for answers. p.mu is held.
func (p *Peer) onDrained(e input, cur *conn) {
	if e.c != cur {
		return // the connection went down meanwhile: evConnDown did the rest
	}
	// What is still unanswered fails over like any Failover(), or fails
	// without a hook (as Close says: ErrClosed).
	why := fmt.Sprintf("disconnecting: no answer within %v", p.cfg.drainTimeout())
	cause := errors.New(why)
	calls, flush := cur.moveOut(cause, nil)
	p.flushLater(cur, flush)
	if len(calls) > 0 {
		if p.cfg.Failover != nil {
			p.handOver(calls, why)
		} else {
			p.out = append(p.out, effect{fail: calls, err: fmt.Errorf("%w (%w)", ErrClosed, cause)})
		}
	}
	dpr := withIDs(p.cfg.newDPR(e.cause), cur.hbh)
	cur.dprID.Store(wire.HopByHop(dpr)) // before it is sent: only its DPA answers it
	p.write(cur, dpr)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(p.cfg.DPATimeout)
		defer t.Stop()
		note, dpa := "closed after DPA", false
		select {
		case <-cur.dpa:
			dpa = true
			// The answers we still owe, to requests that crossed our DPR,
			// go out before the connection closes, for DPATimeout more
			// at most.
			cur.flushOwedThenClose()
			t.Reset(p.cfg.DPATimeout)
			select {
			case <-cur.closed:
			case <-t.C:
				note = fmt.Sprintf("closed %v after DPA, %d answers still owed", p.cfg.DPATimeout, cur.owed.Load())
			}
		case <-t.C:
			note = "closed: no DPA within " + p.cfg.DPATimeout.String()
		case <-cur.closed:
			note = "closed while waiting for DPA"
		}
		p.step(input{kind: evCloseDone, c: cur, note: note, dpa: dpa})
	}()
}

// onCloseDone steps the end of a graceful disconnect (DPA or its timeout). p.mu is held.
func (p *Peer) onCloseDone(e input) {
	p.reportDown(e.c, Event{DPR: true, DPA: e.dpa, Reason: e.note})
	p.ended = true
}

// failover carries out Failover(): with a failover hook (the client
// layer), the connection's pending requests leave it and go to the hook
// in send order, still matched here for a late answer (F2, F4, F7). Without one they keep
// waiting on this connection: a late answer still completes them, and they
// fail when it closes or their deadline passes.
func (p *Peer) failover(reason string) {
	c := p.cur.Load()
	if !p.closing || (c != nil && c.pendingLen() > 0) {
		// Our own disconnect, with nothing pending, moves nothing: it is
		// no failover to count.
		p.stats.failovers.Add(1)
	}
	if c == nil {
		return // its requests went with the connection (failPending)
	}
	if p.cfg.Failover == nil {
		n := c.pendingLen()
		p.publish(Event{Kind: EventFailover, Pending: n, Reason: fmt.Sprintf("%s: %d requests pending, no alternate configured", reason, n)})
		return
	}
	cause := reason
	if p.downNote != "" {
		cause += " (" + p.downNote + ")"
	}
	calls, flush := c.moveOut(errors.New(cause), nil)
	p.handOver(calls, reason)
	p.flushLater(c, flush)
}

// handOver gives moved calls to the failover hook, after the lock, in
// order.
func (p *Peer) handOver(calls []*call.Call, reason string) {
	p.stats.movedOut.Add(uint64(len(calls)))
	p.notify(notice{failover: true, calls: calls, reason: reason})
}

// checkIdle brings an idle connection down (T4), never sooner than
// BringDownInterval after the last application message.
func (p *Peer) checkIdle() {
	if p.cfg.IdleTimeout == 0 || p.closing || p.m.State() != watchdog.Okay {
		return
	}
	c := p.cur.Load()
	if c == nil || c.pendingLen() > 0 || c.dprIn.Load() {
		return // busy, or closing after the peer's DPR
	}
	idle := time.Duration(p.mono() - p.lastApp.Load())
	if idle < p.cfg.IdleTimeout {
		return
	}
	p.publish(Event{Kind: EventIdle, Idle: idle, Reason: fmt.Sprintf("idle for %v: bringing the connection down", idle.Truncate(time.Second))})
	p.stepLocked(input{kind: evClose, cause: message.DisconnectDoNotWantToTalkToU})
}

// failPending completes every call still pending on c with err.
// why, if not empty, says what became of the connection: a call handed
// over says so should it fail later.
func (p *Peer) failPending(c *conn, err error, why string) {
	var cause error
	if why != "" {
		cause = errors.New(why)
	}
	calls, flush := c.takePending(cause)
	p.flushLater(c, flush)
	if len(calls) == 0 {
		return
	}
	if p.cfg.Failover != nil && err == ErrConnectionLost {
		// The connection dropped without a Failover() first (SUSPECT or
		// REOPEN closing): whatever it still owns moves too.
		p.handOver(calls, "connection lost")
		return
	}
	if cause != nil {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	p.out = append(p.out, effect{fail: calls, err: err})
}

// errElectionWon ends a dial whose connection we closed because the
// peer's own connection to us won the election and is kept instead.
var errElectionWon = errors.New("closed: the peer's connection to us won the election and replaces this one")

// CapabilitiesError is a CEA with a Result-Code other than
// DIAMETER_SUCCESS, or a CER we refused.
type CapabilitiesError struct {
	Peer       string
	ResultCode uint32
	Message    string
}

func (e *CapabilitiesError) Error() string {
	s := fmt.Sprintf("capabilities exchange with %s failed: %d %s", e.Peer, e.ResultCode, resultName(e.ResultCode))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// exchangeClient sends our CER and waits for the CEA (CEATimeout). With a
// Table, a CEA that accepts our CER gives the peer's identity to tc in
// the same step: the caller's conn must release it when it closes.
func (p *Peer) exchangeClient(tc transport.Conn) (cp capabilities, err error) {
	t := time.AfterFunc(p.cfg.CEATimeout, func() { tc.Close() })
	defer t.Stop()
	stop := context.AfterFunc(p.ctx, func() { tc.Close() }) // Close does not wait CEATimeout
	defer stop()
	if tb, host := p.cfg.Table, p.cfg.RemoteHost; tb != nil {
		var w *waiting
		if host != "" {
			if w, err = tb.startDial(p, host, tc); err != nil {
				return cp, err
			}
		}
		defer func() {
			var ce *CapabilitiesError
			lost := errors.As(err, &ce) && ce.ResultCode == message.ElectionLost
			var accepted transport.Conn
			if err == nil {
				accepted = tc
			}
			won, held := tb.endDial(host, w, accepted, cp.OriginHost, lost)
			switch {
			case won || lost:
				err = errElectionWon
			case held != nil:
				err = held
			}
		}()
	}
	if err := tc.WriteMessages(withIDs(p.cfg.newCER(tc.LocalAddr()), wire.NewHopByHopGenRandom())); err != nil {
		return cp, fmt.Errorf("sending CER: %w", err)
	}
	msg, err := tc.ReadMessage()
	if err != nil {
		if !t.Stop() {
			return cp, fmt.Errorf("no CEA within %v", p.cfg.CEATimeout)
		}
		return cp, fmt.Errorf("waiting for CEA: %w", err)
	}
	if wire.CommandCode(msg) != wire.CmdCapabilitiesExchange || wire.IsRequest(msg) {
		return cp, fmt.Errorf("expected a CEA, got %s", message.CommandName(msg))
	}
	if cp, err = parseCapabilities(msg); err != nil {
		if cp.ResultCode != 0 && cp.ResultCode != message.Success {
			// A refusal says more than its own flaws: its Result-Code
			// (an EventOpenFailed's) is kept, the flaw told after.
			why := "bad CEA: " + err.Error()
			if cp.ErrorMsg != "" {
				why = message.Printable(cp.ErrorMsg, 200) + "; " + why
			}
			return cp, &CapabilitiesError{Peer: cmp.Or(cp.OriginHost, p.Name()), ResultCode: cp.ResultCode, Message: why}
		}
		return cp, fmt.Errorf("bad CEA: %w", err)
	}
	// cp.OriginHost is a valid DiameterIdentity from here on: it becomes the
	// peer's name in events, logs and metric labels.
	if cp.ResultCode != message.Success {
		// Error-Message is the peer's free text: escaped and cut before it is printed.
		return cp, &CapabilitiesError{Peer: cp.OriginHost, ResultCode: cp.ResultCode, Message: message.Printable(cp.ErrorMsg, 200)}
	}
	if want := p.cfg.RemoteHost; want != "" && !message.EqualIdentity(cp.OriginHost, want) {
		// Not the node this Peer is for (an address reused, a DNS or
		// configuration slip): in service under the other's name it
		// would carry what was meant for want. freeDiameter refuses
		// such a CEA too. The Table gives the identity to no one.
		return cp, fmt.Errorf("CEA from %s, not from %s (RemoteHost): connection closed", cp.OriginHost, want)
	}
	return cp, nil
}

// exchangeServer waits for a CER and answers it: DIAMETER_INVALID_AVP_LENGTH
// for an AVP whose length does not fit (the AVP in a Failed-AVP),
// DIAMETER_UNKNOWN_PEER for a host outside AllowHosts,
// DIAMETER_NO_COMMON_APPLICATION when no application is shared,
// DIAMETER_SUCCESS otherwise.
func (p *Peer) exchangeServer(tc transport.Conn) (capabilities, error) {
	t := time.AfterFunc(p.cfg.CEATimeout, func() { tc.Close() })
	defer t.Stop()
	stop := context.AfterFunc(p.ctx, func() { tc.Close() })
	defer stop()
	msg, err := tc.ReadMessage()
	if err != nil {
		if !t.Stop() {
			return capabilities{}, fmt.Errorf("no CER within %v", p.cfg.CEATimeout)
		}
		return capabilities{}, fmt.Errorf("waiting for CER: %w", err)
	}
	if wire.CommandCode(msg) != wire.CmdCapabilitiesExchange || !wire.IsRequest(msg) {
		return capabilities{}, fmt.Errorf("expected a CER, got %s", message.CommandName(msg))
	}
	cp, err := parseCapabilities(msg)
	refuse := func(rc uint32, why string) (capabilities, error) {
		_ = tc.WriteMessages(p.cfg.newCEA(msg, tc.LocalAddr(), rc, why, cp.bad))
		return cp, &CapabilitiesError{Peer: cp.OriginHost, ResultCode: rc, Message: why}
	}
	var idErr *identityError
	var lenErr *lengthError
	switch {
	case errors.As(err, &lenErr): // RFC 6733 7.1.5, as checkRequest answers any other request
		cp.bad = &lenErr.avp
		return refuse(message.InvalidAVPLength, "bad CER: "+err.Error())
	case cp.missing != 0: // RFC 6733 5.3.1: { Origin-Host } { Origin-Realm }
		cp.bad = &wire.AVP{Code: cp.missing}
		name := "Origin-Host"
		if cp.missing == message.OriginRealm {
			name = "Origin-Realm"
		}
		return refuse(message.MissingAVP, "bad CER: no "+name)
	case errors.As(err, &idErr):
		return refuse(message.InvalidAVPValue, "bad CER: "+err.Error())
	case err != nil:
		return refuse(message.UnableToComply, "bad CER: "+err.Error())
	case cp.dup != nil:
		cp.bad = cp.dup
		return refuse(message.AVPOccursTooManyTimes, fmt.Sprintf("bad CER: AVP %d occurs more than once", cp.dup.Code))
	case !p.cfg.allowed(cp.OriginHost):
		return refuse(message.UnknownPeer, "Origin-Host "+cp.OriginHost+" is not in the allow-list")
	case !p.cfg.commonApps(cp):
		return refuse(message.NoCommonApplication, "no application in common")
	case !commonSecurity(cp.Inband, tc.Network() == transport.SchemeTLS):
		return refuse(message.NoCommonSecurity, fmt.Sprintf("Inband-Security-Id %v: in-band TLS is not offered; connect with TLS instead (NO_INBAND_SECURITY on a TLS connection)", cp.Inband))
	}
	tb := p.cfg.Table
	if tb != nil {
		// From here tc has the identity: a CER from it on another
		// connection is refused, until tc is released.
		v := tb.onCER(p.cfg.OriginHost, cp.OriginHost, tc)
		if v.rc != 0 {
			p.publish(Event{Kind: EventError, Reason: v.why})
			return refuse(v.rc, v.why)
		}
		if v.closeDial != nil {
			v.closeDial.Close()
		}
		if v.adopt != nil {
			cp.handTo, cp.handWhy = v.adopt, v.why
			if v.dialEnded {
				// The dial the election closed went down; the accepted
				// connection comes up on the dialing Peer (EventConnUp).
				v.adopt.publish(Event{Kind: EventConnDown, Reason: v.why})
			}
		}
	}
	if p.admit != nil {
		// Admitted before its CEA is out: a connection opened once the
		// peer has its CEA does not take this one's place for one not
		// admitted yet.
		p.admit()
	}
	if err := tc.WriteMessages(p.cfg.newCEA(msg, tc.LocalAddr(), message.Success, "", nil)); err != nil {
		if tb != nil {
			tb.release(cp.OriginHost, tc)
		}
		return cp, fmt.Errorf("sending CEA: %w", err)
	}
	return cp, nil
}

// unregister gives up the Peer's claim on its RemoteHost in the Table:
// the Peer is closing. p.mu held.
func (p *Peer) unregister() {
	if t, host := p.cfg.Table, p.cfg.RemoteHost; t != nil && host != "" {
		t.forget(p, host)
	}
}
