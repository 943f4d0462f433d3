#!/usr/bin/env python3
"""Mutation run of the dispatch core against the simulators (2026-12-06:
the mutants of mutation-2026-12-03b.py re-expressed against the tree of
56a6f29, where the request path moved into call/call.go (Await, Offer),
peer/conn.go (the reading baton), internal/outbox (the inline write),
client/client.go and client/avail.go (the view and its line of waiters)
and radpeer/udpclient.go; and new mutants of those mechanisms).

Each mutant is a plausible lifecycle bug put in by exact string
replacement in a copy of the tree (never in the working tree): the tree of
a commit (git archive, --base, default 56a6f29). With --committed-sims
(used for this run) the simulators are those of that commit too; without
it the simulators' files (client/*sim*_test.go and the fake servers of
client/harness_test.go) are taken from the working tree of the repository
this script is in, so that a run measures simulators being worked on
against the committed production code. For each mutant it builds the
client package's test binary (no -race: the seeds are what count) and
runs those of TestSim, TestSimUDP and TestSimRADIUSStream its code is on
the path of (on_path) over seeds 1..N each.

  python3 docs/figures/mutation-2026-12-06.py [-n 300] [--base COMMIT] \
      [--committed-sims] [--sims sim,usim,ssim] [--first-catch] \
      [--work DIR] [--out results.jsonl] [MUTANT-ID ...]
  python3 docs/figures/mutation-2026-12-06.py --check      # every old string occurs once
  python3 docs/figures/mutation-2026-12-06.py --kill-table RESULTS...

A mutant is caught by a simulator when some seed fails it (a violation the
simulator reports, or a test failure of the seed); a run that times out
(TIMEOUT, 600 s) or panics counts as a hang, reported apart. The results go to
--out as one JSON line per mutant; --kill-table prints the markdown table
of results files (merged: the last run of a mutant's simulator counts).
"""
import argparse, json, os, re, shutil, subprocess, sys, time

REPO = subprocess.run(['git', '-C', os.path.dirname(os.path.abspath(__file__)), 'rev-parse', '--show-toplevel'], capture_output=True, text=True, check=True).stdout.strip()
WORK = '/tmp/mutw'
# The bound of one simulator's run (wall time): the machine is shared, and
# TestSim's 600 seeds took up to 110 s under a load of 16 in the first run.
TIMEOUT = 600

