package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/status"
)

// clientReloadHelp is the client's -h text on SIGHUP, and the README's.
const clientReloadHelp = `SIGHUP re-reads --config (flags given on the command line still win) and
applies its peers while the requests flow: a peer added is dialed; a peer
removed takes no new request at once, answers those in flight, then closes
(DPR); a peer whose weight changed keeps its connection and the balancer's
table follows (conversations in progress keep their servers); a peer whose
other settings changed (URL, secret, tw, TLS files, limits) is replaced:
the old one drains as a removed one does, then the new one is dialed.
--secret-file is read again, as the server does: a new content is the new
secret of the servers that take it, which are replaced. Peers are matched
by name. A file that does not validate is refused whole with a log line
naming every problem, and the client runs on as it was. What cannot change
live (origin-host and realm, mode, algorithm, the top-level tw, TLS files
(their content too) and limits, the default request deadline of the
longest tw, the load: rate, duration...) is named in the log line and left
as it runs. With --peer on the command line the
file's peers are not used, and without --config SIGHUP is logged and
ignored. Reloads are counted as the server's are.
`

// watchReload applies --config, file read again, with apply at each SIGHUP
// from ch until stop is called: one log line says what changed, or why
// nothing did, and the reloads are counted in metrics. With --peer on the
// command line (fixedPeers), the file's peers are not used: nothing
// changes.
func watchReload(ch <-chan os.Signal, log *slog.Logger, file string, fixedPeers bool, metrics *status.Metrics, apply func(*config.Config) ([]string, error)) (stop func()) {
	stats := &reloadStats{}
	stats.exportTo(metrics, time.Now())
	if ch == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ch:
				reload(log, "client", file, stats, func() ([]string, error) {
					if fixedPeers {
						return []string{"nothing: the peers are the command line's --peer"}, nil
					}
					cfg, err := config.Load(file)
					if err != nil {
						return nil, err
					}
					return apply(cfg)
				})
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// applyPeers hands specs to c and describes what changed, with the
// settings that changed in the file but need a restart (restart), and
// forgets the metrics of the peers removed.
func applyPeers(c *client.Client, specs []client.PeerSpec, restart []string, metrics *status.Metrics) ([]string, error) {
	ch, err := c.SetPeers(context.Background(), specs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, part := range []struct {
		what  string
		names []string
	}{{"added", ch.Added}, {"removed (draining)", ch.Removed}, {"replaced", ch.Replaced}, {"reweighted", ch.Reweighted}} {
		if len(part.names) > 0 {
			out = append(out, part.what+": "+strings.Join(part.names, ", "))
		}
	}
	for _, name := range ch.Removed {
		metrics.ForgetPeer(name)
	}
	if len(restart) > 0 {
		out = append(out, "needs a restart, not applied: "+strings.Join(restart, ", "))
	}
	return out, nil
}

// setting is one setting that needs a restart: its name, its value
// running and its value in the file read again.
type setting struct{ name, running, file string }

// differs names the settings whose two values differ.
func differs(settings []setting) []string {
	var out []string
	for _, s := range settings {
		if s.running != s.file {
			out = append(out, s.name)
		}
	}
	return out
}

// reloadPeers is the Diameter client's reload of run c: --config read
// again over the command line's options (base, with the flags set there).
func (r *diameterRequests) reloadPeers(c *loadgen, cfg *config.Config, base clientOptions, set map[string]bool) ([]string, error) {
	specs, restart, warnings, err := r.reloadSpecs(cfg, base, set)
	if err != nil {
		return nil, err
	}
	c.peersEver() // those about to be removed keep their counts in the report
	out, err := applyPeers(c.cl, specs, restart, c.metrics)
	return append(out, warnings...), err
}

// reloadSpecs are the Diameter client's peers from cfg, read over the
// command line's options (base, with the flags set there), and the
// settings that changed but need a restart, and warnings for the log.
func (r *diameterRequests) reloadSpecs(cfg *config.Config, base clientOptions, set map[string]bool) (specs []client.PeerSpec, restart, warnings []string, err error) {
	o := base
	o.peers, o.weights = slices.Clone(base.peers), slices.Clone(base.weights)
	o.waitPeers = 0 // the start's: the file may now have fewer peers
	if _, err := o.applyConfig(cfg, set); err != nil {
		return nil, nil, nil, err
	}
	o.ownOverRunning(cfg, set, &r.o.loadOptions)
	warnings = o.staleWeights()
	if err := o.validate(); err != nil {
		return nil, nil, nil, err
	}
	specs, err = o.peerSpecs(nil)
	if err != nil {
		return nil, nil, nil, err
	}
	if !r.o.throttled() {
		// Started without any limit, the client has no throttle: it
		// costs every request a queue and a lock, so it is not made for
		// a reload that might come. A peer's own limits need one.
		for _, s := range specs {
			if s.Throttle != nil {
				return nil, nil, nil, fmt.Errorf("peer %s (%s): throttle limits on a client started without any: needs a restart", s.Name, peerLine(cfg, s.URL))
			}
		}
	}
	restart = differs([]setting{
		{"origin-host", r.o.originHost, o.originHost},
		{"origin-realm", r.o.originRealm, o.originRealm},
		{"destination-realm", r.o.destRealm, o.destRealm},
		{"mode", r.o.mode, o.mode},
		{"algorithm", r.o.algorithm, o.algorithm},
		{"tw", fmt.Sprint(r.o.tw), fmt.Sprint(o.tw)},
		{"tls-ca, tls-cert, tls-key", r.o.tlsSum, o.tlsFilesSum()}, // names and contents
		{"max-rate", fmt.Sprint(r.o.maxRate), fmt.Sprint(o.maxRate)},
		{"max-outstanding", fmt.Sprint(r.o.maxOutstanding), fmt.Sprint(o.maxOutstanding)},
	})
	restart = append(restart, r.deadlineFor(o.own, base.timeout == 0)...)
	return specs, restart, warnings, nil
}

// deadlineFor checks the running request deadline against a reload's
// peers (own: their own settings; the others take the running tw). The
// deadline is fixed at start; without --timeout (derived) it is the
// failover detection of the longest tw plus the answer's time, and a
// peer's longer tw, which would lengthen it, needs a restart. (Given or
// derived, a deadline shorter than a peer's failover detection is warned
// of by client.SetPeers, as client.New does at start.)
func (r *diameterRequests) deadlineFor(own map[string]ownSetting, derived bool) (restart []string) {
	tw := r.o.tw
	for _, s := range own {
		tw = max(tw, s.tw)
	}
	if d := client.FailoverDetection(tw) + peer.DefaultRequestTimeout; derived && d > r.o.timeout {
		restart = append(restart, fmt.Sprintf("timeout (its default for the longest tw, %v, is %v; running %v)", tw, d, r.o.timeout))
	}
	return restart
}

// peerLine is FILE:LINE of the [[peer]] of url in cfg.
func peerLine(cfg *config.Config, url string) string {
	for _, p := range cfg.Peers {
		if p.URL == url {
			return fmt.Sprintf("%s:%d", cfg.File, p.Line)
		}
	}
	return cfg.File
}

// reloadPeers is the RADIUS client's reload: --config read again over
// the command line's options.
func (o *radiusClientOptions) reloadPeers(cfg *config.Config, c *client.Client, metrics *status.Metrics) ([]string, error) {
	n := *o.base
	n.peers, n.weights, n.acctPeers = slices.Clone(n.peers), slices.Clone(n.weights), slices.Clone(n.acctPeers)
	var err error
	if n.secrets, err = n.applyConfig(cfg, o.set); err != nil {
		return nil, err
	}
	n.ownOverRunning(cfg, o.set, &o.loadOptions)
	warnings := n.staleWeights()
	n.waitPeers = 0 // the start's: the file may now have fewer servers
	if err := n.validate(); err != nil {
		return nil, err
	}
	if n.stream != o.stream || n.radsec() != o.radsec() {
		return nil, fmt.Errorf("the servers' protocol changed (%s:// to %s://): restart to apply", scheme(o.peers[0]), scheme(n.peers[0]))
	}
	// The servers without a secret of their own (all of them with
	// --secret-file given) sign with the shared one: --secret-file's, read
	// again as the server does, since its content may have been rotated.
	// Changed, it is theirs in their specs, which replaces them.
	shared, err := n.sharedSecret()
	if err != nil {
		return nil, fmt.Errorf("RADIUS shared secret: %w", err)
	}
	if shared != nil && !bytes.Equal(shared, o.secret) {
		if n.secrets == nil {
			n.secrets = make(map[string][]byte, len(n.peers))
		}
		for _, u := range n.peers {
			if n.secrets[u] == nil {
				n.secrets[u] = shared
			}
		}
	}
	specs, err := n.peerSpecs(n.acctPeers)
	if err != nil {
		return nil, err
	}
	restart := differs([]setting{
		{"mode", o.mode, n.mode},
		{"algorithm", o.algorithm, n.algorithm},
		{"tw", fmt.Sprint(o.tw), fmt.Sprint(n.tw)},
		{"max-conns", fmt.Sprint(o.maxConns), fmt.Sprint(n.maxConns)},
		{"timeout, retries", fmt.Sprint(o.timeout, o.retries), fmt.Sprint(n.timeout, n.retries)},
		{"down-timeout, hold-down", fmt.Sprint(o.downTimeout, o.holdDown), fmt.Sprint(n.downTimeout, n.holdDown)},
		{"tls-ca, tls-cert, tls-key", o.tlsSum, n.tlsFilesSum()}, // names and contents
		{"max-rate, max-rate-acct, max-outstanding", fmt.Sprint(o.maxRate, o.maxRateAcct.of(o.maxRate), o.maxOutstanding), fmt.Sprint(n.maxRate, n.maxRateAcct.of(n.maxRate), n.maxOutstanding)},
	})
	out, err := applyPeers(c, specs, restart, metrics)
	return append(out, warnings...), err
}

// scheme is a URL's scheme, "" if none.
func scheme(u string) string {
	s, _, _ := strings.Cut(u, "://")
	return s
}
