package main

// This file: the demo's timeline: one aligned line per happening, from the events.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

// timeline prints what happens, one aligned line per happening:
//
//	18.3s  server2.example.net   OKAY -> SUSPECT (no DWA within Tw)
//
// Bus subscribers hand events to its goroutine and never block (an event
// that does not fit is dropped and counted); the goroutine also polls
// the client's peers for the DWAs of REOPEN and the traffic counters.
type timeline struct {
	w     io.Writer
	start time.Time
	ch    chan tlItem
	done  chan struct{}

	mu      sync.RWMutex // guards closed and cancels against the subscribers
	closed  bool
	cancels []func()
	dropped atomic.Uint64
	gen     atomic.Pointer[loadgen]

	// Set before the client exists; read only afterwards.
	servers []*demoServer
	index   map[string]int // a client-side peer label -> server index

	// The printer goroutine's.
	reopen      map[int]*reopenState
	connects    map[int]int
	fo          *failoverLine
	last        *repeatLine
	nextTraffic time.Time
}

type tlItem struct {
	at      time.Time
	who     string
	text    string
	ev      client.Event
	idx     int // server index of a client-side event, -1 if unknown
	dwaBase uint64
	isEvent bool
}

// reopenState follows one client peer through REOPEN.
type reopenState struct {
	base  uint64 // DWAReceived when it entered REOPEN
	shown int
}

// failoverLine gathers the failover records of one failover (one per
// destination, published together) into one line.
type failoverLine struct {
	at     time.Time
	from   string
	reason string
	total  int
	parts  []string
	seen   time.Time
}

// repeatLine folds a line repeated within a second (the server-side
// errors of a backlog, for one) into a count.
type repeatLine struct {
	who, text string
	first     time.Time
	n         int
}

const tlBuffer = 1 << 14

func newTimeline(w io.Writer, start time.Time) *timeline {
	tl := &timeline{
		w: w, start: start, ch: make(chan tlItem, tlBuffer), done: make(chan struct{}),
		index: make(map[string]int), reopen: make(map[int]*reopenState), connects: make(map[int]int),
		nextTraffic: start.Add(demoTrafficEvery),
	}
	go tl.run()
	return tl
}

func (tl *timeline) push(it tlItem) {
	tl.mu.RLock()
	defer tl.mu.RUnlock()
	if tl.closed {
		return
	}
	select {
	case tl.ch <- it:
	default:
		tl.dropped.Add(1)
	}
}

func (tl *timeline) subscribe(cancel func()) {
	tl.mu.Lock()
	tl.cancels = append(tl.cancels, cancel)
	tl.mu.Unlock()
}

// note prints a line of the script.
func (tl *timeline) note(who, text string) {
	tl.push(tlItem{at: time.Now(), who: who, text: text})
}

// watchServer prints the server-side connection events and errors of ds
// (the story is the client's view: the servers' own watchdog lines are
// left out). A frozen server prints nothing: a hung process does not.
func (tl *timeline) watchServer(bus *peer.Bus, ds *demoServer) {
	tl.servers = append(tl.servers, ds)
	tl.index[ds.name] = len(tl.servers) - 1
	tl.index[ds.url] = len(tl.servers) - 1
	tl.index[strings.TrimPrefix(ds.url, "tcp://")] = len(tl.servers) - 1
	tl.subscribe(bus.Subscribe(func(_ context.Context, e peer.Event) {
		if e.Kind == peer.EventWatchdog || e.Kind == peer.EventFailover || e.Kind == peer.EventFailback || ds.frozen() {
			return
		}
		tl.push(tlItem{at: e.Time, who: ds.name, text: "server side: " + e.Reason})
	}))
}

// watchClient prints the client's events: its peers' and its own
// (failover records, balancer rebuilds).
func (tl *timeline) watchClient(bus *client.Bus, servers []*demoServer) {
	tl.subscribe(bus.Subscribe(func(_ context.Context, e client.Event) {
		idx, ok := tl.index[e.Server]
		if !ok {
			idx = -1
		}
		it := tlItem{at: e.Time, ev: e, idx: idx, isEvent: true}
		if e.Kind == client.EventPeer && e.Peer.Kind == peer.EventWatchdog && e.Peer.To == watchdog.Reopen && idx >= 0 {
			// Runs on the peer's loop before the DWR goes out: the
			// count of DWAs from here on is exact.
			if g := tl.gen.Load(); g != nil {
				it.dwaBase = g.peers[idx].Stats().DWAReceived
			}
		}
		tl.push(it)
	}))
}

