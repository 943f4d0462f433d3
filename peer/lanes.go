package peer

import (
	"log/slog"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// handlerLanes runs Handlers on workers, accounting on a budget of its
// own (see Config.MaxHandlers). A Server's peers share one, their
// connections taking turns.
type handlerLanes struct {
	acct, other *serve.Lane[*conn, workJob]
}

// workJob is a request for a worker, and its connection.
type workJob struct {
	c   *conn
	req []byte
}

func newHandlerLanes(max, queue int) *handlerLanes {
	return &handlerLanes{
		acct:  serve.NewLane[*conn](runJob, refuseJob, max, queue, nil),
		other: serve.NewLane[*conn](runJob, refuseJob, max, queue, nil),
	}
}

// runJob answers one request on a worker; its Peer counted it in wg.
func runJob(j workJob) {
	defer j.c.p.wg.Done()
	j.c.answerRequest(j.req)
}

// refuseJob answers DIAMETER_TOO_BUSY a request its lane will not run:
// the lane was full when it came, or another connection's request took
// its place; its Peer counted it in wg.
func refuseJob(j workJob) {
	c, p := j.c, j.c.p
	defer p.wg.Done()
	p.stats.overload.Add(1)
	p.logLimited(slog.LevelWarn, serve.KindOverload, "request answered DIAMETER_TOO_BUSY: its handlers and their queue are full",
		"peer", p.Name(), "command", message.CommandName(j.req), "max_handlers", p.cfg.MaxHandlers, "max_queued_handlers", p.cfg.MaxQueuedHandlers)
	c.answered(wire.HopByHop(j.req), wire.EndToEnd(j.req), message.ErrorAnswer(j.req, p.cfg.identity(), message.TooBusy, "handlers busy").Bytes(), false)
}

// close ends the parked workers now.
func (l *handlerLanes) close() {
	l.acct.Close()
	l.other.Close()
}

// serveOnWorker runs the Handler for req on a worker of its kind's lane,
// or answers it DIAMETER_TOO_BUSY when that lane is full (refuseJob).
func (p *Peer) serveOnWorker(c *conn, req []byte) {
	c.owed.Add(1)
	c.out.Held(false)
	lane := p.cfg.lanes.other
	if wire.CommandCode(req) == message.CmdAccounting {
		lane = p.cfg.lanes.acct
	}
	p.wg.Add(1) // the reader holds p.wg: never from zero
	lane.Submit(c, workJob{c, req})
}
