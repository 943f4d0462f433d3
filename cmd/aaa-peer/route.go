package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/aaatp/aaatp/loadbalance"
)

const routeSynopsis = `usage: aaa-peer route --nai NAI --server NAME[=WEIGHT] [--server ...]
       [--down NAME...] [--algorithm pearson|hash|direct|round-robin]

Answers "where does this user go?": prints one line
  hash=<0-255> server=<NAME>
the RFC 3074 Pearson hash of the NAI (its bucket) and the server a client
balancing over the --server list (in that order, with those weights) picks
for a new conversation of that NAI, every server in service except the
--down ones, which count as suspended (watchdog SUSPECT: no table rebuild,
their buckets fall through to the next bucket's server, RFC 3539 3.4.3).
Use the --peer URLs of "aaa-peer client" as names to match its choice.
The table is the one built with every server in service at once; a client
whose peers came into service one by one may hold an equally balanced but
different table. Exit 1 if no server is left, 2 on bad flags (round-robin
has no fixed route per NAI).
`

type routeOptions struct {
	nai       string
	servers   stringList
	down      stringList
	algorithm string
}

// routeFlags is the flag set of "aaa-peer route".
func routeFlags(o *routeOptions, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("route", routeSynopsis, stderr)
	fs.StringVar(&o.nai, "nai", "", "the `NAI` (User-Name) to route, such as user@example.net (required)")
	fs.Var(&o.servers, "server", "`NAME[=WEIGHT]` of a server, weight >= 1 (default 1); repeat, in configured order (at least one)")
	fs.Var(&o.down, "down", "`NAME` of a --server to treat as suspended; repeat for several")
	fs.StringVar(&o.algorithm, "algorithm", "pearson", "`ALG`: pearson (weighted), hash (unweighted), direct (first server in service) or round-robin")
	return fs
}

func runRoute(_ context.Context, args []string, stdout, stderr io.Writer) int {
	var o routeOptions
	fs := routeFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aaa-peer route: "+format+"\n", a...)
		return 2
	}
	if o.nai == "" {
		return usage("--nai is required")
	}
	if len(o.servers) == 0 {
		return usage("--server is required (at least one)")
	}
	alg, err := loadbalance.ParseAlgorithm(o.algorithm)
	if err != nil {
		return usage("--algorithm %q: want pearson, hash, direct or round-robin", o.algorithm)
	}
	if alg == loadbalance.RoundRobin {
		return usage("--algorithm round-robin has no fixed route per NAI")
	}
	var servers []loadbalance.Server
	known := map[string]bool{}
	for i, sv := range o.servers {
		name, w, err := parseNameWeight(sv, false)
		if err != nil {
			return usage("--server %q: %v", sv, err)
		}
		if known[name] {
			return usage("--server %s given twice", name)
		}
		known[name] = true
		servers = append(servers, loadbalance.Server{Name: name, Weight: w, Index: i})
	}
	for _, d := range o.down {
		if !known[d] {
			return usage("--down %s is not a --server", d)
		}
	}
	b, err := loadbalance.New(alg, servers, loadbalance.Options{})
	if err != nil {
		return usage("%v", err)
	}
	hash, server, err := b.Route(o.nai, o.down...)
	if err != nil {
		if errors.Is(err, loadbalance.ErrNoServer) {
			fmt.Fprintf(stderr, "aaa-peer route: hash=%d: no server in service (every --server is --down)\n", hash)
			return 1
		}
		fmt.Fprintf(stderr, "aaa-peer route: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "hash=%d server=%s\n", hash, server)
	return 0
}