func (tl *timeline) setClient(g *loadgen) { tl.gen.Store(g) }

// Close stops listening, prints what is queued and waits. Idempotent.
func (tl *timeline) Close() {
	tl.mu.Lock()
	if tl.closed {
		tl.mu.Unlock()
		return
	}
	tl.closed = true
	cancels := tl.cancels
	close(tl.ch)
	tl.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	<-tl.done
}

func (tl *timeline) run() {
	defer close(tl.done)
	t := time.NewTicker(demoPoll)
	defer t.Stop()
	for {
		select {
		case it, ok := <-tl.ch:
			if !ok {
				tl.flushFailover()
				tl.flushRepeat()
				tl.pollReopen(-1)
				if n := tl.dropped.Load(); n > 0 {
					tl.line(time.Now(), "", fmt.Sprintf("(%d events were not shown: the timeline fell behind)", n))
				}
				return
			}
			tl.handle(it)
		case now := <-t.C:
			if tl.fo != nil && now.Sub(tl.fo.seen) > 2*demoPoll {
				tl.flushFailover()
			}
			if tl.last != nil && now.Sub(tl.last.first) > time.Second {
				tl.flushRepeat()
			}
			tl.pollReopen(-1)
			if !now.Before(tl.nextTraffic) {
				tl.nextTraffic = tl.nextTraffic.Add(demoTrafficEvery)
				tl.traffic(now)
			}
		}
	}
}

func (tl *timeline) name(idx int, label string) string {
	if idx >= 0 && idx < len(tl.servers) {
		return tl.servers[idx].name
	}
	return label
}

func (tl *timeline) short(label string) string {
	if idx, ok := tl.index[label]; ok {
		return tl.servers[idx].short
	}
	return label
}

func (tl *timeline) handle(it tlItem) {
	if !it.isEvent {
		tl.flushFailover()
		tl.say(it.at, it.who, it.text)
		return
	}
	who := tl.name(it.idx, it.ev.Server)
	if it.ev.Kind == client.EventFailover {
		tl.addFailover(it.ev.Failover)
		return
	}
	tl.flushFailover()
	e := it.ev.Peer
	if it.ev.Kind != client.EventPeer {
		tl.say(it.ev.Time, who, it.ev.Reason)
		return
	}
	switch e.Kind {
	case peer.EventWatchdog:
		switch {
		case e.To == watchdog.Reopen:
			tl.reopen[it.idx] = &reopenState{base: it.dwaBase}
			tl.say(e.Time, who, fmt.Sprintf("%s -> %s (%s; needs %d DWAs)", e.From, e.To, e.Reason, watchdog.DefaultOkayDWAs))
			return
		case e.From == watchdog.Reopen:
			tl.pollReopen(it.idx) // the last DWA came before this
			// REOPEN -> OKAY means the machine counted every DWA it needs.
			// The count base is read when the REOPEN event reaches us, a
			// moment after the step, so a DWA answered at once may already
			// be in it: show what the polls could not see.
			if rs := tl.reopen[it.idx]; rs != nil && e.To == watchdog.Okay {
				for rs.shown < watchdog.DefaultOkayDWAs {
					rs.shown++
					tl.say(e.Time, who, fmt.Sprintf("REOPEN %d/%d DWAs", rs.shown, watchdog.DefaultOkayDWAs))
				}
			}
			delete(tl.reopen, it.idx)
		}
		tl.say(e.Time, who, fmt.Sprintf("%s -> %s (%s)", e.From, e.To, e.Reason))
	case peer.EventConnUp:
		text := e.Reason
		if it.idx >= 0 {
			tl.connects[it.idx]++
			if tl.connects[it.idx] > 1 {
				text = "re" + text
			}
		}
		tl.say(e.Time, who, text)
	case peer.EventFailover:
		// A peer's failover with no alternate: a client always takes
		// the requests (and records it), so this is not its story.
	default:
		tl.say(e.Time, who, e.Reason)
	}
}

