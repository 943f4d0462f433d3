#!/usr/bin/env python3
"""Mutation run of the dispatch core against the simulators (2026-12-03,
second run: the mutants of mutation-2026-12-03.py re-expressed against the
tree of 18811af, where peer/call.go went into peer/conn.go).

Each mutant is a plausible lifecycle bug put in by exact string
replacement in a copy of the tree (never in the working tree): the tree of
a commit (git archive, --base, default 18811af), with the simulators'
files (client/*sim*_test.go and the fake servers of client/harness_test.go)
taken from the working tree of the repository this script is in, so that a run measures the simulators being
worked on against the committed production code. For each mutant it builds
the client package's test binary (no -race: the seeds are what count) and
runs those of TestSim, TestSimUDP and TestSimRADIUSStream its code is on the
path of (on_path) over seeds 1..N each.

  python3 docs/figures/mutation-2026-12-03b.py [-n 600] [--base COMMIT] \
      [--committed-sims] [--sims sim,usim,ssim] [--out results.jsonl] [MUTANT-ID ...]

A mutant is caught by a simulator when some seed fails it (a violation the
simulator reports, or a test failure of the seed); a run that times out
(TIMEOUT, 600 s) or panics counts as a hang, reported apart. The results go to
--out as one JSON line per mutant and simulator; --table prints the
markdown table of a results file.
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
 # --- the old kill table (M01-M34), re-expressed against the new core ---
 'M01': ('client.submitRun', 'a run whose peer just left service (SubmitAll error) is dropped, not placed elsewhere',
   [('client/client.go', '		return slices.Clone(calls) // that peer just left service\n', '		return nil // that peer just left service\n')]),
 'M02': ('client.rebuild', 'refresh does not wake the waiters when a member comes back (the old view\'s channel carries over; only losses close it)',
   [('client/avail.go', '	close(old.changed)\n', '	if v.gained(old) {\n		v.changed = old.changed\n	} else {\n		close(old.changed)\n	}\n')]),
 'M03': ('client.pick', 'a Destination-Host request goes elsewhere while its host is not usable',
   [('client/client.go', '		if usable(m) {\n			return m\n		}\n		return nil\n	}\n	if c.group != nil {', '		if usable(m) {\n			return m\n		}\n	}\n	if c.group != nil {')]),
 'M04': ('client.onFailover', 'a failover moves a Destination-Host request to another host',
   [('client/client.go', '} else if dh := cl.Key.Dest; dh != "" && names(dh, from) {', '} else if dh := cl.Key.Dest; dh != "" && false && names(dh, from) {')]),
 'M05': ('peer.conn.takePending', 'a lost connection hands its requests over unsorted',
   [('peer/conn.go', '	c.pending.clear()\n	sortBySend(calls)\n', '	c.pending.clear()\n')]),
 'M06': ('peer.conn.leaveAllLocked', 'a SUSPECT failover hands its requests over unsorted',
   [('peer/conn.go', '	c.drainedLocked()\n	sortBySend(calls)\n	return calls\n', '	c.drainedLocked()\n	return calls\n')]),
 'M07': ('client.dispatch', 'a single request that found no peer waits on the view at strand time, not the view it was placed against (a change in between is lost)',
   [('client/client.go', '		c.strand([]*call.Call{cl}, v)\n', '		c.strand([]*call.Call{cl}, c.view())\n')]),
 'M08': ('client.bump', 'a RADIUS connection closing while its server stays in service makes no new view (bump not forced)',
   [('client/avail.go', 'func (c *Client) bump() { c.rebuild(true) }', 'func (c *Client) bump() { c.rebuild(false) }')]),
 'M09': ('client.waitFor', 'Close leaves the waiting requests waiting (not failed)',
   [('client/avail.go', '			failAll(w.calls, fmt.Errorf("client closed: %w", peer.ErrClosed))\n			c.roundDone(w, c.view().gen, true)', '			c.roundDone(w, c.view().gen, true)')]),
 'M10': ('peer.dcall.board', 'a resend after 3004/3002 carries the T flag',
   [('peer/conn.go', '	case b.Sends == 0 || b.AfterRefusal:', '	case b.Sends == 0:')]),
 'M11': ('peer.dcall.board', 'a replay after a failover goes without the T flag',
   [('peer/conn.go', '		raw = slices.Clone(raw)\n		wire.SetRetransmit(raw)\n', '		raw = slices.Clone(raw)\n')]),
 'M12': ('call.Await', "the context's deadline is never watched",
   [('call/call.go', '	if done := ctx.Done(); done != nil && !c.done.Load() {', '	if done := ctx.Done(); false && done != nil && !c.done.Load() {')]),
 'M13': ('peer.conn.match', 'a late answer on the old connection is not matched',
   [('peer/conn.go', '	if cl = c.gone[hbh]; cl != nil {', '	if cl = c.gone[hbh]; false && cl != nil {')]),
 'M14': ('peer.conn.retire', 'a request completed elsewhere stays in the old pending table',
   [('peer/conn.go', '	if c.pending.get(hbh) == cl {\n		c.goLocked(hbh, cl)', '	if false && c.pending.get(hbh) == cl {\n		c.goLocked(hbh, cl)')]),
 'M15': ('client.onFailover', 'a request on its third failover is dropped',
   [('client/client.go', '	for _, cl := range calls {\n		if cl.IsDone() {\n			continue\n		}\n		if cl.RefusedBy(from) {', '	for _, cl := range calls {\n		if cl.IsDone() || cl.Sends() >= 3 {\n			continue\n		}\n		if cl.RefusedBy(from) {')]),
 'M16': ('peer.onClose', 'Close does not drain (the drain ends at once)',
   [('peer/step.go', '		t := time.NewTimer(p.cfg.drainTimeout())\n		defer t.Stop()\n		select {\n		case <-drained:', '		t := time.NewTimer(0)\n		defer t.Stop()\n		select {\n		case <-drained:')]),
 'M17': ('peer.conn.holdDPA', 'the DPR receiver sends its DPA before the answers it owes',
   [('peer/conn.go', '	c.heldDPA.Store(&dpa)\n	if c.owed.Load() == 0 {', '	c.heldDPA.Store(&dpa)\n	if true {')]),
 'M18': ('peer.conn.submitAll', 'the last request of a batch of more than 4 is left out (neither sent nor refused)',
   [('peer/conn.go', '	ok := make([]boarded, 0, len(calls))\n	for _, cl := range calls {', '	ok := make([]boarded, 0, len(calls))\n	if len(calls) > 4 {\n		calls = calls[:len(calls)-1]\n	}\n	for _, cl := range calls {')]),
 'M19': ('peer.failPending', 'a lost connection fails its requests instead of failing them over',
   [('peer/step.go', '	if p.cfg.Failover != nil && err == ErrConnectionLost {', '	if false && p.cfg.Failover != nil && err == ErrConnectionLost {')]),
 'M20': ('call.BoardLocked', 'the "already sent on this connection" check is removed',
   [('call/call.go', '	case slices.Contains(c.sentOn, cn) && !c.reusableLocked(cn):\n		return b, ErrAlreadySent', '	case false && slices.Contains(c.sentOn, cn) && !c.reusableLocked(cn):\n		return b, ErrAlreadySent')]),
 'M21': ('client.placeAll', 'requests refused at submit are dropped from the batch',
   [('client/client.go', '			} else {\n				elsewhere(runAt[k], cl, runTo)\n			}', '			}')]),
 'M22': ('client.dispatchAll', 'a batch that found no peer waits on the view at strand time, not the one it was placed against',
   [('client/client.go', '		c.strand(wait, v)\n', '		c.strand(wait, c.view())\n')]),
 'M23': ('client.rebuild', 'the balancer is not told a server is back in service',
   [('client/avail.go', '			if v.state[i] != old.state[i] || old.gen == 0 {', '			if (v.state[i] != old.state[i] && v.state[i] != watchdog.Okay) || old.gen == 0 {')]),
 'M24': ('client.do', 'a Send without a deadline waits 2x RequestTimeout',
   [('client/client.go', '	r := cl.Await(ctx, c.cfg.RequestTimeout)', '	r := cl.Await(ctx, 2*c.cfg.RequestTimeout)')]),
 'M25': ('dedup.WrapCommit', 'the store runs the handler again for T-flagged replays',
   [('dedup/handler.go', '		if o.Duplicate() {\n			counters.Duplicates.Add(1)', '		if o.Duplicate() && wire.Flags(req)&wire.FlagRetransmit == 0 {\n			counters.Duplicates.Add(1)')]),
 'M26': ('client.strand', 'a request that found no peer fails at once instead of waiting',
   [('client/avail.go', '	wait := toWait(calls)\n	if len(wait) == 0 {', '	wait := toWait(calls)\n	failAll(wait, ErrNoPeer)\n	wait = nil\n	if len(wait) == 0 {')]),
 'M28': ('peer.conn.leaveAllLocked', 'requests moved off a SUSPECT connection are forgotten there (a late answer is not matched)',
   [('peer/conn.go', '		c.rememberGoneLocked(id, cl)\n	})\n	c.pending.clear()\n	c.drainedLocked()\n', '	})\n	c.pending.clear()\n	c.drainedLocked()\n')]),
 'M29': ('client.maxWaiting', 'the waiting requests are bounded at 8',
   [('client/avail.go', 'var maxWaiting = 1 << 16', 'var maxWaiting = 8')]),
 'M30': ('peer.InService', 'a draining connection still counts as in service',
   [('peer/peer.go', '	return p.State() == watchdog.Okay && p.cur.Load() != nil && !p.leaving.Load()', '	return p.State() == watchdog.Okay && p.cur.Load() != nil')]),
 'M31': ('client.round', "a waiter's round places its requests newest first",
   [('client/avail.go', '	w.calls = toWait(c.placeAll(w.calls, v, nil))', '	w.calls = toWait(c.placeAll(func() []*call.Call { s := slices.Clone(w.calls); slices.Reverse(s); return s }(), v, nil))')]),
 'M32': ('client.onFailover', "the first two requests of a failover's batch are swapped",
   [('client/client.go', '	for i, to := range c.dispatchAll(live) {', '	if len(live) > 1 {\n		live[0], live[1] = live[1], live[0]\n	}\n	for i, to := range c.dispatchAll(live) {')]),
 'M33': ('client.do', 'a timed-out replay is reported as unable to deliver',
   [('client/client.go', '		if errors.Is(err, peer.ErrTimeout) && r.Sends == 0 {', '		if errors.Is(err, peer.ErrTimeout) && r.Sends > 1 {\n			return nil, fmt.Errorf("client: %w: %w", ErrUnableToDeliver, err)\n		}\n		if errors.Is(err, peer.ErrTimeout) && r.Sends == 0 {')]),
 'M34': ('peer.onDrained', "a graceful disconnect's drain timeout loses a lone unanswered request",
   [('peer/step.go', '	if calls := cur.moveOut(); len(calls) > 0 {', '	if calls := cur.moveOut(); len(calls) > 1 {')]),
 # --- the new mechanisms: the view, the waiters, placement in runs ---
 'N02': ('client.round', 'a waiter does not wait for the round of the waiter before it',
   [('client/avail.go', '	c.after(w, v.gen)\n', '')]),
 'N03': ('client.placeAll', 'a request refused at submit waits for a view change instead of going elsewhere',
   [('client/client.go', '			} else {\n				elsewhere(runAt[k], cl, runTo)\n			}', '			} else if !cl.IsDone() {\n				wait = append(wait, cl)\n			}')]),
 'N06': ('client.roundDone', 'a waiter with nothing left stays in line',
   [('client/avail.go', '	if !gone {\n		return\n	}\n	w.gone = true\n', '	if true {\n		return\n	}\n	w.gone = true\n')]),
 'N07': ('client.placeAll', 'a request with no peer is put to wait before the run picked ahead of it is submitted',
   [('client/client.go', '			flush() // those before it first, in case they end up waiting too\n', '')]),
 'N08': ('client.strand', "a new waiter's round counter starts at 0, not at its view's generation",
   [('client/avail.go', 'round: v.gen, tick', 'round: 0, tick')]),
 'N09': ('client.rebuild', "refresh does not close the old view's changed channel",
   [('client/avail.go', '	close(old.changed)\n', '	_ = old.changed\n')]),
 'N12': ('client.waitFor', 'a request lost and refused everywhere waits for a view change (its refusals are never forgotten)',
   [('client/avail.go', '		if slices.ContainsFunc(w.calls, (*call.Call).RefusedAfterLoss) {', '		if false && slices.ContainsFunc(w.calls, (*call.Call).RefusedAfterLoss) {')]),
 'N14': ('client.Close', 'Close does not wait for the waiters',
   [('client/client.go', '	c.waiters.Wait() // requests waiting for a peer failed at c.cancel\n', '')]),
 'N15': ('client.roundDone', "a round does not wake the waiter behind it (its tick is replaced, not closed)",
   [('client/avail.go', '	close(w.tick)\n	w.tick = make(chan struct{})\n', '	w.tick = make(chan struct{})\n')]),
 'N16': ('client.after', 'a waiter waits for the one before it to have had a round in a newer view than its own',
   [('client/avail.go', '		case p == nil || (p.round >= gen && !p.gone):', '		case p == nil || (p.round > gen && !p.gone):')]),
 'N17': ('client.waitFor', 'a waiter ignores a view change in which no member gained (a RADIUS connection closing: bump)',
   [('client/avail.go', '		select {\n		case <-v.changed:\n		case <-retry:', '		select {\n		case <-v.changed:\n			if nv := c.view(); !nv.gained(v) {\n				v = nv\n				continue\n			}\n		case <-retry:')]),
 'N18': ('client.rebuild', 'the view ignores the policy (a server the policy holds out takes requests)',
   [('client/avail.go', '		v.takes[i] = v.open[i] && (c.group == nil || c.group.State(i).Takes())', '		v.takes[i] = v.open[i]')]),
 'N19': ('client.avail.same', 'a view differing only in what the policy lets in counts as the same (no new view, no wake-up)',
   [('client/avail.go', '	return slices.Equal(v.state, w.state) && slices.Equal(v.open, w.open) && slices.Equal(v.takes, w.takes)', '	return slices.Equal(v.state, w.state) && slices.Equal(v.open, w.open)')]),
 'N20': ('client.waitFor', 'a waiter leaving at Close does not leave the line (the one behind it never has its turn)',
   [('client/avail.go', '			failAll(w.calls, fmt.Errorf("client closed: %w", peer.ErrClosed))\n			c.roundDone(w, c.view().gen, true)\n			return', '			failAll(w.calls, fmt.Errorf("client closed: %w", peer.ErrClosed))\n			return')]),
 'N21': ('client.placeOne', 'a member that refused is tried again instead of the next',
   [('client/client.go', '		skip = append(skip, m)\n	}\n	return nil\n}', '	}\n	return nil\n}')]),
 'N22': ('client.toWait', 'a request every peer refused waits instead of getting the last refusal',
   [('client/avail.go', '		if !cl.Conclude() && cl.Park() {', '		if cl.Park() {')]),
 'N23': ('client.waitFor', "a waiter whose requests pass their deadlines does not look again (the deadline timer is not reset)",
   [('client/avail.go', '			t.Reset(untilDeadline(w.calls, c.cfg.RequestTimeout))\n			continue', '			continue')]),
 # --- radpeer (RADIUS stream and UDP carriers) ---
 'R01': ('radpeer.dropConn', 'a lost RADIUS stream connection fails its requests instead of failing them over',
   [('radpeer/peer.go', '	if err == ErrConnectionLost && p.cfg.Failover != nil && !p.closing {\n		p.moveOut(l, calls, "connection lost")', '	if false && err == ErrConnectionLost && p.cfg.Failover != nil && !p.closing {\n		p.moveOut(l, calls, "connection lost")')]),
 'R02': ('radpeer.serviceChanged', 'requests waiting for a connection stay when the server leaves service (not handed over)',
   [('radpeer/peer.go', '	case was && !p.closing && len(p.waiting) > 0:', '	case false && was && !p.closing && len(p.waiting) > 0:')]),
 'R03': ('radpeer.UDPPeer.expire', 'one attempt more than Retries per server',
   [('radpeer/udpclient.go', '	if snd.attempts < snd.max {', '	if snd.attempts <= snd.max {')]),
 'R04': ('radpeer.avoidsLocked', 'a request may go again on the stream connection it is pending on (RFC 6613 2.6.1)',
   [('radpeer/peer.go', '		if slices.Contains(sent, &c.h) {\n			return true\n		}\n		other = true', '		other = true')]),
}

SIMS = {
  'sim': ('TestSim$', '-sim.n'),
  'usim': ('TestSimUDP$', '-usim.n'),
  'ssim': ('TestSimRADIUSStream$', '-ssim.n'),
}

def on_path(edits):
  """The simulators a mutant's code is on the path of: the dispatch core
  (client/, call/) under all three; peer/ and dedup's WrapCommit under the
  Diameter one; radpeer's stream carrier under TestSimRADIUSStream, its UDP
  carrier under TestSimUDP."""
  sims = set()
  for f, _, _ in edits:
    if f.startswith(('client/', 'call/')):
      sims |= {'sim', 'usim', 'ssim'}
    elif f.startswith(('peer/', 'dedup/')):
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
  errs = [l.strip() for l in out.splitlines() if re.match(r'\s+\w+_test\.go:\d+: ', l) and 'failed: replay' not in l and 'failed seeds' not in l and 'schedules in' not in l]
  hang = rc == 124 or 'panic:' in out or 'fatal error' in out
  first = ''
  for l in out.splitlines():
    if l.startswith('panic:') or l.startswith('fatal error'):
      first = l.strip()
      break
  return {'sim': sim, 'rc': rc, 'secs': secs, 'failed': failed, 'nfailed': len(failed), 'hang': hang,
          'panic': first[:300], 'errors': errs[:6]}

def main():
  ap = argparse.ArgumentParser()
  ap.add_argument('-n', type=int, default=600)
  ap.add_argument('--base', default='18811af')
  ap.add_argument('--sims', default='sim,usim,ssim', help='of those on the mutant\'s path')
  ap.add_argument('--work', default=WORK, help='scratch directory (trees, binaries)')
  ap.add_argument('--out', default=None, help='results file (default WORK/results.jsonl)')
  ap.add_argument('--committed-sims', action='store_true', help="the simulators as committed at --base (the 'before' run)")
  ap.add_argument('--table', nargs='+', help='BEFORE AFTER...: print the kill table of the results files and exit')
  ap.add_argument('--table-md', nargs='+', help='OLD.md AFTER...: the kill table, the after column of an earlier table (markdown) as before')
  ap.add_argument('--first-catch', action='store_true', help='run a mutant\'s simulators in order (--sims) only until one catches it')
  ap.add_argument('ids', nargs='*')
  a = ap.parse_args()
  if a.table:
    table(a.table)
    return
  if a.table_md:
    table_md(a.table_md[0], a.table_md[1:])
    return
  base = subprocess.run(['git', '-C', REPO, 'rev-parse', a.base], capture_output=True, text=True, check=True).stdout.strip()
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
    c = f"{x['sim']} {x['nfailed']}"
    if x['rc'] == 124:
      c += ' (timed out)'
    elif x['panic']:
      c += ' (panic)'
    if x['nfailed'] and x['errors']:
      e = re.sub(r'^\S+_test\.go:\d+: ', '', x['errors'][0])
      e = re.sub(r'^seed \d+: ', '', e)
      c += ': ' + re.sub(r'\d{6,}', 'N', e)[:80].replace('|', '/')
    out.append(c)
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
  simulator across files)."""
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
        m['runs'] = [y for y in m['runs'] if y['sim'] != x['sim']] + [x]
  for m in out.values():
    m['runs'].sort(key=lambda x: list(SIMS).index(x['sim'].split()[0]))
  return out

