package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Client is one [[client]] table: a RADIUS client (a NAS, or a proxy) a
// server answers, known by the address its requests come from. When a
// file has any, a server's RADIUS listeners answer these sources alone,
// each with its own shared secret; without any, every source is a client
// of the top-level secret.
type Client struct {
	// Name labels the client in logs, on the status page and in the
	// metrics.
	Name string
	// Source is the client's address, or the prefix of its addresses (a
	// bare address is a prefix of its own: /32, /128). A request is the
	// client's whose source is in the most specific prefix holding it.
	Source netip.Prefix
	// Secret is the client's shared secret over radius:// and
	// radius+tcp://; SecretFile the file it was read from ("" when given
	// inline). Nil for a client of Protocol "tls" (radsec:// uses
	// "radsec").
	Secret     []byte
	SecretFile string
	// Protocol limits the client to the listeners of one transport:
	// "udp" (radius://), "tcp" (radius+tcp://) or "tls" (radsec://); ""
	// is every RADIUS listener.
	Protocol string
	// Line is the line of the client's [[client]] header, for messages.
	Line int
}

// The values of a client's protocol.
const (
	ClientUDP = "udp"
	ClientTCP = "tcp"
	ClientTLS = "tls"
)

// ParseSource reads a client's source: an IPv4 or IPv6 address, or a
// prefix in CIDR notation (10.0.0.0/8, 2001:db8::/32). A prefix with bits
// set past its length, a zone (fe80::1%eth0), an IPv4 address written as
// IPv6 (::ffff:10.0.0.1) and host names are refused: each would match
// other sources than it seems to, or none.
func ParseSource(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, fmt.Errorf("empty: want an IP address such as 192.0.2.7 or a prefix such as 192.0.2.0/24")
	}
	addr, bits, hasBits := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addr)
	if err != nil {
		if strings.ContainsAny(addr, ":") || strings.Trim(addr, "0123456789.") == "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address", s)
		}
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or prefix (host names are not looked up: write the address)", s)
	}
	switch {
	case a.Zone() != "":
		return netip.Prefix{}, fmt.Errorf("%q: a source has no zone: write %s", s, a.WithZone(""))
	case a.Is4In6():
		return netip.Prefix{}, fmt.Errorf("%q: write the IPv4 address as such: %s", s, a.Unmap())
	}
	if !hasBits {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	n, err := strconv.Atoi(bits)
	if err != nil || n < 0 || n > a.BitLen() || bits != strconv.Itoa(n) {
		return netip.Prefix{}, fmt.Errorf("%q: the prefix length must be 0 to %d", s, a.BitLen())
	}
	p := netip.PrefixFrom(a, n)
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past its length: did you mean %s, or %s alone?", s, m, a)
	}
	return p, nil
}

// clients checks the [[client]] tables.
func (c *checker) clients(cfg *Config, doc *fileDoc) {
	names := map[string]int{} // name -> line
	type key struct {
		src   netip.Prefix
		proto string
	}
	sources := map[key]Client{}
	for i, fc := range doc.Client {
		base := "client." + strconv.Itoa(i)
		at := func(k string) string { return base + "." + k }
		cl := Client{Line: c.lineOf(base)}
		if s, ok := c.str(at("name"), fc.Name); ok {
			switch l, dup := names[s]; {
			case s == "" || strings.ContainsAny(s, " \t\r\n\""):
				c.problem(at("name"), "%q: want a name without spaces or quotes", s)
			case dup:
				c.problem(at("name"), "two clients named %q (the other at line %d): names must differ", s, l)
			default:
				names[s] = cl.Line
			}
			cl.Name = s
		} else if fc.Name == nil {
			c.problem(base, "no name: every [[client]] needs one, such as name = \"nas1\" (it labels the client in logs and metrics)")
		}
		if s, ok := c.str(at("source"), fc.Source); ok {
			p, err := ParseSource(s)
			if err != nil {
				c.problem(at("source"), "%v", err)
			}
			cl.Source = p
		} else if fc.Source == nil {
			c.problem(base, "no source: every [[client]] needs one, the address or prefix its requests come from, such as source = \"192.0.2.7\" or \"192.0.2.0/24\"")
		}
		if s, ok := c.str(at("protocol"), fc.Protocol); ok {
			switch s {
			case ClientUDP, ClientTCP, ClientTLS:
			default:
				c.problem(at("protocol"), "%q: want udp (radius://), tcp (radius+tcp://) or tls (radsec://), or leave it out for every RADIUS listener", s)
			}
			cl.Protocol = s
		}
		cl.Secret, cl.SecretFile = c.secret(base, fc.Secret, fc.SecretFile)
		switch {
		case cl.Protocol == ClientTLS && (fc.Secret != nil || fc.SecretFile != nil):
			c.problem(pick(fc.Secret != nil, at("secret"), at("secret-file")), "radsec:// uses the secret \"radsec\" (RFC 6614): leave it out")
			cl.Secret, cl.SecretFile = nil, ""
		case cl.Protocol != ClientTLS && fc.Secret == nil && fc.SecretFile == nil:
			c.problem(base, "no secret: give the client's shared secret as secret or secret-file")
		}
		if cl.Source.IsValid() {
			for _, proto := range overlapping(cl.Protocol) {
				if o, dup := sources[key{cl.Source, proto}]; dup {
					c.problem(at("source"), "%s is also the source of client %q at line %d: which secret would its requests get?", cl.Source, o.Name, o.Line)
					break
				}
			}
			if _, dup := sources[key{cl.Source, cl.Protocol}]; !dup {
				sources[key{cl.Source, cl.Protocol}] = cl
			}
		}
		cfg.Clients = append(cfg.Clients, cl)
	}
}

// overlapping are the protocol values whose clients a client of proto
// would share its listeners with.
func overlapping(proto string) []string {
	if proto == "" {
		return []string{"", ClientUDP, ClientTCP, ClientTLS}
	}
	return []string{"", proto}
}