# id: (where, description, [(file, old, new), ...])
# "where" names the function mutated. Every old string must occur once.
MUTANTS = {
 # --- the old kill table (M01-M34, N02-N23, R01-R04), re-expressed against 56a6f29 ---
 'M01': ('client.submitRun', 'a run whose peer just left service (SubmitAll error) is dropped, not placed elsewhere',
   [('client/client.go', '\t\treturn slices.Clone(calls) // that peer just left service\n', '\t\treturn nil // that peer just left service\n')]),
 'M02': ('client.rebuild', "refresh does not wake the waiters when a member comes back (the old view's channel carries over; only losses close it)",
   [('client/avail.go', '\tc.av.Store(v)\n\tclose(old.changed)\n', '\tif v.gained(old) {\n\t\tv.changed = old.changed\n\t} else {\n\t\tclose(old.changed)\n\t}\n\tc.av.Store(v)\n')]),
 'M03': ('client.pick', 'a Destination-Host request goes elsewhere while its host is not usable',
   [('client/client.go', '\t\tif usable(m) || v.probes[m.index] && open(m) {\n\t\t\treturn m\n\t\t}\n\t\treturn nil\n\t}\n', '\t\tif usable(m) || v.probes[m.index] && open(m) {\n\t\t\treturn m\n\t\t}\n\t}\n')]),
 'M04': ('client.onFailover', 'a failover moves a Destination-Host request to another host',
   [('client/client.go', '} else if dh := cl.Key.Dest; dh != "" && names(dh, from) {', '} else if dh := cl.Key.Dest; dh != "" && false && names(dh, from) {')]),
 'M05': ('peer.conn.leaveLocked (takePending)', 'a lost connection hands its requests over unsorted',
   [('peer/conn.go', '\tflush = c.drainedLocked()\n\tsortBySend(calls)\n\treturn calls, flush\n', '\tflush = c.drainedLocked()\n\tif !c.lost {\n\t\tsortBySend(calls)\n\t}\n\treturn calls, flush\n')]),
 'M06': ('peer.conn.leaveLocked (moveOut)', 'a SUSPECT failover (moveOut) hands its requests over unsorted',
   [('peer/conn.go', '\tflush = c.drainedLocked()\n\tsortBySend(calls)\n\treturn calls, flush\n', '\tflush = c.drainedLocked()\n\tif c.lost {\n\t\tsortBySend(calls)\n\t}\n\treturn calls, flush\n')]),
 'M07': ('client.dispatch', 'a single request that found no peer waits on the view at strand time, not the view it was placed against (a change in between is lost)',
   [('client/client.go', '\t\tc.strand([]*call.Call{cl}, v)\n', '\t\tc.strand([]*call.Call{cl}, c.view())\n')]),
 'M08': ('client.bump', 'a RADIUS connection closing while its server stays in service makes no new view (bump not forced)',
   [('client/avail.go', 'func (c *Client) bump() { c.rebuild(true, nil) }', 'func (c *Client) bump() { c.rebuild(false, nil) }')]),
 'M09': ('client.waitFor', 'Close leaves the waiting requests waiting (not failed)',
   [('client/avail.go', '\t\t\tfailAll(w.calls, errClientClosed)\n\t\t\tc.roundDone(w, c.view().gen, true)', '\t\t\tc.roundDone(w, c.view().gen, true)')]),
 'M10': ('peer.dcall.board', 'a resend after 3004/3002 carries the T flag',
   [('peer/conn.go', '\tcase b.Sends == 0 || b.AfterRefusal && !b.Lost:', '\tcase b.Sends == 0:')]),
 'M11': ('peer.dcall.board', 'a replay after a failover goes without the T flag',
   [('peer/conn.go', '\t\traw = slices.Clone(raw)\n\t\twire.SetRetransmit(raw)\n', '\t\traw = slices.Clone(raw)\n')]),
 'M12': ('call.Await', "the context's deadline is never watched",
   [('call/call.go', '\tif done := ctx.Done(); done != nil && !c.IsDone() {', '\tif done := ctx.Done(); false && done != nil && !c.IsDone() {')]),
 'M13': ('peer.conn.match', 'a late answer on the old connection is not matched',
   [('peer/conn.go', '\tif cl = c.gone[hbh]; cl != nil {', '\tif cl = c.gone[hbh]; false && cl != nil {')]),
 'M14': ('peer.conn.retire', 'a request completed elsewhere stays in the old pending table',
   [('peer/conn.go', '\tif c.pending.get(hbh) == cl {\n\t\tc.goLocked(hbh, cl)', '\tif false && c.pending.get(hbh) == cl {\n\t\tc.goLocked(hbh, cl)')]),
 'M15': ('client.onFailover', 'a request on its third failover is dropped',
   [('client/client.go', '\tfor _, cl := range calls {\n\t\tif cl.IsDone() {\n\t\t\tcontinue\n\t\t}\n\t\tif cl.LeftRefused() && cl.RefusedBy(from) {', '\tfor _, cl := range calls {\n\t\tif cl.IsDone() || cl.Sends() >= 3 {\n\t\t\tcontinue\n\t\t}\n\t\tif cl.LeftRefused() && cl.RefusedBy(from) {')]),
 'M16': ('peer.onClose', 'Close does not drain (the drain ends at once)',
   [('peer/step.go', '\t\tt := time.NewTimer(p.cfg.drainTimeout())\n\t\tdefer t.Stop()\n\t\tselect {\n\t\tcase <-drained:', '\t\tt := time.NewTimer(0)\n\t\tdefer t.Stop()\n\t\tselect {\n\t\tcase <-drained:')]),
 'M17': ('peer.conn.holdDPA', 'the DPR receiver sends its DPA before the answers it owes',
   [('peer/conn.go', '\tif c.owed.Load() == 0 {\n\t\tc.releaseDPA()\n\t}\n}', '\tif true {\n\t\tc.releaseDPA()\n\t}\n}')]),
 'M18': ('peer.conn.submitAll', 'the last request of a batch of more than 4 is left out (neither sent nor refused)',
   [('peer/conn.go', '\tok := make([]boarded, 0, len(calls))\n\tfor _, cl := range calls {', '\tok := make([]boarded, 0, len(calls))\n\tif len(calls) > 4 {\n\t\tcalls = calls[:len(calls)-1]\n\t}\n\tfor _, cl := range calls {')]),
 'M19': ('peer.failPending', 'a lost connection fails its requests instead of failing them over',
   [('peer/step.go', '\tif p.cfg.Failover != nil && err == ErrConnectionLost {', '\tif false && p.cfg.Failover != nil && err == ErrConnectionLost {')]),
 'M20': ('call.BoardLocked', 'the "already sent on this connection" check is removed',
   [('call/call.go', '\tcase slices.Contains(c.sentOn, cn) && !c.reusableLocked(cn):\n\t\treturn b, ErrAlreadySent', '\tcase false && slices.Contains(c.sentOn, cn) && !c.reusableLocked(cn):\n\t\treturn b, ErrAlreadySent')]),
 'M21': ('client.placeAll', 'requests refused at submit are dropped from the batch',
   [('client/client.go', '\t\t\t} else {\n\t\t\t\telsewhere(runAt[k], cl, runTo)\n\t\t\t}', '\t\t\t}')]),
 'M22': ('client.dispatchAll', 'a batch that found no peer waits on the view at strand time, not the one it was placed against',
   [('client/client.go', '\twaiting, concluded, undeliverable := c.strand(wait, v)\n', '\twaiting, concluded, undeliverable := c.strand(wait, c.view())\n')]),
 'M23': ('client.rebuild', 'the balancer is not told a server is back in service',
   [('client/avail.go', 'st != old.balancerState(i) || old.gen == 0 {', '(st != old.balancerState(i) && st != loadbalance.InService) || old.gen == 0 {')]),
 'M24': ('client.do', 'a Send without a deadline waits 2x RequestTimeout',
   [('client/client.go', '\tr := cl.Await(ctx, c.cfg.RequestTimeout)', '\tr := cl.Await(ctx, 2*c.cfg.RequestTimeout)')]),
 'M25': ('dedup.WrapCommit', 'the store runs the handler again for T-flagged replays',
   [('dedup/handler.go', '\t\tif o.Duplicate() {\n\t\t\tcounters.Duplicates.Add(1)', '\t\tif o.Duplicate() && wire.Flags(req)&wire.FlagRetransmit == 0 {\n\t\t\tcounters.Duplicates.Add(1)')]),
 'M26': ('client.strand', 'a request that found no peer fails at once instead of waiting',
   [('client/avail.go', '\twait, concluded = toWait(calls)\n\tif len(wait) == 0 {', '\twait, concluded = toWait(calls)\n\tfailAll(wait, ErrNoPeer)\n\twait = nil\n\tif len(wait) == 0 {')]),
 'M28': ('peer.conn.leaveLocked (moveOut)', 'requests moved off a SUSPECT connection are forgotten there (a late answer is not matched)',
   [('peer/conn.go', '\t\tc.rememberGoneLocked(id, cl)\n\t})\n', '\t\tif c.lost {\n\t\t\tc.rememberGoneLocked(id, cl)\n\t\t}\n\t})\n')]),
 'M29': ('client.maxWaiting', 'the waiting requests are bounded at 8',
   [('client/avail.go', 'var maxWaiting = 1 << 16', 'var maxWaiting = 8')]),
 'M30': ('peer.InService', 'a draining connection (our Close) still counts as in service',
   [('peer/peer.go', '\treturn p.State() == watchdog.Okay && c != nil && !p.leaving.Load() && !c.dprIn.Load()', '\treturn p.State() == watchdog.Okay && c != nil && !c.dprIn.Load()')]),
 'M31': ('client.round', "a waiter's round places its requests newest first",
   [('client/avail.go', '\tw.calls, _ = toWait(c.placeAll(w.calls, v, nil))', '\tw.calls, _ = toWait(c.placeAll(func() []*call.Call { s := slices.Clone(w.calls); slices.Reverse(s); return s }(), v, nil))')]),
 'M32': ('client.onFailover', "the first two requests of a failover's batch are swapped",
   [('client/client.go', '\tplaced := c.dispatchAll(live)\n', '\tif len(live) > 1 {\n\t\tlive[0], live[1] = live[1], live[0]\n\t}\n\tplaced := c.dispatchAll(live)\n')]),
 'M33': ('client.do', 'a timed-out replay is reported as unable to deliver',
   [('client/client.go', '\tif err != nil {\n\t\tif noPeer {', '\tif err != nil {\n\t\tif errors.Is(err, ErrTimeout) && r.Sends > 1 {\n\t\t\treturn nil, fmt.Errorf("client: %w: %w", ErrUnableToDeliver, err)\n\t\t}\n\t\tif noPeer {')]),
 'M34': ('peer.onDrained', "a graceful disconnect's drain timeout loses a lone unanswered request",
   [('peer/step.go', '\tif len(calls) > 0 {\n\t\tif p.cfg.Failover != nil {\n\t\t\tp.handOver(calls, why)', '\tif len(calls) > 1 {\n\t\tif p.cfg.Failover != nil {\n\t\t\tp.handOver(calls, why)')]),
 'N02': ('client.round', 'a waiter does not wait for the round of the waiter before it',
   [('client/avail.go', '\tc.after(w, v.gen)\n', '')]),
 'N03': ('client.placeAll', 'a request refused at submit waits for a view change instead of going elsewhere',
   [('client/client.go', '\t\t\t} else {\n\t\t\t\telsewhere(runAt[k], cl, runTo)\n\t\t\t}', '\t\t\t} else if !cl.IsDone() {\n\t\t\t\twait = append(wait, cl)\n\t\t\t}')]),
 'N06': ('client.roundDone', 'a waiter with nothing left stays in line',
   [('client/avail.go', '\tif !gone {\n\t\treturn\n\t}\n\tw.gone = true\n', '\tif true {\n\t\treturn\n\t}\n\tw.gone = true\n')]),
 'N07': ('client.placeAll', 'a request with no peer is put to wait before the run picked ahead of it is submitted',
   [('client/client.go', '\t\t\tflush() // those before it first, in case they end up waiting too\n', '')]),
 'N08': ('client.strand', "a new waiter's round counter starts at 0, not at its view's generation",
   [('client/avail.go', 'round: v.gen, retries', 'round: 0, retries')]),
 'N09': ('client.rebuild', "refresh does not close the old view's changed channel",
   [('client/avail.go', '\tclose(old.changed)\n', '\t_ = old.changed\n')]),
 'N12': ('client.waitFor', 'a request lost and refused everywhere waits for a view change (no retry tick is set: its refusals are never forgotten)',
   [('client/avail.go', '\t\tif slices.ContainsFunc(w.calls, (*call.Call).RefusedAfterLoss) {', '\t\tif false && slices.ContainsFunc(w.calls, (*call.Call).RefusedAfterLoss) {')]),
 'N14': ('client.shutdown', 'Close does not wait for the waiters',
   [('client/client.go', '\tc.waiters.Wait() // requests waiting for a peer failed at c.cancel\n', '')]),
 'N15': ('client.roundDone', 'a round does not wake the waiter behind it (its tick is replaced, not closed)',
   [('client/avail.go', '\tclose(w.tick)\n\tw.tick = make(chan struct{})\n', '\tw.tick = make(chan struct{})\n')]),
 'N16': ('client.after', 'a waiter waits for the one before it to have had a round in a newer view than its own',
   [('client/avail.go', '\t\tcase p == nil || (p.round >= gen && !p.gone):', '\t\tcase p == nil || (p.round > gen && !p.gone):')]),
 'N17': ('client.waitFor', 'a waiter ignores a view change in which no member gained (a RADIUS connection closing: bump)',
   [('client/avail.go', '\t\tcase <-v.changed:\n\t\tcase <-c.ctx.Done():\n\t\t\tc.waiting.Add', '\t\tcase <-v.changed:\n\t\t\tif nv := c.view(); !nv.gained(v) {\n\t\t\t\tv = nv\n\t\t\t\tcontinue\n\t\t\t}\n\t\tcase <-c.ctx.Done():\n\t\t\tc.waiting.Add')]),
 'N18': ('client.rebuild', 'the view ignores the policy (a server the policy holds out takes requests)',
   [('client/avail.go', '\t\tv.takes[i] = v.open[i] && (c.group == nil || c.group.State(i).Takes())', '\t\tv.takes[i] = v.open[i]')]),
 'N19': ('client.avail.same', 'a view differing only in what the policy lets in counts as the same (no new view, no wake-up)',
   [('client/avail.go', 'slices.Equal(v.open, w.open) && slices.Equal(v.takes, w.takes) &&\n', 'slices.Equal(v.open, w.open) &&\n')]),
 'N20': ('client.waitFor', 'a waiter leaving at Close does not leave the line (the one behind it never has its turn)',
   [('client/avail.go', '\t\t\tfailAll(w.calls, errClientClosed)\n\t\t\tc.roundDone(w, c.view().gen, true)\n\t\t\treturn', '\t\t\tfailAll(w.calls, errClientClosed)\n\t\t\treturn')]),
 'N21': ('client.placeOne', 'a member that refused is tried again instead of the next',
   [('client/client.go', '\t\tskip = append(skip, m)\n\t}\n\treturn nil\n}', '\t}\n\treturn nil\n}')]),
 'N22': ('client.toWait', 'a request every peer refused waits instead of getting the last refusal',
   [('client/avail.go', '\t\tcase cl.Conclude():\n\t\t\tconcluded = append(concluded, cl)\n\t\tcase cl.Park():', '\t\tcase cl.Park():')]),
 'N23': ('client.waitFor', 'a waiter whose requests pass their deadlines does not look again (the deadline timer is not reset)',
   [('client/avail.go', '\t\t\tt.Reset(untilDeadline(w.calls, c.cfg.RequestTimeout))\n\t\t\tcontinue', '\t\t\tcontinue')]),
 'R01': ('radpeer.dropConn', 'a lost RADIUS stream connection fails its requests instead of failing them over',
   [('radpeer/peer.go', '\tif err == ErrConnectionLost && p.cfg.Failover != nil && !p.closing {\n\t\tp.moveOut(l, calls, "connection lost")', '\tif false && err == ErrConnectionLost && p.cfg.Failover != nil && !p.closing {\n\t\tp.moveOut(l, calls, "connection lost")')]),
 'R02': ('radpeer.serviceChanged', 'requests waiting for a connection stay when the server leaves service (not handed over)',
   [('radpeer/peer.go', '\tcase was && !p.closing && len(p.waiting) > 0:', '\tcase false && was && !p.closing && len(p.waiting) > 0:')]),
 'R03': ('radpeer.UDPPeer.expire', 'one attempt more than Retries per server',
   [('radpeer/udpclient.go', '\tif snd.attempts < snd.max {', '\tif snd.attempts <= snd.max {')]),
 'R04': ('radpeer.avoidsLocked', 'a request may go again on the stream connection it is pending on (RFC 6613 2.6.1)',
   [('radpeer/peer.go', '\t\tif slices.Contains(sent, &c.h) {\n\t\t\treturn true\n\t\t}\n\t\tother = true', '\t\tother = true')]),
 # --- new in this run: the reading baton and the caller's wait ---
 'B01': ('peer.conn.release', 'a holder done with its call leaves the baton free while other calls are pending (neither to a waiting caller nor to the reader)',
   [('peer/conn.go', '\tif c.pendingBesides(d) > 0 {\n\t\tif c.handTo(b.waiter.Swap(nil), d) {', '\tif false && c.pendingBesides(d) > 0 {\n\t\tif c.handTo(b.waiter.Swap(nil), d) {')]),
 'B02': ('peer.conn.readFor', 'a request from the peer (DWR, DPR, an application request) that a reading caller meets is dropped, not carried to the reader',
   [('peer/conn.go', '\t\tif wire.IsRequest(msg) {\n\t\t\tb.carry = msg // the reader answers it, on its path\n\t\t\tbreak\n\t\t}', '\t\tif wire.IsRequest(msg) {\n\t\t\tcontinue\n\t\t}')]),
 'B03': ('peer.conn.readFor', 'a caller reading the connection stops only at its answer, not when its wait is cut short (deadline, context)',
   [('peer/conn.go', '\t\tif d.IsDone() || d.stop.Load() {\n\t\t\tb.inRead.Store(nil)\n\t\t\tbreak', '\t\tif d.IsDone() {\n\t\t\tb.inRead.Store(nil)\n\t\t\tbreak')]),
 'B04': ('peer.dcall.Interrupt', "a cut-short wait does not interrupt its caller's read (no read deadline set)",
   [('peer/conn.go', '\t\tc.bt.rd.SetReadDeadline(time.Unix(1, 0))\n', '')]),
 'B05': ('peer.conn.submit', 'a request written inline on a connection whose baton is free is not offered the baton (no one reads until the parked reader looks again)',
   [('peer/conn.go', '\t\t\tcl.Offer()\n', '')]),
 'B06': ('call.Await', 'an Offer that came as the call ended is not taken up (the baton handed to it lies unread)',
   [('call/call.go', '\tfor c.offered { // an Offer that came as the call ended', '\tfor false && c.offered { // an Offer that came as the call ended')]),
 'B07': ('call.cutShort', 'a deadline or cancel does not interrupt a caller that is reading for its call',
   [('call/call.go', '\tif intr {\n\t\tc.Proto.(Reader).Interrupt()\n\t}\n}', '\tif false && intr {\n\t\tc.Proto.(Reader).Interrupt()\n\t}\n}')]),
 'B11': ('call.finish', 'a call completed while its caller reads for it (another connection\'s answer, a failure) does not interrupt the read',
   [('call/call.go', '\tif intr {\n\t\tc.Proto.(Reader).Interrupt()\n\t}\n\treturn true, owner', '\tif false && intr {\n\t\tc.Proto.(Reader).Interrupt()\n\t}\n\treturn true, owner')]),
 'B08': ('call.Await', 'a call whose wait was cut short is not ended (its connection is not told; the caller gets neither answer nor error)',
   [('call/call.go', '\t\terr := c.cut\n\t\tc.mu.Unlock()\n\t\tc.end(nil, 0, err, nil, true)\n', '\t\terr := c.cut\n\t\tc.mu.Unlock()\n\t\t_ = err\n')]),
 'B09': ('call.Await', 'a Send whose context had already ended when it began waiting waits anyway',
   [('call/call.go', '\t\t\tc.cutShort(ctxError(ctx))\n\t\t} else if c.flags.Or', '\t\t\t_ = ctxError\n\t\t} else if c.flags.Or')]),
 'B10': ('peer.conn.handTo', "the baton is handed to a waiting caller that has left Await (Offer's false ignored)",
   [('peer/conn.go', '\tif w.Offer() {\n\t\treturn true // its Await runs ReadAnswer, which takes it\n\t}', '\tif w.Offer() || true {\n\t\treturn true // its Await runs ReadAnswer, which takes it\n\t}')]),
 # --- the outbox's inline write ---
 'O01': ('outbox.writeInline', "the rest of a partly written inline message goes to the tail of the queue, behind messages queued meanwhile",
   [('internal/outbox/outbox.go', '\t\to.q = slices.Insert(o.q, 0, msg[n:])', '\t\to.q = slices.Insert(o.q, len(o.q), msg[n:])')]),
 'O02': ('outbox.inlineLocked', 'a message alone is written inline while the writer goroutine is writing',
   [('internal/outbox/outbox.go', '\tif o.tw == nil || o.writing || len(o.q) > 0 || o.flushEnd {', '\tif o.tw == nil || len(o.q) > 0 || o.flushEnd {')]),
 'O03': ('outbox.writeInline', 'a close-after-flush that came during an inline write is not acted on (no writer kicked for it)',
   [('internal/outbox/outbox.go', '\tif !o.closed && (len(o.q) > 0 || o.flushEnd) {\n\t\to.kickLocked()', '\tif !o.closed && len(o.q) > 0 {\n\t\to.kickLocked()')]),
 'O04': ('outbox.writeInline', 'a failed inline write does not end the connection',
   [('internal/outbox/outbox.go', '\t\to.onEnd(err)\n\t\treturn\n\t}\n\to.Mu.Lock()\n\tif n < len(msg) {', '\t\treturn\n\t}\n\to.Mu.Lock()\n\tif n < len(msg) {')]),
 'O05': ('outbox.Post', "the connection's lock is released before the request is queued (boarding order and wire order may differ)",
   [('internal/outbox/outbox.go', 'func (o *Outbox) Post(msg []byte, alone, answer bool, held sync.Locker) (inline, ok bool) {\n', 'func (o *Outbox) Post(msg []byte, alone, answer bool, held sync.Locker) (inline, ok bool) {\n\tif held != nil {\n\t\theld.Unlock()\n\t\theld = nil\n\t}\n')]),
 # --- the view and its generations, the line of waiters ---
 'V01': ('client.after', 'a waiter stops at a predecessor that left the line instead of looking past it to the ones before',
   [('client/avail.go', '\t\tcase p == nil || (p.round >= gen && !p.gone):', '\t\tcase p == nil || p.gone || p.round >= gen:')]),
 'V02': ('client.joinLine', 'requests handed over by a failover do not wait for the line of waiters (they may leave before requests that waited)',
   [('client/avail.go', '\tif last != nil {\n\t\tc.after(&waiter{prev: last}, v.gen)', '\tif false && last != nil {\n\t\tc.after(&waiter{prev: last}, v.gen)')]),
 'V03': ('client.rebuild', 'a new view keeps the generation of the view it replaces',
   [('client/avail.go', '\tv := &avail{gen: old.gen + 1, ros: ros,', '\tv := &avail{gen: max(old.gen, 1), ros: ros,')]),
 'V04': ('client.rebuild', 'a retry tick makes no new view when nothing else changed (no waiter wakes for it)',
   [('client/avail.go', '\tif !force && v.same(old) && v.retries == old.retries {', '\tif !force && v.same(old) {')]),
 'V05': ('client.round', "a round in a view with a new retry tick does not forget its lost requests' refusals",
   [('client/avail.go', '\tif v.retries != w.retries {\n\t\tw.retries = v.retries', '\tif false && v.retries != w.retries {\n\t\tw.retries = v.retries')]),
 'V06': ('client.roundDone', "a round does not record its view's generation (the waiter behind waits for it to leave the line)",
   [('client/avail.go', '\tw.round = gen\n\tclose(w.tick)', '\tclose(w.tick)')]),
 'V07': ('client.waitFor', 'requests of a waiter that passed their deadlines stay counted waiting',
   [('client/avail.go', '\t\t\tc.waiting.Add(-int64(len(w.calls) - len(left)))\n', '')]),
 # --- the UDP carrier ---
 'U01': ('radpeer.UDPPeer.releaseLocked', 'a freed Identifier goes back to the ring, not to the first request waiting for one',
   [('radpeer/udpclient.go', '\tat := snd.at\n\tfor len(at.waiting) > 0 {', '\tat := snd.at\n\tfor false && len(at.waiting) > 0 {')]),
 'U02': ('radpeer.UDPPeer.HandOver', 'a request handed over while waiting for an Identifier stays boarded here (in flight on this server)',
   [('radpeer/udpclient.go', '\t\t\t\tw.rc.Unboard(&p.h, w.board)\n', '')]),
 'U03': ('radpeer.UDPPeer.retire', 'a request completed elsewhere (its caller gave up, another server answered) goes on being retransmitted here',
   [('radpeer/udpclient.go', '\tdelete(p.sending, rc)\n\tsnd.over = true\n\tif snd.s != nil && snd.timer != nil {', '\tdelete(p.sending, rc)\n\tif snd.s != nil && snd.timer != nil {')]),
 'U04': ('radpeer.UDPPeer.Submit', "a probe (one attempt, SetAttempts(1)) is retransmitted Retries times like any request",
   [('radpeer/udpclient.go', '\tif n := c.Attempts(); n > 0 {\n\t\tsnd.max = n\n\t}', '\tif n := c.Attempts(); n > 0 && false {\n\t\tsnd.max = n\n\t}')]),
 'U05': ('radpeer.UDPPeer.openSocket', 'a new socket gives its Identifiers to the waiting requests newest first',
   [('radpeer/udpclient.go', '\t\tfor len(at.waiting) > 0 && s.free.size > 0 {\n\t\t\tw := at.waiting[0]\n\t\t\tat.waiting[0] = nil\n\t\t\tat.waiting = at.waiting[1:]', '\t\tfor len(at.waiting) > 0 && s.free.size > 0 {\n\t\t\tw := at.waiting[len(at.waiting)-1]\n\t\t\tat.waiting[len(at.waiting)-1] = nil\n\t\t\tat.waiting = at.waiting[:len(at.waiting)-1]')]),
 # --- the Diameter peer, new since 18811af ---
 'P01': ('peer.InService', "a connection that received the peer's DPR still counts as in service",
   [('peer/peer.go', '\treturn p.State() == watchdog.Okay && c != nil && !p.leaving.Load() && !c.dprIn.Load()', '\treturn p.State() == watchdog.Okay && c != nil && !p.leaving.Load()')]),
 'P02': ('peer.conn.submit', 'a draining connection (our Close, or the peer\'s DPR) takes new requests',
   [('peer/conn.go', '\tif c.lost || c.draining || c.shut {\n\t\tdraining := c.draining', '\tif c.lost || c.shut {\n\t\tdraining := c.draining')]),
 # --- the throttle's wait for a hand-over, new in 2026-12-07's session ---
 'Q01': ('client.pollLocked', "the throttle releases while a failover's hand-over is awaited (its replays may leave behind newer requests)",
   [('client/limits.go', '\tif len(c.handing) > 0 {\n\t\t// A failover', '\tif false && len(c.handing) > 0 {\n\t\t// A failover')]),
 'Q02': ('client.onFailover', 'the wait for a hand-over does not end when the hand-over comes (only the dispatcher is woken)',
   [('client/client.go', '\t\tdefer c.handedOver(from) // after the replays are queued\n', '\t\tdefer c.poke()\n')]),
 'Q03': ('peer.onHandOver', "HandOver's done is not called when there is nothing to hand over",
   [('peer/step.go', '\tif e.done != nil {\n\t\tdefer p.notify(notice{done: e.done}) // after the hand-over, if any\n\t}\n', ''),
    ('peer/step.go', '\t\tp.handOver(calls, e.note)\n\t}\n\tp.flushLater(cur, flush)\n}', '\t\tp.handOver(calls, e.note)\n\t\tif e.done != nil {\n\t\t\tp.notify(notice{done: e.done})\n\t\t}\n\t}\n\tp.flushLater(cur, flush)\n}')]),
}

