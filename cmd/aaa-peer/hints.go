package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/aaatp/aaatp/message"
)

// Schemes each URL flag takes, as its error messages list them.
const (
	serverSchemes = "tcp, tls, sctp for Diameter; radius, radius+tcp, radsec for RADIUS"
	clientSchemes = serverSchemes
)

// knownSchemes are the URL schemes of --listen and --peer, lower case.
var knownSchemes = map[string]bool{
	"tcp": true, "tls": true, "sctp": true, "radius": true, "radius+tcp": true, "radsec": true,
}

// checkURLScheme explains a --listen or --peer value whose scheme is
// missing or unknown, before a parser reports it in its own terms (a
// scheme-less host:port otherwise reads "first path segment in URL cannot
// contain colon"). It returns nil for a known scheme: the URL's parser
// checks the rest.
func checkURLScheme(name, u, schemes string) error {
	scheme, _, ok := strings.Cut(u, "://")
	if !ok {
		example := "tcp://127.0.0.1:3868"
		if strings.Contains(u, ":") && !strings.ContainsAny(u, "/ ") {
			example = "tcp://" + u
		}
		return usagef("--%s %s: want a URL such as %s (schemes: %s)", name, u, example, schemes)
	}
	switch s := strings.ToLower(scheme); {
	case knownSchemes[s]:
		return nil
	case s == "radius+udp" || s == "udp":
		return usagef("--%s %s: unknown scheme %s: RADIUS over UDP is radius://", name, u, scheme)
	case s == "diameter" || s == "aaa":
		return usagef("--%s %s: unknown scheme %s: Diameter over TCP is tcp:// (schemes: %s)", name, u, scheme, schemes)
	default:
		return usagef("--%s %s: unknown scheme %s (schemes: %s)", name, u, scheme, schemes)
	}
}

// peerArgs returns the values of the --peer flags in args, before
// parsing (which client, Diameter or RADIUS, takes them).
func peerArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break // the flag package stops here too
		}
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "peer="); ok {
			out = append(out, v)
		} else if strings.TrimLeft(a, "-") == "peer" && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
	}
	return out
}

// durationFlag is a duration flag whose parse error says what a duration
// looks like: the flag package's own says only "parse error". Its zero
// value reads as a zero duration, as the flag package expects of a Value
// when it prints the defaults.
type durationFlag struct{ v flag.Value }

func (d *durationFlag) String() string {
	if d.v == nil {
		return time.Duration(0).String()
	}
	return d.v.String()
}

func (d *durationFlag) Set(s string) error {
	if err := d.v.Set(s); err != nil {
		if _, perr := time.ParseDuration(s + "s"); perr == nil {
			return fmt.Errorf("want a duration with its unit, such as %ss", s)
		}
		return errors.New("want a duration with its unit, such as 30s, 500ms or 2m")
	}
	return nil
}

// Get returns the duration, as the flag package's own Value does.
func (d *durationFlag) Get() any { return d.v.(flag.Getter).Get() }

// hintDurations makes every duration flag of fs say, on a bad value, what
// a duration looks like. Call it once every flag is defined; each flag
// keeps its value, default and usage.
func hintDurations(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, done := f.Value.(*durationFlag); done {
			return
		}
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				f.Value = &durationFlag{f.Value}
			}
		}
	})
}

// maxLabelLen is the longest label of a DNS name (RFC 1035 2.3.4).
const maxLabelLen = 63

// checkIdentityFlag refuses a --origin-host, --origin-realm or
// --destination-realm value that is not a DiameterIdentity (RFC 6733
// 4.3.1: an FQDN or a realm), naming the flag, what is wrong and an
// example. Besides message.CheckIdentity's rules (ASCII letters, digits,
// '-', '_' and '.'; no empty label, none over 63 bytes; at most 253 bytes,
// 254 with a final '.'), a name this node puts in its own messages has no
// final '.' (as a peer's own identity, compared byte for byte, has none)
// and no label beginning or ending with '-'. A peer would otherwise refuse the CER or answers it appears
// in, far from the flag that caused it.
func checkIdentityFlag(name, v, example string) error {
	if why := identityProblem(v); why != "" {
		return usagef("--%s %s: want a DiameterIdentity (RFC 6733 4.3.1) such as %s: %s", name, message.Printable(v, 64), example, why)
	}
	return nil
}

// identityProblem says what makes v no DiameterIdentity, "" when it is one.
func identityProblem(v string) string {
	if v == "" {
		return "empty"
	}
	if len(v) > message.MaxIdentityLen-1 { // no final '.' here
		return fmt.Sprintf("%d bytes long, at most %d", len(v), message.MaxIdentityLen-1)
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		case c == ' ':
			return fmt.Sprintf("a space at offset %d (letters, digits, '-', '_' and '.' only)", i)
		case c >= 0x80:
			return fmt.Sprintf("byte 0x%02x at offset %d is not ASCII (an internationalised name goes in its xn-- form)", c, i)
		default:
			return fmt.Sprintf("%q at offset %d (letters, digits, '-', '_' and '.' only)", c, i)
		}
	}
	for l := range strings.SplitSeq(v, ".") {
		switch {
		case l == "":
			return "an empty label (a leading, trailing or doubled '.')"
		case len(l) > maxLabelLen:
			return fmt.Sprintf("label %s is %d bytes long, at most %d", message.Printable(l, 16), len(l), maxLabelLen)
		case l[0] == '-' || l[len(l)-1] == '-':
			return fmt.Sprintf("label %q begins or ends with '-'", l)
		}
	}
	return ""
}
