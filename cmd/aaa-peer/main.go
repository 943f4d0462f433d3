// Command aaa-peer is aaatp's test node: a Diameter server that answers
// accounting and test-application requests (with fault knobs to make it
// misbehave), and a load-generating client, both reporting what the RFC
// 3539 watchdog saw as JSON.
//
//	aaa-peer server --listen tcp://127.0.0.1:3868 --origin-host s1.example.net --origin-realm example.net
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
  server   answer Diameter accounting (ACR) and test-application requests,
           each applied once (--dedup memory|redis://), with fault knobs
           (--answer-delay, --drop-dwa, --stall-after)
  client   send ACRs or Test-Requests to one or more peers, balanced or
           primary/secondary with RFC 3539 failover, and report
           throughput, latency, failovers and what the watchdog saw
  route    print the RFC 3074 hash of a NAI and the server the balancer
           picks for it (--server, --down, --algorithm)
  demo     a live failover demo on loopback (not built yet)

Run 'aaa-peer <command> -h' for the flags of a command.
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