SIMS = {
  'sim': ('TestSim$', '-sim.n'),
  'usim': ('TestSimUDP$', '-usim.n'),
  'ssim': ('TestSimRADIUSStream$', '-ssim.n'),
}

def on_path(edits):
  """The simulators a mutant's code is on the path of: the dispatch core
  (client/, call/) under all three; peer/ and dedup's WrapCommit under the
  Diameter one; internal/outbox (every stream connection's write queue)
  under the Diameter one, the only one that reaches the code the mutants
  change; radpeer's stream carrier under TestSimRADIUSStream, its UDP
  carrier under TestSimUDP."""
  sims = set()
  for f, _, _ in edits:
    if f.startswith(('client/', 'call/')):
      sims |= {'sim', 'usim', 'ssim'}
    elif f.startswith(('peer/', 'dedup/')):
      sims.add('sim')
    elif f.startswith('internal/outbox/'):
      # Every stream connection's write queue, but radpeer uses only its
      # Send, a non-inline Answer and Close: Post, the inline write and
      # CloseAfterFlush run under the Diameter simulator alone (a panic
      # put in them passed TestSimRADIUSStream's seeds 1..300).
      sims.add('sim')
    elif f == 'radpeer/udpclient.go':
      sims.add('usim')
    elif f.startswith('radpeer/'):
      sims.add('ssim')
  return [s for s in SIMS if s in sims] or list(SIMS)

