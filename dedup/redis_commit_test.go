package dedup

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
	"github.com/redis/go-redis/v9"
)

// replyLoss makes the replies of chosen scripts fail as a read timeout
// would: after Redis ran the script (lose), or without sending it (drop).
type replyLoss struct {
	lose     atomic.Int32 // complete tries to run, then lose the reply of
	drop     atomic.Bool  // complete tries are not sent, their reply "lost"
	dropSets atomic.Bool  // nor are settle checks
	tries    atomic.Int32 // complete tries seen
}

func (h *replyLoss) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *replyLoss) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func isScript(cmd redis.Cmder, s *redis.Script, src string) bool {
	args := cmd.Args()
	return len(args) > 1 && (args[1] == s.Hash() || args[1] == src)
}

func (h *replyLoss) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		switch {
		case isScript(cmd, completeScript, completeLua):
			h.tries.Add(1)
			if h.drop.Load() {
				cmd.SetErr(timeout)
				return timeout
			}
			err := next(ctx, cmd)
			if h.lose.Add(-1) >= 0 {
				cmd.SetErr(timeout)
				return timeout
			}
			return err
		case isScript(cmd, settleScript, settleLua) && h.dropSets.Load():
			cmd.SetErr(timeout)
			return timeout
		}
		return next(ctx, cmd)
	}
}

// lossyStore returns a Redis store whose client goes through a replyLoss.
func lossyStore(t *testing.T, prefix string, opts ...Option) (*Redis, *replyLoss) {
	t.Helper()
	opt, err := redis.ParseURL(needRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	h := &replyLoss{}
	client.AddHook(h)
	return NewRedis(client, append([]Option{WithKeyPrefix(prefix), WithPoll(time.Millisecond, 20*time.Millisecond)}, opts...)...), h
}

// commitRun runs one request through WrapCommit on s, then its replay,
// and returns the two Result-Codes, onCommit's runs and the counters.
func commitRun(t *testing.T, s Store, e2e uint32, arm func()) (rc1, rc2 uint32, commits int32, c *Counters) {
	t.Helper()
	var n atomic.Int32
	c = &Counters{}
	w := WrapCommit(s, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		return message.NewAnswer(req).ResultCode(message.Success).Bytes()
	}, func(req, ans []byte) { n.Add(1) }, c)
	arm()
	ans1 := w(context.Background(), nil, acrFor(e2e, e2e))
	replay := acrFor(e2e, e2e)
	wire.SetRetransmit(replay)
	ans2 := w(context.Background(), nil, replay)
	rc1, _ = message.Uint32Of(ans1, message.ResultCode, 0)
	rc2, _ = message.Uint32Of(ans2, message.ResultCode, 0)
	return rc1, rc2, n.Load(), c
}

// TestRedisCommitReplyLostRetried: the first commit's reply is lost
// after Redis ran it; the commit is tried again, finds its own write, and
// the request is applied: onCommit runs once, and the replay gets the
// answer from the store.
func TestRedisCommitReplyLostRetried(t *testing.T) {
	s, h := lossyStore(t, "commit-retry:")
	rc1, rc2, commits, c := commitRun(t, s, 1, func() { h.lose.Store(1) })
	if rc1 != message.Success || rc2 != message.Success || commits != 1 || c.Applied.Load() != 1 || c.StoreErrs.Load() != 0 || h.tries.Load() < 2 {
		t.Fatalf("answers %d, %d; onCommit %d, applied %d, store errors %d, tries %d; want success twice, committed once after a retry",
			rc1, rc2, commits, c.Applied.Load(), c.StoreErrs.Load(), h.tries.Load())
	}
}

// TestRedisCommitRepliesLostSettled: every commit try runs on Redis but
// its reply is lost, for the whole mark TTL; Complete then checks whether
// one landed, and it did: the request is applied, onCommit runs once.
func TestRedisCommitRepliesLostSettled(t *testing.T) {
	s, h := lossyStore(t, "commit-settle:", WithMarkTTL(300*time.Millisecond))
	rc1, rc2, commits, c := commitRun(t, s, 2, func() { h.lose.Store(1 << 30) })
	if rc1 != message.Success || rc2 != message.Success || commits != 1 || c.Applied.Load() != 1 || c.StoreErrs.Load() != 0 {
		t.Fatalf("answers %d, %d; onCommit %d, applied %d, store errors %d; want success twice, committed once",
			rc1, rc2, commits, c.Applied.Load(), c.StoreErrs.Load())
	}
}

