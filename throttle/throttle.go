package throttle

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"time"
)

// Class is the traffic class a request is limited under.
type Class uint8

const (
	// Auth is authentication and authorization traffic.
	Auth Class = iota
	// Accounting is accounting traffic.
	Accounting
	numClasses = 2
)

func (c Class) String() string {
	switch c {
	case Auth:
		return "auth"
	case Accounting:
		return "accounting"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Diameter identifiers ClassOf knows.
const (
	// AppAccounting is the Diameter base accounting application (RFC 6733).
	AppAccounting = 3
	// CmdAccounting is the Accounting-Request/Answer command code.
	CmdAccounting = 271
)

// ClassOf classifies a Diameter request: the base accounting application
// (3) and the Accounting-Request command (271, in whatever application
// carries it) are Accounting; everything else is Auth.
func ClassOf(appID, cmd uint32) Class {
	if appID == AppAccounting || cmd == CmdAccounting {
		return Accounting
	}
	return Auth
}

// Limits and defaults.
const (
	// DefaultMaxOutstanding is the outstanding requests a server may have
	// per class when Limits.MaxOutstanding is zero.
	DefaultMaxOutstanding = 256
	// MinSlot is the shortest rate slot.
	MinSlot = 50 * time.Millisecond
	// DefaultSlot is the slot length when Config.Slot is zero.
	DefaultSlot = MinSlot
	// MaxRate bounds Limits.MaxRate.
	MaxRate = 100_000_000
)

var (
	// ErrConfig is matched (errors.Is) by every configuration error.
	ErrConfig = errors.New("throttle: invalid configuration")
	// ErrExpired is matched by the Err of a request whose deadline passed
	// while it was queued.
	ErrExpired = errors.New("throttle: deadline passed while queued")
	// ErrNowhere is the Err of a request handed back to the owner, not
	// failed: Config.Pick said it may go to no server now (Nowhere).
	ErrNowhere = errors.New("throttle: no server may take the request now")
)

// Nowhere is Config.Pick's answer for a request that may go to none of
// the servers now: see Config.Pick.
const Nowhere = -2

// ExpiredError is the Err of a Dispatch whose deadline passed in a queue.
type ExpiredError struct {
	Server string // the server whose queue it waited in; "" for the instance queue
	Class  Class
	Late   time.Duration // how long after its deadline Poll found it
}

func (e *ExpiredError) Error() string {
	q := "the instance queue"
	if e.Server != "" {
		q = fmt.Sprintf("the %s queue of server %q", e.Class, e.Server)
	}
	return fmt.Sprintf("%v in %s (found %v after the deadline)", ErrExpired, q, e.Late)
}

// Is makes errors.Is(err, ErrExpired) true.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// Item is what the scheduler queues: opaque but for its deadline. A zero
// deadline means none.
type Item interface {
	Deadline() time.Time
}

// Limits are one server's limits for one class.
type Limits struct {
	// MaxRate is the most requests sent per second, spread over the slots.
	// Zero means no rate limit.
	MaxRate int
	// MaxOutstanding is the most requests sent and not yet Done. Zero
	// means DefaultMaxOutstanding; a negative value means no limit.
	MaxOutstanding int
}

// Server is one server's configuration.
type Server struct {
	Name       string
	Auth       Limits
	Accounting Limits
}

// Config configures a Scheduler.
type Config[T Item] struct {
	// Servers, in the order of the indexes Pick returns and Dispatch uses.
	Servers []Server
	// Slot is the rate slot length: zero means DefaultSlot; else one that
	// divides one second, from MinSlot to 1 s (CheckSlot).
	Slot time.Duration
	// AlarmHigh raises a server's queue alarm when its queue depth (both
	// classes) reaches it; zero means no alarm. AlarmLow clears it when the
	// depth falls to it or below; it must be below AlarmHigh.
	AlarmHigh, AlarmLow int
	// OnAlarm receives alarm changes. It is called synchronously from the
	// Scheduler method that crossed the threshold, so it must be quick and
	// must not call the Scheduler. May be nil.
	OnAlarm func(Alarm)
	// Pick is the balancer: the index of the server a new request should
	// go to, or -1 for no preference. Nil, -1, an index out of range or an
	// unavailable server fall back to round-robin over the available
	// servers, preferring one with room; unless only is true: the request
	// may go to that server and no other (a Diameter Destination-Host), so
	// it waits in that server's queue while the server is unavailable or
	// has no room, and is never spilled (an index out of range is still
	// no preference). Nowhere says the request may go to none of the
	// servers now (it must avoid those available): while a server is
	// available, Poll hands it back to the owner (a Dispatch whose Err
	// matches ErrNowhere) rather than queue it for one chosen
	// round-robin, where it would wait for a server it must not go to;
	// the owner keeps it and puts it back (Requeue, with Dispatch.Age)
	// once a server can take it. While none is available it waits in the
	// instance queue, as any request does.
	Pick func(item T, class Class) (server int, only bool)
	// Spill lets a new request whose picked server has no room go to
	// another available server that has room instead of waiting in the
	// picked server's queue. Off by default: the ASR5K keeps a request with
	// the server it was picked for (hash affinity).
	Spill bool
}

// Alarm is a queue-depth alarm being raised or cleared.
type Alarm struct {
	Time   time.Time `json:"time"`
	Server string    `json:"server"`
	Index  int       `json:"index"`
	Raised bool      `json:"raised"` // false: cleared
	Depth  int       `json:"depth"`
}

// Dispatch is one outcome of Poll: send Item to Server now, or, when Err
// is not nil, fail it (its deadline passed while queued), or, when Err is
// ErrNowhere, take it back (Config.Pick said it may go nowhere now).
type Dispatch[T Item] struct {
	Item   T
	Server int // -1 when failed in the instance queue, or handed back
	Class  Class
	Err    error
	// Age is the request's place in line: Requeue with it puts a request
	// the owner could not send after all back where it stood.
	Age uint64
}

type entry[T Item] struct {
	item   T
	dl     int64 // deadline, Unix ns; math.MaxInt64: none
	seq    uint64
	server int32 // -1: not bound to a server yet
	class  Class
}

type bucket[T Item] struct {
	num, den  uint64 // quota per slot = num/den (reduced); den == 0: no rate limit
	maxOut    int    // < 0: no limit
	out       int
	slotStart int64
	slotEnd   int64 // 0: no slot yet
	quota     int
	used      int
	q         deque[entry[T]]
	sent      uint64
}

type server[T Item] struct {
	name     string
	b        [numClasses]bucket[T]
	avail    bool
	alarmed  bool
	maxDepth int
	alarms   uint64
	expired  uint64
	// succ is the index+1 of the server that replaced this one (Succeed),
	// 0 for none: it counts this one's requests outstanding as its own.
	succ int
}

func (s *server[T]) depth() int { return s.b[Auth].q.len() + s.b[Accounting].q.len() }

// Scheduler is the throttle of one instance. See the package documentation.
// It is not safe for concurrent use.
type Scheduler[T Item] struct {
	cfg    Config[T]
	slotNs int64
	inst   line[T]
	srv    []server[T]
	seq    uint64 // the last Enqueue's; counts up from seqBase
	replay uint64 // the last EnqueueReplay's; counts up to seqBase
	queued int    // entries in server queues

	minDL     int64 // no queued entry has an earlier deadline
	nextSweep int64
	rr        int
	scratch   []entry[T]
	expired   uint64
}

// New returns a Scheduler with every server available.
func New[T Item](cfg Config[T]) (*Scheduler[T], error) {
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("%w: no server", ErrConfig)
	}
	if err := CheckSlot(cfg.Slot); err != nil {
		return nil, err
	}
	if cfg.Slot == 0 {
		cfg.Slot = DefaultSlot
	}
	if cfg.AlarmHigh < 0 || cfg.AlarmLow < 0 || (cfg.AlarmHigh > 0 && cfg.AlarmLow >= cfg.AlarmHigh) {
		return nil, fmt.Errorf("%w: alarm thresholds high %d, low %d: need 0 <= low < high", ErrConfig, cfg.AlarmHigh, cfg.AlarmLow)
	}
	s := &Scheduler[T]{cfg: cfg, slotNs: int64(cfg.Slot), minDL: math.MaxInt64, seq: seqBase}
	for _, sc := range cfg.Servers {
		if _, err := s.AddServer(sc); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// AddServer adds a server, available, and returns its index: for a
// configuration reload. A server taken out of the configuration stays,
// unavailable (SetAvailable), so that the indexes do not move.
func (s *Scheduler[T]) AddServer(sc Server) (int, error) {
	i := len(s.srv)
	sv := server[T]{name: sc.Name, avail: true}
	if sv.name == "" {
		sv.name = fmt.Sprintf("server%d", i)
	}
	for c, l := range [numClasses]Limits{sc.Auth, sc.Accounting} {
		if err := l.Check(); err != nil {
			return 0, fmt.Errorf("%w: server %q %s %w", ErrConfig, sv.name, Class(c), err)
		}
		b := &sv.b[c]
		b.maxOut = l.MaxOutstanding
		if b.maxOut == 0 {
			b.maxOut = DefaultMaxOutstanding
		}
		if l.MaxRate > 0 {
			num, den := uint64(l.MaxRate)*uint64(s.slotNs), uint64(time.Second)
			g := gcd(num, den)
			b.num, b.den = num/g, den/g
		}
	}
	s.srv = append(s.srv, sv)
	return i, nil
}

// CheckSlot reports whether d may be a Config.Slot: zero (DefaultSlot),
// or one of Slots. A whole second of the clock then holds whole slots,
// so that at most MaxRate go in it. The error matches ErrConfig and
// names the lengths allowed.
func CheckSlot(d time.Duration) error {
	if d == 0 || d >= MinSlot && d <= time.Second && time.Second%d == 0 {
		return nil
	}
	var ok []string
	for _, l := range Slots() {
		ok = append(ok, l.String())
	}
	return fmt.Errorf("%w: slot %v: want one that divides one second: %s", ErrConfig, d, strings.Join(ok, ", "))
}

// Slots returns the slot lengths allowed, shortest first: those that
// divide one second, from MinSlot to 1 s (50 ms, 62.5 ms, 100 ms,
// 125 ms, 200 ms, 250 ms, 500 ms and 1 s).
func Slots() []time.Duration {
	var ok []time.Duration
	for n := time.Second / MinSlot; n >= 1; n-- {
		if time.Second%n == 0 {
			ok = append(ok, time.Second/n)
		}
	}
	return ok
}

// Check reports whether a server may be given limits l: its MaxRate
// within 0..MaxRate. A configuration checks its limits with it before it
// builds or changes anything.
func (l Limits) Check() error {
	if l.MaxRate < 0 || l.MaxRate > MaxRate {
		return fmt.Errorf("MaxRate %d is outside 0..%d", l.MaxRate, MaxRate)
	}
	return nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// cum is floor(k x num / den) for k <= den, without overflow.
func cum(k, num, den uint64) uint64 {
	hi, lo := bits.Mul64(k, num)
	q, _ := bits.Div64(hi, lo, den)
	return q
}

// room returns how many more requests b may send now.
func (s *Scheduler[T]) room(b *bucket[T], now int64) int {
	r := math.MaxInt
	if b.maxOut >= 0 {
		r = b.maxOut - b.out
	}
	if b.den != 0 {
		carry := 0
		if b.slotEnd != 0 && now < b.slotStart {
			if b.slotStart-now <= s.slotNs {
				// A reading up to a slot older than the current slot
				// (callers read the clock before they take the
				// scheduler's lock, so readings arrive out of order)
				// counts in the current slot: going back to its own
				// slot would start a fresh quota there, and the next
				// reading another one here.
				now = b.slotStart
			} else {
				// Older still: the clock was stepped back. Pinning it to
				// the current slot would stall the server until the clock
				// is back there; the slots start again from now's, and
				// the sends of the current slot count in it, so that the
				// step gives no second share at once.
				carry = b.used
				b.slotEnd = math.MinInt64
			}
		}
		if now >= b.slotEnd {
			k := now / s.slotNs
			if now < 0 && now%s.slotNs != 0 {
				k--
			}
			b.slotStart = k * s.slotNs
			b.slotEnd = b.slotStart + s.slotNs
			kk := uint64(k) % b.den
			if k < 0 {
				kk = uint64(k%int64(b.den)+int64(b.den)) % b.den
			}
			b.quota = int(cum(kk+1, b.num, b.den) - cum(kk, b.num, b.den))
			b.used = min(carry, b.quota)
		}
		r = min(r, b.quota-b.used)
	}
	return r
}

// seqBase is where the age of new requests (Enqueue) starts: a replay
// (EnqueueReplay), whose age counts up from zero, is older than every new
// request.
const seqBase = 1 << 62

// Enqueue appends item to the instance queue. Poll decides its fate. It
// returns item's age, its place in line, for Cancel.
func (s *Scheduler[T]) Enqueue(item T, class Class) (age uint64) {
	s.seq++
	s.inst.fresh.pushBack(s.entry(item, class, s.seq))
	return s.seq
}

// Cancel takes out the queued request of class with age (from Enqueue,
// ReplayAge or Dispatch.Age), one whose owner gave up on it while it
// waited, wherever it waits: it no longer counts in Len nor takes a
// rate slot or an outstanding place when its turn comes. It reports
// whether the request was queued; one released by Poll is not (Done
// frees its place).
func (s *Scheduler[T]) Cancel(class Class, age uint64, now time.Time) bool {
	if class >= numClasses {
		class = Auth
	}
	q := &s.inst.fresh
	if age < seqBase {
		q = &s.inst.replays
	}
	if removeAge(q, age) {
		return true
	}
	for i := range s.srv {
		if removeAge(&s.srv[i].b[class].q, age) {
			s.queued--
			s.checkAlarm(i, now)
			return true
		}
	}
	return false
}

// removeAge removes the entry with age from q, which is in age order.
func removeAge[T Item](q *deque[entry[T]], age uint64) bool {
	n := q.len()
	i := sort.Search(n, func(i int) bool { return q.at(i).seq >= age })
	if i == n || q.at(i).seq != age {
		return false
	}
	q.remove(i)
	return true
}

// EnqueueReplay queues item, a request coming back from a server (a
// failover's replay), ahead of every new request (Enqueue), here and in
// the server queues, and behind the replays queued before it: replays
// leave in the order they came back.
func (s *Scheduler[T]) EnqueueReplay(item T, class Class) {
	s.inst.replays.pushBack(s.entry(item, class, s.ReplayAge()))
}

// ReplayAge returns the age of a replay coming back now, for one the
// owner holds back before queuing it (Requeue): it takes the place
// EnqueueReplay would have given it.
func (s *Scheduler[T]) ReplayAge() uint64 {
	s.replay++
	return s.replay
}

// Requeue puts item, which Poll released with age (Dispatch.Age) and the
// owner could not send after all (the server refused it, its connection
// went down a moment ago), or a replay the owner held back (ReplayAge),
// back in the instance queue where it stood:
// behind the requests older than it, ahead of the newer ones, so that a
// batch sent back this way keeps its order. Release its outstanding
// place first (Done).
func (s *Scheduler[T]) Requeue(item T, class Class, age uint64) {
	s.inst.insert(s.entry(item, class, age))
}

// line is the instance queue: the replays, then the new requests, each
// in age order. Apart, so that a replay queued behind the replays before
// it does not move the new requests waiting behind them.
type line[T Item] struct {
	replays, fresh deque[entry[T]]
}

func (l *line[T]) len() int { return l.replays.len() + l.fresh.len() }

// front returns the oldest entry; the line must not be empty.
func (l *line[T]) front() *entry[T] {
	if l.replays.len() > 0 {
		return l.replays.front()
	}
	return l.fresh.front()
}

func (l *line[T]) popFront() entry[T] {
	if l.replays.len() > 0 {
		return l.replays.popFront()
	}
	return l.fresh.popFront()
}

// insert puts x at its age's place.
func (l *line[T]) insert(x entry[T]) {
	if x.seq < seqBase {
		insertByAge(&l.replays, x)
	} else {
		insertByAge(&l.fresh, x)
	}
}

// insertByAge puts x into q, which is in age order, at its age's place.
func insertByAge[T Item](q *deque[entry[T]], x entry[T]) {
	switch n := q.len(); {
	case n == 0 || x.seq > q.back().seq:
		q.pushBack(x)
	case x.seq < q.front().seq:
		q.pushFront(x)
	default:
		q.insert(sort.Search(n, func(i int) bool { return q.at(i).seq > x.seq }), x)
	}
}

func (s *Scheduler[T]) entry(item T, class Class, seq uint64) entry[T] {
	if class >= numClasses {
		class = Auth
	}
	dl := int64(math.MaxInt64)
	if d := item.Deadline(); !d.IsZero() {
		dl = d.UnixNano()
	}
	if dl < s.minDL {
		s.minDL = dl
	}
	return entry[T]{item: item, dl: dl, seq: seq, server: -1, class: class}
}

func (s *Scheduler[T]) fail(e *entry[T], now time.Time, nowNs int64, dst []Dispatch[T]) []Dispatch[T] {
	err := &ExpiredError{Class: e.class, Late: time.Duration(nowNs - e.dl)}
	if e.server >= 0 {
		err.Server = s.srv[e.server].name
		s.srv[e.server].expired++
	}
	s.expired++
	return append(dst, Dispatch[T]{Item: e.item, Server: -1, Class: e.class, Err: err})
}

// Poll returns, appended to dst, the requests to send now and the requests
// whose deadline passed while queued (Err set).
//
// now, like every reading given to the Scheduler, and the deadlines must
// come from one clock that does not step. A reading up to a slot older
// than one before counts in that one's slot. One older still is taken for
// a step back of the clock: the rate slots start again from its slot
// (with what was sent in the slot before counted in it), so that a step
// back neither stalls a rate-limited server for its length nor gives it a
// second share at once. Deadlines are still compared with the readings
// as they are.
func (s *Scheduler[T]) Poll(now time.Time, dst []Dispatch[T]) []Dispatch[T] {
	nowNs := now.UnixNano()
	s.nextSweep = s.sweepAt(nowNs)
	if nowNs >= s.minDL && nowNs >= s.nextSweep {
		dst = s.sweep(now, nowNs, dst)
	}
	if s.queued > 0 {
		dst = s.promote(now, nowNs, dst)
	}
	for s.inst.len() > 0 {
		e := s.inst.front()
		if e.dl <= nowNs {
			x := s.inst.popFront()
			dst = s.fail(&x, now, nowNs, dst)
			continue
		}
		srv, only := int(e.server), false
		if srv < 0 {
			srv, only = s.choose(e, nowNs)
			if srv == Nowhere {
				// It may go to none of the servers available: back to
				// the owner, which holds it until one can take it.
				x := s.inst.popFront()
				dst = append(dst, Dispatch[T]{Item: x.item, Server: -1, Class: x.class, Err: ErrNowhere, Age: x.seq})
				continue
			}
			if srv < 0 {
				break // no server available: the queue waits
			}
		}
		b := &s.srv[srv].b[e.class]
		if s.room(b, nowNs) <= 0 && e.server < 0 && !only && s.cfg.Spill {
			if alt := s.spill(e.class, srv, nowNs); alt >= 0 {
				srv, b = alt, &s.srv[alt].b[e.class]
			}
		}
		x := s.inst.popFront()
		if s.srv[srv].avail && s.room(b, nowNs) > 0 {
			b.used++
			b.out++
			b.sent++
			dst = append(dst, Dispatch[T]{Item: x.item, Server: srv, Class: x.class, Age: x.seq})
			continue
		}
		// No quota or no free place: wait in the server's queue, in age
		// order (a replay put at the head is older than the requests
		// already waiting there).
		x.server = int32(srv)
		insertByAge(&b.q, x)
		s.queued++
		s.checkAlarm(srv, now)
	}
	return dst
}

// choose picks the server for a new request: Pick's choice if available
// (or if it is the only one the request may go to), Nowhere if Pick says
// so and a server is available, else round-robin over the available
// servers, preferring one with room.
func (s *Scheduler[T]) choose(e *entry[T], nowNs int64) (server int, only bool) {
	n := len(s.srv)
	nowhere := false
	if s.cfg.Pick != nil {
		p, only := s.cfg.Pick(e.item, e.class)
		if p >= 0 && p < n && (only || s.srv[p].avail) {
			return p, only
		}
		nowhere = p == Nowhere
	}
	first := -1
	for i := range n {
		j := (s.rr + i) % n
		if !s.srv[j].avail {
			continue
		}
		if nowhere {
			return Nowhere, false
		}
		if s.room(&s.srv[j].b[e.class], nowNs) > 0 {
			s.rr = j + 1
			return j, false
		}
		if first < 0 {
			first = j
		}
	}
	if first >= 0 {
		s.rr = first + 1
	}
	return first, false
}

// spill finds another available server with room for class c.
func (s *Scheduler[T]) spill(c Class, not int, nowNs int64) int {
	n := len(s.srv)
	for i := 1; i < n; i++ {
		j := (not + i) % n
		if s.srv[j].avail && s.room(&s.srv[j].b[c], nowNs) > 0 {
			return j
		}
	}
	return -1
}

// promote moves the server-queued requests that can go now to the
// instance queue, at their age's place: ahead of every newer request (Q3),
// behind an older request put back (Requeue) or replayed (EnqueueReplay).
func (s *Scheduler[T]) promote(now time.Time, nowNs int64, dst []Dispatch[T]) []Dispatch[T] {
	sc := s.scratch[:0]
	sources := 0
	for i := range s.srv {
		sv := &s.srv[i]
		if !sv.avail {
			continue
		}
		moved := false
		for c := range sv.b {
			b := &sv.b[c]
			if b.q.len() == 0 {
				continue
			}
			r := s.room(b, nowNs)
			for r > 0 && b.q.len() > 0 {
				x := b.q.popFront()
				s.queued--
				moved = true
				if x.dl <= nowNs {
					dst = s.fail(&x, now, nowNs, dst)
					continue
				}
				sc = append(sc, x)
				r--
			}
			if moved {
				sources++
			}
		}
		if moved {
			s.checkAlarm(i, now)
		}
	}
	s.requeue(sc, sources > 1)
	return dst
}

// requeue puts the entries of sc back in the instance queue, each at its
// age's place, sorting them first when they came from several queues, and
// recycles sc as the scratch buffer. Youngest first: when they are older
// than everything queued, as they mostly are, each goes at the head.
func (s *Scheduler[T]) requeue(sc []entry[T], sortByAge bool) {
	if sortByAge {
		slices.SortFunc(sc, func(a, b entry[T]) int { return cmp.Compare(a.seq, b.seq) })
	}
	for i := len(sc) - 1; i >= 0; i-- {
		s.inst.insert(sc[i])
	}
	clear(sc)
	s.scratch = sc[:0]
}

// sweepAt returns when the next sweep may run: a slot after the last one,
// or now if that is more than a slot ahead (the clock was stepped back).
func (s *Scheduler[T]) sweepAt(nowNs int64) int64 {
	if s.nextSweep-nowNs > s.slotNs {
		return nowNs
	}
	return s.nextSweep
}

// sweep fails every queued request whose deadline has passed.
func (s *Scheduler[T]) sweep(now time.Time, nowNs int64, dst []Dispatch[T]) []Dispatch[T] {
	minDL := int64(math.MaxInt64)
	keep := func(e *entry[T]) bool {
		if e.dl <= nowNs {
			dst = s.fail(e, now, nowNs, dst)
			return false
		}
		minDL = min(minDL, e.dl)
		return true
	}
	s.inst.replays.filter(keep)
	s.inst.fresh.filter(keep)
	for i := range s.srv {
		sv := &s.srv[i]
		before := sv.depth()
		for c := range sv.b {
			sv.b[c].q.filter(keep)
		}
		if d := sv.depth(); d != before {
			s.queued -= before - d
			s.checkAlarm(i, now)
		}
	}
	s.minDL = minDL
	s.nextSweep = nowNs + s.slotNs
	return dst
}

func (s *Scheduler[T]) checkAlarm(i int, now time.Time) {
	sv := &s.srv[i]
	d := sv.depth()
	sv.maxDepth = max(sv.maxDepth, d)
	if s.cfg.AlarmHigh <= 0 {
		return
	}
	switch {
	case !sv.alarmed && d >= s.cfg.AlarmHigh:
		sv.alarmed = true
		sv.alarms++
	case sv.alarmed && d <= s.cfg.AlarmLow:
		sv.alarmed = false
	default:
		return
	}
	if s.cfg.OnAlarm != nil {
		s.cfg.OnAlarm(Alarm{Time: now, Server: sv.name, Index: i, Raised: sv.alarmed, Depth: d})
	}
}

// Done frees the outstanding place of a request sent to server with class:
// call it when the answer arrives, when the request times out, or when it
// is moved away. It reports whether requests are waiting, so that the
// owner knows to Poll.
func (s *Scheduler[T]) Done(server int, class Class) bool {
	if class >= numClasses {
		class = Auth
	}
	waits := s.inst.len() > 0
	for i := server; ; {
		sv := &s.srv[i]
		b := &sv.b[class]
		if b.out > 0 {
			b.out--
		}
		waits = waits || b.q.len() > 0
		if sv.succ == 0 {
			return waits
		}
		i = sv.succ - 1 // its place was counted there too
	}
}

// Succeed makes server next the successor of server prev, which it
// replaces at the same remote (a reconfiguration): next counts prev's
// requests outstanding as its own, and each place Done frees on prev is
// freed on next too, so that while prev's last requests are answered the
// remote never carries more than next's limits. prev takes nothing new
// from now on (as SetAvailable false). Poll afterwards. next is a server
// added after prev (a greater index); another pair is ignored.
func (s *Scheduler[T]) Succeed(prev, next int, now time.Time) {
	if next <= prev {
		return // a successor is newer: no cycle for Done to walk
	}
	p, n := &s.srv[prev], &s.srv[next]
	for c := range p.b {
		n.b[c].out += p.b[c].out
	}
	p.succ = next + 1
	s.SetAvailable(prev, false, now)
}

// SetAvailable records whether server can take requests (its watchdog is
// OKAY and its policy allows it). A server made unavailable gets no new
// request, and its queued requests go back to the instance queue, each at
// its age's place, to be picked again. Poll afterwards. It acts only on a
// change: a server already unavailable keeps the requests that wait in its
// queue meanwhile, those that may go to it alone (Config.Pick's only), and
// its queue alarm stays as it is (see Repick).
func (s *Scheduler[T]) SetAvailable(server int, ok bool, now time.Time) {
	sv := &s.srv[server]
	if sv.avail == ok {
		return
	}
	sv.avail = ok
	if !ok {
		s.Repick(server, now)
	}
}

// Repick sends server's queued requests back to the instance queue, each
// at its age's place, to be picked again at the next Poll, whether the
// server is available or not: for when where they may go has changed
// with no change of its availability, such as requests that may go to an
// unavailable server alone (Config.Pick's only) when the owner's servers
// change and Pick names another server for them now. Its queue alarm
// clears if it was raised.
func (s *Scheduler[T]) Repick(server int, now time.Time) {
	sv := &s.srv[server]
	if sv.depth() == 0 {
		return
	}
	sc := s.scratch[:0]
	for c := range sv.b {
		for sv.b[c].q.len() > 0 {
			x := sv.b[c].q.popFront()
			x.server = -1
			sc = append(sc, x)
			s.queued--
		}
	}
	s.requeue(sc, true)
	s.checkAlarm(server, now)
}

// NextWakeup returns when Poll has work next: now when the instance queue
// can move, the end of the current slot for a rate-limited server queue,
// the earliest deadline of a queued request. ok is false when nothing is
// due; a server queue waiting only for free places moves on Done (which
// says so), and an instance queue waiting for an available server on
// SetAvailable.
func (s *Scheduler[T]) NextWakeup(now time.Time) (at time.Time, ok bool) {
	nowNs := now.UnixNano()
	best := int64(math.MaxInt64)
	anyAvail := false
	for i := range s.srv {
		sv := &s.srv[i]
		if !sv.avail {
			continue
		}
		anyAvail = true
		for c := range sv.b {
			b := &sv.b[c]
			if b.q.len() == 0 || (b.maxOut >= 0 && b.out >= b.maxOut) {
				continue
			}
			if s.room(b, nowNs) > 0 {
				best = nowNs
			} else {
				best = min(best, b.slotEnd)
			}
		}
	}
	if s.inst.len() > 0 && anyAvail {
		best = nowNs
	}
	if s.inst.len() > 0 || s.queued > 0 {
		best = min(best, max(s.minDL, s.sweepAt(nowNs)))
	}
	if best == math.MaxInt64 {
		return time.Time{}, false
	}
	if best <= nowNs {
		return now, true
	}
	return now.Add(time.Duration(best - nowNs)), true
}

// Len returns the requests held: in the instance queue and server queues.
func (s *Scheduler[T]) Len() int { return s.inst.len() + s.queued }

// Depth returns the depth of server's queues, both classes.
func (s *Scheduler[T]) Depth(server int) int { return s.srv[server].depth() }

// Outstanding returns the requests sent to server in class and not Done.
func (s *Scheduler[T]) Outstanding(server int, class Class) int {
	return s.srv[server].b[class].out
}

// Stats are one server's throttle figures.
type Stats struct {
	Server      string    `json:"server"`
	Available   bool      `json:"available"`
	Depth       int       `json:"queue_depth"`
	MaxDepth    int       `json:"max_queue_depth"`
	Alarmed     bool      `json:"alarm"`
	Alarms      uint64    `json:"alarms_raised"`
	Outstanding [2]int    `json:"outstanding"` // by Class
	Sent        [2]uint64 `json:"sent"`        // by Class
	Expired     uint64    `json:"expired"`     // failed in this server's queues
}

// Stats returns server's figures.
func (s *Scheduler[T]) Stats(server int) Stats {
	sv := &s.srv[server]
	return Stats{
		Server: sv.name, Available: sv.avail, Depth: sv.depth(), MaxDepth: sv.maxDepth,
		Alarmed: sv.alarmed, Alarms: sv.alarms,
		Outstanding: [2]int{sv.b[Auth].out, sv.b[Accounting].out},
		Sent:        [2]uint64{sv.b[Auth].sent, sv.b[Accounting].sent},
		Expired:     sv.expired,
	}
}

// Expired returns how many requests ever failed with ErrExpired.
func (s *Scheduler[T]) Expired() uint64 { return s.expired }

// Release empties the instance and server queues at now and appends
// their requests to dst, oldest first, so that the owner can fail them
// (when it shuts down). The outstanding counts are unchanged: Done the
// requests already dispatched as usual.
func (s *Scheduler[T]) Release(now time.Time, dst []T) []T {
	sc := s.scratch[:0]
	for s.inst.len() > 0 {
		sc = append(sc, s.inst.popFront())
	}
	for i := range s.srv {
		sv := &s.srv[i]
		for c := range sv.b {
			for sv.b[c].q.len() > 0 {
				sc = append(sc, sv.b[c].q.popFront())
			}
		}
	}
	slices.SortFunc(sc, func(a, b entry[T]) int { return cmp.Compare(a.seq, b.seq) })
	for i := range sc {
		dst = append(dst, sc[i].item)
	}
	clear(sc)
	s.scratch = sc[:0]
	s.queued = 0
	for i := range s.srv {
		s.checkAlarm(i, now)
	}
	s.minDL = math.MaxInt64
	return dst
}
