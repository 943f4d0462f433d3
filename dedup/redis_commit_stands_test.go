package dedup

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// noreplicas lets the first complete pipeline through (Redis runs the
// script, the WAIT finds no replica), then has the master refuse writes
// (min-replicas-to-write 1, as when its replica is gone or a failover
// demotes it): every later try of that Complete gets NOREPLICAS.
type noreplicas struct {
	admin   *redis.Client
	passed  atomic.Int32
	lastErr atomic.Value
	single  atomic.Int32
}

func (h *noreplicas) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *noreplicas) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd, completeScript, completeLua) {
			h.single.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *noreplicas) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 0 && isScript(cmds[0], completeScript, completeLua) {
			if h.passed.Load() > 0 {
				h.lastErr.Store(fmt.Sprintf("%v (retryable %v, may have run %v, %T)", cmds[0].Err(), retryable(cmds[0].Err()), claimMayHaveRun(cmds[0].Err()), cmds[0].Err()))
			}
			if h.passed.Add(1) == 1 {
				h.admin.ConfigSet(context.Background(), "min-replicas-to-write", "1")
			}
			return err
		}
		// The claim's write reached a replica (this Redis has none: its
		// WAIT says so).
		if len(cmds) == 2 {
			if w, ok := cmds[1].(*redis.Cmd); ok && w.Err() == nil {
				w.SetVal(int64(1))
			}
		}
		return err
	}
}

// A Complete whose first try ran on Redis (its reply received, only the
// replicas' WAIT short) and whose later tries, chasing the replicas, were
// refused (NOREPLICAS) has stored the answer: it is committed, onCommit
// runs, and the client's retry gets the stored answer.
func TestRedisCommitStoredThenRefusedStands(t *testing.T) {
	url := needRedis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(opt)
	t.Cleanup(func() {
		admin.ConfigSet(context.Background(), "min-replicas-to-write", "0")
		admin.Close()
	})
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	h := &noreplicas{admin: admin}
	client.AddHook(h)
	s := NewRedis(client, WithKeyPrefix("rv2-noreplicas:"), WithPoll(time.Millisecond, 20*time.Millisecond),
		WithMarkTTL(400*time.Millisecond), WithReplicaAcks(1, 20*time.Millisecond))
	var n atomic.Int32
	c := &Counters{}
	w := WrapCommit(s, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		return message.NewAnswer(req).ResultCode(message.Success).Bytes()
	}, func(req, ans []byte) { n.Add(1) }, c)
	ans1 := w(context.Background(), nil, acrFor(77, 77))
	admin.ConfigSet(context.Background(), "min-replicas-to-write", "0") // the replica is back
	replay := acrFor(77, 77)
	wire.SetRetransmit(replay)
	ans2 := w(context.Background(), nil, replay)
	rc1, _ := message.Uint32Of(ans1, message.ResultCode, 0)
	rc2, _ := message.Uint32Of(ans2, message.ResultCode, 0)
	commits := n.Load()
	t.Logf("last complete try's error: %v; tries without the WAIT: %d", h.lastErr.Load(), h.single.Load())
	t.Logf("complete pipelines %d; answers %d then %d; onCommit %d; applied %d, duplicates %d, store errors %d",
		h.passed.Load(), rc1, rc2, commits, c.Applied.Load(), c.Duplicates.Load(), c.StoreErrs.Load())
	if rc2 == message.Success && commits != 1 {
		t.Fatalf("the request's answer is stored (its retry answered %d from the store) but onCommit ran %d times: a commit that landed was lost", rc2, commits)
	}
}