def prepare(base, tree, committed):
  if os.path.exists(tree):
    shutil.rmtree(tree)
  os.makedirs(tree)
  a = subprocess.run(['git', '-C', REPO, 'archive', base], capture_output=True, check=True)
  subprocess.run(['tar', '-x', '-C', tree], input=a.stdout, check=True)
  if committed:
    return
  for f in os.listdir(os.path.join(REPO, 'client')):
    if ('sim' in f or f == 'harness_test.go') and f.endswith('_test.go'):
      shutil.copy(os.path.join(REPO, 'client', f), os.path.join(tree, 'client', f))

def is_log(line):
  """A line a failing seed's log carries that is no violation: the
  reconfiguration simulators' trace (simreconf_test.go, ssimreconf_test.go:
  a virtual time stamp, an event, a summary)."""
  m = re.match(r'\s*(\w+_test\.go):\d+: (.*)', line)
  if not m:
    return False
  f, msg = m.groups()
  return 'reconf_test.go' in f or bool(re.match(r'\d\d:\d\d\.\d{3} ', msg)) or msg.startswith('reconfigurations')

def run_sim(binary, cwd, sim, n):
  name, flag = SIMS[sim]
  t0 = time.time()
  try:
    r = subprocess.run(['timeout', str(TIMEOUT), binary, '-test.run', name, f'{flag}={n}'], cwd=cwd, capture_output=True, text=True)
    out, rc = r.stdout + r.stderr, r.returncode
  except Exception as e:  # noqa
    out, rc = str(e), -1
  secs = round(time.time() - t0, 1)
  failed = sorted({int(s) for s in re.findall(r'seed (\d+) failed: replay', out)})
  errs = [l.strip() for l in out.splitlines() if re.match(r'\s+\w+_test\.go:\d+: ', l) and 'failed: replay' not in l and 'failed seeds' not in l and 'schedules in' not in l and not is_log(l)]
  hang = rc == 124 or 'panic:' in out or 'fatal error' in out
  first = ''
  for l in out.splitlines():
    if l.startswith('panic:') or l.startswith('fatal error'):
      first = l.strip()
      break
  return {'sim': sim, 'n': n, 'rc': rc, 'secs': secs, 'failed': failed, 'nfailed': len(failed), 'hang': hang,
          'panic': first[:300], 'errors': errs[:6]}

