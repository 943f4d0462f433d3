package main

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"

	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/radpeer"
)

// radiusSecrets is what a RADIUS listener verifies requests
// with: the --config file's [[client]] tables when it has any (each
// source its client's secret, the others refused), else one secret for
// every source (nil on radsec://: "radsec").
type radiusSecrets struct {
	secret  []byte
	clients []config.Client
}

// of returns what a server of [[client]] protocol proto verifies
// requests with, as radpeer.ServerConfig's Secret and Clients.
func (sec radiusSecrets) of(proto string) ([]byte, func(netip.Addr) (radpeer.Client, bool)) {
	if len(sec.clients) == 0 {
		return sec.secret, nil
	}
	return nil, newClientTable(sec.clients, proto).lookup
}

// clientTable finds the client of a source address: the one of the most
// specific prefix holding it. Prefixes are grouped by length, longest
// first, so that a look-up costs one map access per length in use (at
// most 33 for IPv4 and 129 for IPv6, however many clients), not one per
// client. It is read-only once made, safe for concurrent use.
type clientTable struct {
	levels []clientLevel
}

type clientLevel struct {
	bits int
	v4   bool
	by   map[netip.Prefix]radpeer.Client
}

// newClientTable returns the table of the clients of a listener of
// transport proto (config.ClientUDP, ClientTCP or ClientTLS): those of no
// protocol or of proto.
func newClientTable(clients []config.Client, proto string) *clientTable {
	t := &clientTable{}
	for _, c := range clients {
		if c.Protocol != "" && c.Protocol != proto {
			continue
		}
		v4 := c.Source.Addr().Is4()
		i := slices.IndexFunc(t.levels, func(l clientLevel) bool { return l.bits == c.Source.Bits() && l.v4 == v4 })
		if i < 0 {
			t.levels = append(t.levels, clientLevel{bits: c.Source.Bits(), v4: v4, by: map[netip.Prefix]radpeer.Client{}})
			i = len(t.levels) - 1
		}
		if _, dup := t.levels[i].by[c.Source]; !dup { // config refuses two; the first stays
			t.levels[i].by[c.Source] = radpeer.Client{Name: c.Name, Secret: c.Secret}
		}
	}
	slices.SortStableFunc(t.levels, func(a, b clientLevel) int { return b.bits - a.bits })
	return t
}

// lookup returns the client of source a, false when none holds it.
func (t *clientTable) lookup(a netip.Addr) (radpeer.Client, bool) {
	a = a.Unmap()
	for _, l := range t.levels {
		if l.v4 != a.Is4() {
			continue
		}
		p, err := a.Prefix(l.bits)
		if err != nil {
			continue
		}
		if c, ok := l.by[p]; ok {
			return c, true
		}
	}
	return radpeer.Client{}, false
}

// clientProto is the [[client]] protocol of a RADIUS listener URL.
func clientProto(u string) string {
	if _, err := radpeer.ParseUDPURL(u); err == nil {
		return config.ClientUDP
	}
	if ep, err := radpeer.ParseURL(u); err == nil && ep.Scheme == radpeer.SchemeRadSec {
		return config.ClientTLS
	}
	return config.ClientTCP
}

// sameClients reports whether a and b configure the same clients: names,
// sources, secrets and protocols in order (their lines may differ).
func sameClients(a, b []config.Client) bool {
	return slices.EqualFunc(a, b, func(x, y config.Client) bool {
		return x.Name == y.Name && x.Source == y.Source && bytes.Equal(x.Secret, y.Secret) && x.Protocol == y.Protocol
	})
}

// clientChanges says what changed from the clients old to cur, by name:
// those added, removed, and changed (source, secret or protocol), or that
// none is left.
func clientChanges(old, cur []config.Client) string {
	if len(cur) == 0 {
		return "none left: every source is verified with the shared secret"
	}
	byName := func(cs []config.Client) map[string]config.Client {
		m := make(map[string]config.Client, len(cs))
		for _, c := range cs {
			m[c.Name] = c
		}
		return m
	}
	o, n := byName(old), byName(cur)
	var added, removed, changed []string
	for _, c := range cur {
		if p, ok := o[c.Name]; !ok {
			added = append(added, c.Name)
		} else if !sameClients([]config.Client{p}, []config.Client{c}) {
			changed = append(changed, c.Name)
		}
	}
	for _, c := range old {
		if _, ok := n[c.Name]; !ok {
			removed = append(removed, c.Name)
		}
	}
	var parts []string
	for _, x := range []struct {
		what  string
		names []string
	}{{"added", added}, {"removed", removed}, {"changed", changed}} {
		if len(x.names) > 0 {
			parts = append(parts, x.what+" "+strings.Join(x.names, ", "))
		}
	}
	if len(parts) == 0 {
		return "reordered"
	}
	return strings.Join(parts, "; ")
}
