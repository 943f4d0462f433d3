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
//
// Run "aaa-peer <command> -h" for the flags of each command. Exit codes: 0
// success, 1 runtime failure, 2 usage error.
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
  server   Diameter server: answers ACRs and test requests, each applied once
  client   load generator: balanced or primary/secondary, with RFC 3539 failover
  route    prints the RFC 3074 hash of a NAI and the server it goes to
  demo     live failover demo: 3 servers and a client on loopback, under a minute

server, client and demo take --status ADDR (a live status page, /status.json
and Prometheus /metrics), --log-level and --log-format text|json.
Run 'aaa-peer <command> -h' for the flags of a command. Exit codes: 0
success, 1 runtime failure, 2 usage error.
`

func main() {
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
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return 0
	}
	fmt.Fprintf(stderr, "aaa-peer: unknown command %q\n\n", args[0])
	fmt.Fprint(stderr, usageText)
	return 2
}