def main():
  ap = argparse.ArgumentParser()
  ap.add_argument('-n', type=int, default=600)
  ap.add_argument('--base', default='56a6f29')
  ap.add_argument('--sims', default='sim,usim,ssim', help='of those on the mutant\'s path')
  ap.add_argument('--work', default=WORK, help='scratch directory (trees, binaries)')
  ap.add_argument('--out', default=None, help='results file (default WORK/results.jsonl)')
  ap.add_argument('--committed-sims', action='store_true', help="the simulators as committed at --base (the 'before' run)")
  ap.add_argument('--kill-table', nargs='+', metavar='RESULTS', help='print the kill table of the results files (merged) and exit')
  ap.add_argument('--check', action='store_true', help='apply each mutant (ids, default all) to a fresh copy of --base: every old string must occur once; with --build, compile the packages it edits')
  ap.add_argument('--build', action='store_true', help='with --check: go build (and go vet) the edited packages of each mutant')
  ap.add_argument('--first-catch', action='store_true', help='run a mutant\'s simulators in order (--sims) only until one catches it')
  ap.add_argument('ids', nargs='*')
  a = ap.parse_args()
  if a.kill_table:
    kill_table(a.kill_table)
    return
  base = subprocess.run(['git', '-C', REPO, 'rev-parse', a.base], capture_output=True, text=True, check=True).stdout.strip()
  if a.check:
    check(base, a.work, a.ids or list(MUTANTS), a.build)
    return
  os.makedirs(a.work, exist_ok=True)
  a.out = a.out or os.path.join(a.work, 'results.jsonl')
  clean = os.path.join(a.work, 'clean')
  tree = os.path.join(a.work, 'm')  # one path for every mutant: the build cache stays warm
  prepare(base, clean, a.committed_sims)
  ids = a.ids or ['none'] + list(MUTANTS)
  with open(a.out, 'a') as out:
    for mid in ids:
      if os.path.exists(tree):
        shutil.rmtree(tree)
      shutil.copytree(clean, tree)
      where, desc, edits = ('-', 'the unmutated tree', []) if mid == 'none' else MUTANTS[mid]
      bad = ''
      for f, old, new in edits:
        p = os.path.join(tree, f)
        s = open(p).read()
        if s.count(old) != 1:
          bad = f'pattern occurs {s.count(old)} times in {f}'
          break
        open(p, 'w').write(s.replace(old, new))
      rec = {'id': mid, 'where': where, 'desc': desc, 'base': base, 'n': a.n, 'committed_sims': a.committed_sims}
      if bad:
        rec['error'] = bad
      else:
        binary = os.path.join(a.work, 'm.test')
        r = subprocess.run(['go', 'test', '-c', '-o', binary, './client'], cwd=tree, capture_output=True, text=True)
        if r.returncode:
          rec['error'] = 'build: ' + r.stderr[:400]
        else:
          sims = [s for s in a.sims.split(',') if s in on_path(edits)]
          rec['runs'] = []
          for s in sims:
            x = run_sim(binary, os.path.join(tree, 'client'), s, a.n)
            rec['runs'].append(x)
            if a.first_catch and x['nfailed'] > 0 and x['rc'] != 124:
              rec['skipped'] = [y for y in sims if y not in {z['sim'] for z in rec['runs']}]
              break
      out.write(json.dumps(rec) + '\n')
      out.flush()
      summary = rec.get('error') or ' | '.join(f"{x['sim']} {x['nfailed']}{' HANG' if x['hang'] else ''} {x['secs']}s" for x in rec['runs'])
      print(mid, '|', summary, flush=True)

