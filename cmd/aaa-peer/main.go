// Command aaa-peer is aaatp's test node: a Diameter server that answers
// accounting and test-application requests (with fault knobs to make it
// misbehave), a load-generating client, both reporting what the RFC 3539
// watchdog saw as JSON and, with --status, on a live status page with
// Prometheus metrics, and a failover demo that runs both in one process.
//
//	aaa-peer demo
//	aaa-peer server --listen tcp://127.0.0.1:3868 --origin-host s1.example.net --origin-realm example.net --status 127.0.0.1:8080
//	aaa-peer client --peer tcp://127.0.0.1:3868 --origin-host c1.example.net --origin-realm example.net --destination-realm example.net
//	aaa-peer route --nai user@example.net --server a --server b
//	aaa-peer version
//	aaa-peer config check aaa-peer.toml
//
// Run "aaa-peer <command> -h" for the flags of each command. Exit codes: 0
// success, 1 runtime failure, 2 usage error.
//
// # Events
//
// server and client --events FILE write one JSON object a line per event,
// in the order they happened, with these fields:
//
//	time        RFC 3339 with nanoseconds
//	peer        the peer's remote Origin-Host (else its address); for the
//	            client's own events, the server's name (--peer value)
//	type        watchdog, connection, failover, error, balancer, policy, queue
//	kind        what happened, finer than type: watchdog, connection_up,
//	            connection_down, open_failed, idle, disconnecting (the
//	            peer's DPR: its connection takes no new request), failover
//	            (a server's own, no alternate), failback, error; and for
//	            the client's own events failover (a record),
//	            balancer_rebuilt, policy, queue_alarm, slot_filled,
//	            slot_released
//	reason      for people: the watchdog's rule, the error, the cause
//	from, to    watchdog (RFC 3539 states, in capitals) and policy states
//	trigger     watchdog: the event the machine stepped on
//	num_dwa     watchdog: DWAs counted in REOPEN (-1 after a missed one)
//	network, addr   connection_up: transport and remote address
//	dpr, dpa    connection_down: this side sent a DPR; its DPA came
//	pending     failover of a server: requests left pending on it
//	from_peer, to_peer, moved, end_to_end, outcome
//	            failover record: from which server to which, how many
//	            requests and their End-to-End Identifiers; outcome is
//	            moved, parked (no alternate: to_peer empty), refused or
//	            nothing_pending
//	generation  balancer_rebuilt: the new table's generation
//	raised, depth   queue_alarm: raised or cleared, at which depth
//	because     slot_filled: the server that went DOWN
//
// Fields that do not apply to an event are left out, except time, peer,
// type, kind and reason.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usageText = `usage: aaa-peer <command> [flags]

commands:
  server   Diameter and RADIUS server: answers ACRs, test requests and RADIUS
           requests, each accounting record applied once
  client   load generator, Diameter or RADIUS: balanced or primary/secondary,
           with RFC 3539 failover
  route    prints the RFC 3074 hash of a NAI and the server it goes to
  demo     live failover demo: 3 servers and a client on loopback, under a minute
  version  prints the version, VCS revision, build time and Go version (also --version)
  config   config check FILE: checks a configuration file, printing every problem with its line

server and client take --config FILE (TOML: identity, listeners, peers with
their names, secrets, weights and roles, the dedup store); flags given on
the command line override it. server, client and demo take --status ADDR
(a live status page, /status.json and Prometheus /metrics); server, client
and the Diameter demo take --log-level and --log-format text|json.
Run 'aaa-peer <command> -h' for the flags of a command. Exit codes: 0
success, 1 runtime failure, 2 usage error.
`

// hangups delivers SIGHUP to server (a reload of --config) and client
// (logged: no reload yet), so that it does not end them; nil in tests and
// for the other commands.
var hangups <-chan os.Signal

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "server" || os.Args[1] == "client") {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		hangups = hup
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return 2
	}
	switch args[0] {
	case "server":
		return runServer(ctx, args[1:], stdout, stderr)
	case "client":
		return runClient(ctx, args[1:], stdout, stderr)
	case "route":
		return runRoute(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "config":
		return runConfig(args[1:], stdout, stderr)
	case "version", "-version", "--version":
		return runVersion(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return 0
	}
	fmt.Fprintf(stderr, "aaa-peer: unknown command %q\n\n", args[0])
	fmt.Fprint(stderr, usageText)
	return 2
}