// TestRedisCommitNeverSentSettledAndFenced: no commit try reaches Redis;
// the check finds none landed, drops the marks and fences the request
// off, so that a try of the commit arriving late stores nothing: the
// request is refused DIAMETER_TOO_BUSY, onCommit does not run, and the
// client's retry is applied at once.
func TestRedisCommitNeverSentSettledAndFenced(t *testing.T) {
	s, h := lossyStore(t, "commit-fence:", WithMarkTTL(300*time.Millisecond))
	var c Counters
	var commits, runs atomic.Int32
	w := WrapCommit(s, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		runs.Add(1)
		return message.NewAnswer(req).ResultCode(message.Success).Bytes()
	}, func(req, ans []byte) { commits.Add(1) }, &c)
	h.drop.Store(true)
	rc1, _ := message.Uint32Of(w(context.Background(), nil, acrFor(3, 3)), message.ResultCode, 0)
	h.drop.Store(false)
	if rc1 != message.TooBusy || commits.Load() != 0 || c.StoreErrs.Load() != 1 || c.CommitUnknown.Load() != 0 {
		t.Fatalf("answer %d, onCommit %d, store errors %d, unknown %d; want refused, not committed, known", rc1, commits.Load(), c.StoreErrs.Load(), c.CommitUnknown.Load())
	}
	// A late try of that commit (same owner token) stores nothing.
	o, err := s.Begin(context.Background(), KeysOf(acrFor(4, 4))...)
	if err != nil || !o.First() {
		t.Fatal(o, err)
	}
	mk := o.fin.(*redisMark)
	h.drop.Store(true)
	if err := o.Complete(msg(1, 4, "x")); err == nil {
		t.Fatal("Complete succeeded with no try sent")
	}
	h.drop.Store(false)
	n, err := completeScript.Run(context.Background(), s.client, mk.withOwners(), mk.owner, "a"+string(msg(1, 4, "x")), 60000, 60000).Int()
	if err != nil || n != -1 {
		t.Fatalf("a late try after settling: %d, %v; want -1 (fenced)", n, err)
	}
	// The client's retries are applied, without waiting for the marks.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if o, err := s.Begin(ctx, KeysOf(acrFor(4, 4))...); err != nil || !o.First() {
		t.Fatalf("the retry of a request settled as not committed: %v %v", o, err)
	} else {
		_ = o.Abandon()
	}
	retry := acrFor(3, 3)
	wire.SetRetransmit(retry)
	rc2, _ := message.Uint32Of(w(ctx, nil, retry), message.ResultCode, 0)
	if rc2 != message.Success || runs.Load() != 2 || commits.Load() != 1 {
		t.Fatalf("the retry: answer %d, handler runs %d, onCommit %d; want applied", rc2, runs.Load(), commits.Load())
	}
}

// TestRedisCommitUnknownCounted: Redis answers neither the commit nor its
// check: Complete says ErrCommitUnknown, which WrapCommit refuses
// DIAMETER_TOO_BUSY and counts apart, and the store counts too.
func TestRedisCommitUnknownCounted(t *testing.T) {
	var logged bytes.Buffer
	s, h := lossyStore(t, "commit-unknown:", WithMarkTTL(200*time.Millisecond), WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	h.dropSets.Store(true)
	o, err := s.Begin(context.Background(), KeysOf(acrFor(5, 5))...)
	if err != nil || !o.First() {
		t.Fatal(o, err)
	}
	h.lose.Store(1 << 30)
	if err := o.Complete(msg(1, 5, "x")); !errors.Is(err, ErrCommitUnknown) {
		t.Fatalf("Complete: %v, want ErrCommitUnknown", err)
	}
	rc1, _, commits, c := commitRun(t, s, 6, func() {})
	if rc1 != message.TooBusy || commits != 0 || c.CommitUnknown.Load() != 1 || c.StoreErrs.Load() != 1 || s.CommitsUnknown() != 2 {
		t.Fatalf("answer %d, onCommit %d, unknown %d (store %d), store errors %d", rc1, commits, c.CommitUnknown.Load(), s.CommitsUnknown(), c.StoreErrs.Load())
	}
	if !strings.Contains(logged.String(), "level=ERROR") || !strings.Contains(logged.String(), "did not answer a commit") {
		t.Fatalf("not logged: %q", logged.String())
	}
}

// busyRedis blocks the Redis server at url for d with a busy script, as
// a slow fsync, a fork of a large dataset or a long command would.
func busyRedis(t *testing.T, url string, d time.Duration, started chan<- struct{}) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Error(err)
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil { // connected before the script
		t.Error(err)
	}
	const spin = `
local s = redis.call('TIME')
while true do
  local n = redis.call('TIME')
  if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1]) then break end
end
return 0`
	close(started)
	if err := c.Eval(context.Background(), spin, nil, d.Microseconds()).Err(); err != nil {
		t.Error(err)
	}
}

// TestRedisCommitStalledRedisSettled: Redis stalls (a busy script) as the
// handler ends, for longer than the mark TTL, and runs the queued commit
// once it is back; Complete's check, made then, finds it landed: onCommit
// runs once, and the replay gets the answer from the store.
func TestRedisCommitStalledRedisSettled(t *testing.T) {
	url := needRedis(t)
	const ttl = time.Second
	s := newRedisStore(t, "", WithMarkTTL(ttl)).(*Redis)
	// Load the scripts, so that the commit below is one EVALSHA.
	if o, err := s.Begin(context.Background(), RequestKey("warm", 1)); err != nil {
		t.Fatal(err)
	} else if err := o.Complete(msg(1, 1, "warm")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	rc1, rc2, commits, c := commitRun(t, &stallingStore{s, func() {
		started := make(chan struct{})
		go func() { defer close(done); busyRedis(t, url, 3*ttl/2, started) }()
		<-started
		time.Sleep(100 * time.Millisecond) // the script has reached Redis
	}}, 7, func() {})
	<-done
	if rc2 != message.Success || commits != 1 || c.Applied.Load() != 1 || rc1 != message.Success {
		t.Fatalf("answers %d, %d; onCommit %d, applied %d, store errors %d, unknown %d; want committed once, onCommit once",
			rc1, rc2, commits, c.Applied.Load(), c.StoreErrs.Load(), c.CommitUnknown.Load())
	}
}

// stallingStore runs stall before the first Complete of its outcomes.
type stallingStore struct {
	*Redis
	stall func()
}

func (s *stallingStore) Begin(ctx context.Context, keys ...Key) (*Outcome, error) {
	o, err := s.Redis.Begin(ctx, keys...)
	if err == nil && o.First() && s.stall != nil {
		stall := s.stall
		s.stall = nil
		o.fin = stallFinisher{o.fin, stall}
	}
	return o, err
}

type stallFinisher struct {
	finisher
	stall func()
}

func (f stallFinisher) complete(o *Outcome, answer []byte) error {
	f.stall()
	return f.finisher.complete(o, answer)
}