def load(path):
  recs = {}
  for l in open(path):
    r = json.loads(l)
    recs[r['id']] = r  # the last run of a mutant counts
  return recs

def cell(r):
  """A mutant's result in one run: per simulator, the seeds failed and the
  first violation reported."""
  if r is None:
    return 'not run'
  if 'error' in r:
    return r['error']
  out = []
  skipped = r.get('skipped') or []
  for x in r['runs']:
    c = f"{x['sim']} {x['nfailed']}/{x.get('n', r.get('n'))}"
    if x['rc'] == 124:
      c += ' (timed out)'
    elif x['panic']:
      c += ' (panic)'
    errs = [e for e in x['errors'] if not is_log(e)]
    if x['nfailed'] and errs:
      e = re.sub(r'^\S+_test\.go:\d+: ', '', errs[0])
      e = re.sub(r'^seed \d+: ', '', e)
      c += ': ' + re.sub(r'\d{6,}', 'N', e)[:80].replace('|', '/')
    out.append(c)
  skipped = [y for y in skipped if y not in {x['sim'] for x in r['runs']}]
  if skipped:
    out.append(' '.join(skipped) + ' not run (caught already)')
  return '; '.join(out)

def caught(r):
  """Caught: some seed of some simulator failed, reported as a failure
  (a run that timed out is not counted)."""
  return r is not None and 'runs' in r and any(x['nfailed'] > 0 and x['rc'] != 124 for x in r['runs'])