def old_after(md):
  """The after column of an earlier table (markdown), by mutant: the
  'before' of this run."""
  out = {}
  for l in open(md):
    cells = [c.strip() for c in l.strip().strip('|').split('|')]
    if len(cells) == 5 and (cells[0] in MUTANTS or cells[0] == 'none'):
      out[cells[0]] = cells[4]
  return out

def caught_md(cell):
  """Caught in an earlier table's cell: some simulator failed seeds (a run
  that timed out does not count)."""
  return any(int(n) > 0 and '(timed out)' not in rest
             for n, rest in re.findall(r'(?:^|; )(?:sim|usim|ssim)(?: \(old, not rerun\))? (\d+)([^;]*)', cell))

def table_md(md, paths):
  """--table-md OLD.md AFTER...: the kill table, the after column of an
  earlier table as 'before' next to this run's results (AFTER files,
  merged)."""
  before = old_after(md)
  after = merge(paths)
  print('| # | where | mutant | before: simulators of 4b81ba5 (seeds failed of 600) | after: simulators of this change (seeds failed of 600) |')
  print('|---|---|---|---|---|')
  ids = ['none'] + list(MUTANTS)
  for mid in ids:
    where, desc = ('-', 'the unmutated tree') if mid == 'none' else MUTANTS[mid][:2]
    print(f"| {mid} | {where} | {desc} | {before.get(mid, 'not run')} | {cell(after.get(mid))} |")
  ids = ids[1:]
  print()
  print('caught before:', sum(caught_md(before.get(m, '')) for m in ids), 'of', sum(m in before for m in ids), 'run;',
        'after:', sum(caught(after.get(m)) for m in ids), 'of', sum(m in after and bool(after[m].get('runs')) for m in ids), 'run')
  print('missed after:', ' '.join(m for m in ids if not caught(after.get(m))))

