package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/status"
	"github.com/stretchr/testify/assert"
)

// The failures by kind are bounded: a server that answers with ever new
// result codes (or error texts) fills maxFailKinds-1 kinds, and the rest
// count together, none lost.
func TestFailKindsBounded(t *testing.T) {
	c := newCounter(4)
	const n = 10 * maxFailKinds
	for i := range n {
		c.fail(c.tally(int64(i)), fmt.Sprintf("result %d", 5000+i))
	}
	c.fail(c.tally(0), "result 5000") // a kind already counted keeps its own
	kinds := c.failedKinds()
	assert.Len(t, kinds, maxFailKinds)
	assert.Equal(t, uint64(2), kinds["result 5000"])
	assert.Equal(t, uint64(n-(maxFailKinds-1)), kinds[otherFailKinds])
	var total uint64
	for _, v := range kinds {
		total += v
	}
	assert.Equal(t, uint64(n+1), total)
	_, _, failed := c.counts()
	assert.Equal(t, uint64(n+1), failed)
}

// answerAll answers every request at once, without a server.
type answerAll struct{}

func (answerAll) exchange(context.Context, *client.Client, int64) (string, bool, error) {
	return "", false, nil
}

func (answerAll) identity() status.Identity { return status.Identity{} }

// The closed loop starts no more callers than --requests: --requests 3
// --concurrency 1000 starts 3 (a billion took minutes to start). Each
// caller takes one request number past --requests to learn that it is
// done, so the numbers handed out count the callers started.
func TestClosedLoopCallersAtMostRequests(t *testing.T) {
	o := loadOptions{concurrency: 1000, requests: 3}
	g := newLoadgen(&o, 0, "test", answerAll{}, slog.New(slog.DiscardHandler), nil)
	ctx := context.Background()
	g.closedLoop(ctx, ctx, nil)
	sent, answered, _ := g.counts()
	assert.Equal(t, uint64(3), sent)
	assert.Equal(t, uint64(3), answered)
	assert.LessOrEqual(t, g.issued.Load(), int64(3+3), "request numbers handed out: 3 sent, one each for at most 3 callers to stop")
}