def merge(paths):
  """The results of several runs, by mutant: each simulator's run from
  the last file that has one (the runs of one mutant may be split by
  simulator across files), except that a run that caught the mutant is
  not replaced by a later one that did not."""
  out = {}
  for path in paths:
    for mid, r in load(path).items():
      m = out.setdefault(mid, {k: v for k, v in r.items() if k != 'runs'} | {'runs': []})
      if 'skipped' in r:
        m['skipped'] = r['skipped']
      if 'error' in r:
        m['error'] = r['error']
        continue
      for x in r.get('runs', []):
        x.setdefault('n', r.get('n'))
        prev = [y for y in m['runs'] if y['sim'] == x['sim']]
        if prev and prev[0]['nfailed'] > 0 and prev[0]['rc'] != 124 and x['nfailed'] == 0:
          continue  # a catch stands: a later run (more seeds, or a repeat for its message) that missed does not undo it
        m['runs'] = [y for y in m['runs'] if y['sim'] != x['sim']] + [x]
  for m in out.values():
    m['runs'].sort(key=lambda x: list(SIMS).index(x['sim'].split()[0]))
  return out

def check(base, work, ids, build):
  """--check: each mutant applied alone to a fresh copy of base; its old
  strings must each occur once, and with build the packages it edits
  must compile (go vet: the test files of the package too)."""
  clean = os.path.join(work, 'check-clean')
  tree = os.path.join(work, 'check')
  prepare(base, clean, True)
  bad = 0
  for mid in ids:
    where, desc, edits = MUTANTS[mid]
    if os.path.exists(tree):
      shutil.rmtree(tree)
    shutil.copytree(clean, tree)
    msg = 'ok'
    for f, old, new in edits:
      p = os.path.join(tree, f)
      s = open(p).read()
      if s.count(old) != 1:
        msg = f'pattern occurs {s.count(old)} times in {f}'
        break
      open(p, 'w').write(s.replace(old, new))
    if msg == 'ok' and build:
      pkgs = sorted({'./' + os.path.dirname(f) for f, _, _ in edits})
      r = subprocess.run(['go', 'vet'] + pkgs, cwd=tree, capture_output=True, text=True)
      if r.returncode:
        msg = 'build: ' + r.stderr.strip().replace('\n', ' / ')[:300]
    bad += msg != 'ok'
    print(mid, where, msg, flush=True)
  print(f'{len(ids) - bad} of {len(ids)} mutants apply once' + (' and compile' if build else ''))