// pollReopen prints the DWAs received by the client's peers in REOPEN
// (Stats().DWAReceived since they entered it); idx >= 0 limits it to one.
func (tl *timeline) pollReopen(idx int) {
	g := tl.gen.Load()
	if g == nil {
		return
	}
	for i, rs := range tl.reopen {
		if idx >= 0 && i != idx {
			continue
		}
		if i < 0 || i >= len(g.peers) {
			continue
		}
		st := g.peers[i].Stats()
		got := int(st.DWAReceived - rs.base)
		for rs.shown < got && rs.shown < watchdog.DefaultOkayDWAs {
			rs.shown++
			at := time.Now()
			if rs.shown == got && !st.LastDWA.IsZero() {
				at = st.LastDWA
			}
			tl.say(at, tl.servers[i].name, fmt.Sprintf("REOPEN %d/%d DWAs", rs.shown, watchdog.DefaultOkayDWAs))
		}
	}
}

func (tl *timeline) addFailover(r *client.FailoverRecord) {
	if f := tl.fo; f != nil && (!f.at.Equal(r.Time) || f.from != r.From || f.reason != r.Reason) {
		tl.flushFailover()
	}
	if tl.fo == nil {
		tl.fo = &failoverLine{at: r.Time, from: r.From, reason: r.Reason}
	}
	f := tl.fo
	f.seen = time.Now()
	f.total += r.Moved
	switch r.Outcome {
	case client.Moved:
		f.parts = append(f.parts, fmt.Sprintf("%s (%d)", tl.short(r.To), r.Moved))
	case client.Parked:
		f.parts = append(f.parts, fmt.Sprintf("waiting for a server in service (%d)", r.Moved))
	case client.Refused:
		f.parts = append(f.parts, fmt.Sprintf("%d refused", len(r.EndToEnd)))
	default:
		f.parts = append(f.parts, "nothing pending")
	}
}

func (tl *timeline) flushFailover() {
	f := tl.fo
	if f == nil {
		return
	}
	tl.fo = nil
	slices.Sort(f.parts)
	tl.say(f.at, tl.name(tl.lookup(f.from), f.from),
		fmt.Sprintf("failover: %d requests %s -> %s, resent with the T flag (%s)", f.total, tl.short(f.from), strings.Join(f.parts, ", "), f.reason))
}

func (tl *timeline) lookup(label string) int {
	if i, ok := tl.index[label]; ok {
		return i
	}
	return -1
}

func (tl *timeline) traffic(now time.Time) {
	g := tl.gen.Load()
	if g == nil {
		return
	}
	sent, answered, failed := g.counts()
	var in []string
	for i, p := range g.peers {
		if p.State() == watchdog.Okay {
			in = append(in, tl.servers[i].short)
		}
	}
	if len(in) == 0 {
		in = []string{"none"}
	}
	tl.say(now, "client", fmt.Sprintf("traffic: %d sent, %d answered, %d failed, %d pending; in service: %s",
		sent, answered, failed, sent-answered-failed, strings.Join(in, ", ")))
}

// say prints a line, folding repeats.
func (tl *timeline) say(at time.Time, who, text string) {
	if r := tl.last; r != nil && r.who == who && r.text == text {
		r.n++
		return
	}
	tl.flushRepeat()
	tl.line(at, who, text)
	tl.last = &repeatLine{who: who, text: text, first: time.Now()}
}

func (tl *timeline) flushRepeat() {
	r := tl.last
	tl.last = nil
	if r != nil && r.n > 0 {
		tl.line(time.Now(), r.who, fmt.Sprintf("(the line above %d more times)", r.n))
	}
}

func (tl *timeline) line(at time.Time, who, text string) {
	if who == "" {
		who = "demo"
	}
	fmt.Fprintf(tl.w, "%6.1fs  %-20s  %s\n", at.Sub(tl.start).Seconds(), who, text)
}