def table(paths):
  """--table BEFORE AFTER...: the kill table, the old simulators' results
  (BEFORE) next to the new ones' (AFTER files, merged)."""
  before = load(paths[0])
  after = merge(paths[1:])
  print('| # | where | mutant | before: old simulators (seeds failed of 600) | after: new simulators (seeds failed of 600) |')
  print('|---|---|---|---|---|')
  ids = ['none'] + list(MUTANTS)
  for mid in ids:
    r, b = after.get(mid), before.get(mid)
    if b and 'runs' in b:
      # A simulator not run again with the new simulators in the time
      # there was: its old result stands in, marked.
      r = r or {'runs': []}
      have = {x['sim'] for x in r['runs']}
      r = dict(r, runs=r['runs'] + [dict(x, sim=x['sim'] + ' (old, not rerun)') for x in b['runs'] if x['sim'] not in have])
      after[mid] = r
    where, desc = ('-', 'the unmutated tree') if mid == 'none' else MUTANTS[mid][:2]
    print(f"| {mid} | {where} | {desc} | {cell(b)} | {cell(r)} |")
  ids = ids[1:]
  print()
  print('caught before:', sum(caught(before.get(m)) for m in ids), 'of', sum(m in before for m in ids), 'run;',
        'after:', sum(caught(after.get(m)) for m in ids), 'of', sum(m in after and bool(after[m]['runs']) for m in ids), 'run')

if __name__ == '__main__':
  main()