def kill_table(paths):
  """--kill-table RESULTS...: the kill table of the results files
  (merged), in the order of MUTANTS; a mutant in none of them: not run."""
  recs = merge(paths)
  print('| # | where | mutant | simulators (seeds failed of n; first violation) | first catch |')
  print('|---|---|---|---|---|')
  ids = ['none'] + list(MUTANTS)
  for mid in ids:
    where, desc = ('-', 'the unmutated tree') if mid == 'none' else MUTANTS[mid][:2]
    r = recs.get(mid)
    first = ''
    if r and r.get('runs'):
      for x in r['runs']:
        if x['nfailed'] and x['rc'] != 124:
          first = f"{x['sim']} seed {x['failed'][0]} (of {x.get('n', r.get('n'))})"
          break
    print(f"| {mid} | {where} | {desc} | {cell(r)} | {first} |")
  ids = ids[1:]
  ran = [m for m in ids if m in recs and recs[m].get('runs')]
  print()
  print('caught:', sum(caught(recs.get(m)) for m in ids), 'of', len(ran), 'run;',
        'not caught:', ' '.join(m for m in ran if not caught(recs.get(m))) or '-', ';',
        'not run:', ' '.join(m for m in ids if m not in ran) or '-')

if __name__ == '__main__':
  main()
