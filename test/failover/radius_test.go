package failover

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// radiusClientReport is the part of a RADIUS client's --report read here.
type radiusClientReport struct {
	Protocol       string            `json:"protocol"`
	Sent           uint64            `json:"sent"`
	Answered       uint64            `json:"answered"`
	Failed         uint64            `json:"failed"`
	FailedBy       map[string]uint64 `json:"failed_by"`
	FailoversTotal uint64            `json:"failovers_total"`
	Failovers      []struct {
		From   string `json:"from_peer"`
		Moved  int    `json:"moved"`
		Reason string `json:"reason"`
	} `json:"failovers"`
	Servers []struct {
		Name       string `json:"server"`
		FailedOver uint64 `json:"failed_over"`
	} `json:"servers"`
	// Stream are the servers' connection counters, read after the
	// client's disconnect.
	Stream []struct {
		Sent     uint64 `json:"sent"`
		Answered uint64 `json:"answered"`
		Late     uint64 `json:"late"`
		MovedOut uint64 `json:"moved_out"`
	} `json:"stream"`
}

// RADIUS/TCP failover across processes: two aaa-peer servers on
// radius+tcp:// sharing the Redis store, and aaa-peer client sending
// Accounting-Requests with the direct access algorithm (everything to the
// first server while it is in service), Tw 6 s. The first server is
// SIGSTOPped (fault "stop") or SIGKILLed (fault "kill") mid-run. Its
// pending requests go to the second server, re-signed with new
// Identifiers; nothing is lost (every request answered), and nothing is
// applied twice: the records the stopped server had read are found in
// Redis by the second one, and the ones it reads once thawed (on a
// connection the client already closed) are found by it.
func TestRadiusTCPFailover(t *testing.T) {
	for _, fault := range []string{"stop", "kill"} {
		t.Run(fault, func(t *testing.T) { radiusFailover(t, fault) })
	}
}

func radiusFailover(t *testing.T, fault string) {
	need(t)
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("failover-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("radius-%s-r%d-%d", fault, os.Getpid(), runSeq.Add(1))
	first := startServer(t, dir, "primary", "primary.example.net", "radius+tcp://127.0.0.1:0", "--secret-file", secret)
	second := startServer(t, dir, "secondary", "secondary.example.net", "radius+tcp://127.0.0.1:0", "--secret-file", secret)
	for _, s := range []*server{first, second} {
		if !strings.HasPrefix(s.url, "radius+tcp://") {
			t.Fatalf("%s listens on %q, want radius+tcp://", s.name, s.url)
		}
	}
	const n = 300
	report := filepath.Join(dir, "client.report.json")
	began := time.Now()
	cl := start(t, dir, "client", "client", "--peer", first.url, "--peer", second.url, "--secret-file", secret,
		"--algorithm", "direct", "--app", "acct", "--nai", tag+"-%d", "--tw", tw.String(),
		"--requests", fmt.Sprint(n), "--rate", "30", "--concurrency", "300", "--report", report, "--log-level", "info")
	time.Sleep(4 * time.Second) // connected, about 100 records answered by the first server
	faultAt := time.Now()
	if fault == "stop" {
		first.signal(syscall.SIGSTOP)
	} else {
		first.signal(syscall.SIGKILL)
	}
	if code := cl.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("client exited %d:\n%s", code, tail(cl.stderr, 40))
	}
	cl.checkRace(t)
	took := time.Since(faultAt)
	var r radiusClientReport
	readJSON(t, report, &r)
	t.Logf("%s at %v: client done %v later; report sent %d answered %d failed %d failovers %d %v", fault,
		faultAt.Sub(began).Round(time.Millisecond), took.Round(time.Millisecond), r.Sent, r.Answered, r.Failed, r.FailoversTotal, r.Failovers[:min(len(r.Failovers), 3)])
	if r.Protocol != "radius/tcp" || r.Sent != n || r.Answered != n || r.Failed != 0 {
		t.Errorf("lost requests: sent %d answered %d failed %d %v", r.Sent, r.Answered, r.Failed, r.FailedBy)
	}
	// A killed server's connection drops at once: what was pending moves
	// (often nothing at this rate); a stopped one goes SUSPECT with many
	// requests waiting on it.
	if len(r.Servers) != 2 || len(r.Stream) != 2 || r.Stream[1].Answered == 0 {
		t.Fatalf("servers %+v %+v", r.Servers, r.Stream)
	}
	if fault == "stop" && (r.Servers[0].FailedOver == 0 || r.FailoversTotal == 0 || len(r.Failovers) == 0 || r.Failovers[0].From != first.url) {
		t.Errorf("no failover from the first server recorded: %+v", r.Failovers)
	}

	if fault == "stop" {
		// Thawed, the first server reads what was queued for it; the client
		// closed that connection long ago.
		first.signal(syscall.SIGCONT)
		time.Sleep(2 * time.Second)
	}
	reps := map[string]serverReport{"secondary": second.stop(t)}
	if fault == "stop" {
		reps["primary"] = first.stop(t)
	}
	applied, dups, received, _ := sumApplied(reps)
	t.Logf("servers: applied %d, duplicates %d, received %d (%v)", applied, dups, received, reps)
	switch fault {
	case "stop":
		if applied != n {
			t.Errorf("applied %d records in all, want %d: lost or applied twice", applied, n)
		}
	case "kill":
		// The killed server wrote no report: the second one applied the
		// rest and found in Redis those the first one had applied.
		// A record the first applied without answering is a duplicate at
		// the second.
		firstAnswered := r.Stream[0].Answered
		if applied+firstAnswered > n || applied+firstAnswered+dups < n {
			t.Errorf("second server applied %d (duplicates %d), first answered %d: want %d in all, once each", applied, dups, firstAnswered, n)
		}
	}
	twice := "0"
	if applied > n {
		twice = fmt.Sprint(applied - n)
	}
	moved := 0
	for _, s := range r.Servers {
		moved += int(s.FailedOver)
	}
	addRow(row{scenario: "RADIUS/TCP " + fault, detection: "-", moved: moved, lost: r.Failed,
		twice: twice, note: "client done " + fmtDur(took) + " after the fault"})
}
