package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/transport"
	"github.com/prometheus/client_golang/prometheus"
)

// reloadHelp is the server's -h text on SIGHUP, and the README's.
const reloadHelp = `SIGHUP re-reads --config (flags given on the command line still win).
A file that does not validate, that changes origin-host or origin-realm
(peers know the node by them), or whose new listener cannot be opened is
refused whole: a log line names every problem (with its line), and the
server goes on as it was. Otherwise what a server can change live is
applied, and one log line says what changed: listeners added (served at
once) and removed (they stop accepting; their Diameter peers get a DPR,
their RADIUS connections 5 s to finish; datagrams read are answered),
the RADIUS shared secret, and the [[client]] tables (clients added,
removed, their sources or secrets changed): new connections and every
datagram are verified with the new secrets; a RADIUS/TCP or TLS
connection accepted before is closed at once if its client was removed,
and keeps a changed secret for a minute (a NAS mid-rotation loses
nothing), then is closed once it owes no answer. tw, the TLS files
(their content too: a certificate renewed in place) and [dedup] need a
restart: a change to them is logged and left as it runs. Reloads are
counted in aaatp_config_reloads_total{result="ok"|"refused"}, the last one
applied is aaatp_config_last_reload_success_timestamp_seconds. Without
--config, SIGHUP is logged and ignored.
`

// openedListener is a --listen URL whose socket is open, not yet served.
type openedListener struct {
	url, bound string
	ln         transport.Listener // Diameter
	rl         *radiusListener    // RADIUS
}

// openListener opens the socket of u.
func (s *server) openListener(u string) (*openedListener, error) {
	if radpeer.IsURL(u) {
		sec := radiusSecrets{clients: s.o.clients}
		if len(sec.clients) == 0 && takesSecret(u) {
			var err error
			if sec.secret, err = s.o.radiusSecret(); err != nil {
				return nil, err
			}
		}
		rl, err := s.openRADIUS(u, sec, s.topts, s.store, s.bus)
		if err != nil {
			return nil, err
		}
		if sec.secret != nil {
			s.secret = sec.secret
		}
		return &openedListener{url: u, bound: rl.bound, rl: rl}, nil
	}
	ln, err := transport.Listen(u, s.topts)
	if err != nil {
		return nil, err
	}
	ep, _ := transport.ParseURL(u)
	return &openedListener{url: u, bound: ep.Scheme + "://" + ln.Addr().String(), ln: ln}, nil
}

// abandon closes l's socket.
func (l *openedListener) abandon() {
	if l.rl != nil {
		l.rl.close(context.Background())
	} else {
		l.ln.Close()
	}
}

// serveListener serves l and counts it among the server's listeners.
func (s *server) serveListener(l *openedListener) error {
	if l.rl != nil {
		l.rl.start()
		s.lmu.Lock()
		s.rls = append(s.rls, l.rl)
		s.lmu.Unlock()
	} else {
		srv, err := peer.NewServer(l.ln, s.cfg)
		if err != nil {
			l.abandon()
			return err
		}
		srv.Wrap = s.wrap
		srv.MaxOpening, srv.MaxOpeningPerAddr = s.o.maxOpening, s.o.maxOpenPerIP
		srv.MaxConnections, srv.MaxConnectionsPerAddr = s.o.maxConns, s.o.maxConnsPerIP
		s.start(srv, s.metrics)
	}
	s.lmu.Lock()
	if s.bounds == nil {
		s.bounds = map[string]string{}
	}
	s.bounds[l.url] = l.bound
	s.lmu.Unlock()
	s.log.Info("listening", "url", l.url, "addr", l.bound)
	return nil
}

// boundURLs are the listeners' bound URLs, in --listen order.
func (s *server) boundURLs() []string {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	out := make([]string, 0, len(s.bounds))
	for _, u := range s.listenOrder {
		if b, ok := s.bounds[u]; ok {
			out = append(out, b)
		}
	}
	return out
}

// writeReady writes the --ready file: the bound URLs, one a line.
func (s *server) writeReady() {
	if s.o.ready == "" {
		return
	}
	if err := writeFileAtomic(s.o.ready, []byte(strings.Join(s.boundURLs(), "\n")+"\n")); err != nil {
		s.log.Error("writing --ready file", "err", err)
	}
}

// reload is a SIGHUP's reload of the --config file of who (the server or
// the client), the server's and both clients': apply reads the file again
// and applies it, or refuses it whole; one log line says what changed, or
// why nothing did, and stats count it.
func reload(log *slog.Logger, who, file string, stats *reloadStats, apply func() ([]string, error)) {
	if file == "" {
		log.Warn("SIGHUP: nothing to reload: the " + who + " was started without --config; restart to change its flags")
		return
	}
	changed, err := apply()
	if err != nil {
		stats.refused.Add(1)
		var ce *config.Error
		if errors.As(err, &ce) {
			log.Error("configuration reload refused: the file does not validate; running on as before",
				"file", file, "problems", len(ce.Problems), "errors", strings.Join(problemLines(ce), "; "))
			return
		}
		log.Error("configuration reload refused; running on as before", "file", file, "err", err)
		return
	}
	stats.ok.Add(1)
	stats.last.Store(time.Now().UnixNano())
	changed = slices.DeleteFunc(changed, func(c string) bool {
		w, ok := strings.CutPrefix(c, warnPrefix)
		if ok {
			log.Warn("configuration reload: "+w, "file", file)
		}
		return ok
	})
	if len(changed) == 0 {
		changed = []string{"nothing"}
	}
	log.Info("configuration reloaded", "file", file, "changed", strings.Join(changed, "; "))
}

// warnPrefix marks what an apply returns that is no change but a
// warning: logged on a line of its own, at warning level.
const warnPrefix = "warning: "

func problemLines(ce *config.Error) []string {
	out := make([]string, len(ce.Problems))
	for i, p := range ce.Problems {
		out[i] = p.String()
	}
	return out
}

// reloadConfig loads --config, checks it and applies what changed (see
// reloadHelp): base are the options from the command line alone and set
// the flags given there, which win over the file as at start. It returns
// what it changed, or why it refused the whole file (nothing changed
// then).
func (s *server) reloadConfig(base serverOptions, set map[string]bool) ([]string, error) {
	cfg, err := config.Load(s.o.config)
	if err != nil {
		return nil, err
	}
	o := base
	unused := o.applyConfig(cfg, set)
	if err := o.validate(); err != nil {
		return nil, err
	}
	switch {
	case s.o.originHost == "" && o.originHost != "":
		// Started with RADIUS listeners alone, and no Diameter identity.
		return nil, fmt.Errorf("origin-host and origin-realm cannot be set while the server runs: it started without a Diameter identity (RADIUS listeners alone); restart to apply")
	case o.originHost != s.o.originHost || o.originRealm != s.o.originRealm:
		return nil, fmt.Errorf("origin-host and origin-realm cannot change while the server runs (its peers know it by them): %s %s in the file, %s %s running; restart to apply",
			o.originHost, o.originRealm, s.o.originHost, s.o.originRealm)
	}
	var restart []string
	if o.tw != s.o.tw {
		restart = append(restart, "tw")
	}
	if o.tlsCert != s.o.tlsCert || o.tlsKey != s.o.tlsKey || o.tlsClientCA != s.o.tlsClientCA {
		restart = append(restart, "tls-cert, tls-key, tls-client-ca")
	} else if s.tlsFilesChanged() {
		restart = append(restart, "tls-cert, tls-key, tls-client-ca (the files' content)")
	}
	if o.dedup != s.o.dedup {
		restart = append(restart, "[dedup]")
	}
	// The new listeners need what only a restart changes.
	o.tw, o.tlsCert, o.tlsKey, o.tlsClientCA, o.dedup = s.o.tw, s.o.tlsCert, s.o.tlsKey, s.o.tlsClientCA, s.o.dedup
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("with what needs a restart left as it runs: %w", err)
	}

	var added, removed []string
	for _, u := range o.listen {
		if !slices.Contains(s.o.listen, u) && !slices.Contains(added, u) {
			added = append(added, u)
		}
	}
	for _, u := range s.o.listen {
		if !slices.Contains(o.listen, u) {
			removed = append(removed, u)
		}
	}
	var secret []byte
	if len(o.clients) == 0 && o.needsSecret() {
		if secret, err = o.radiusSecret(); err != nil {
			return nil, fmt.Errorf("RADIUS shared secret: %w", err)
		}
	}
	clientsChanged := !sameClients(o.clients, s.o.clients)
	rotate := len(o.clients) == 0 && secret != nil && s.secret != nil && !bytes.Equal(secret, s.secret)

	// Open every new socket before changing anything: one that cannot be
	// opened refuses the whole file.
	running, runningSecret, runningClients := s.o.secret, s.secret, s.o.clients
	s.o.secret, s.o.clients = o.secret, o.clients // the new listeners'
	var opened []*openedListener
	for _, u := range added {
		l, err := s.openListener(u)
		if err != nil {
			for _, l := range opened {
				l.abandon()
			}
			s.o.secret, s.secret, s.o.clients = running, runningSecret, runningClients
			return nil, fmt.Errorf("--listen %s: %w", u, err)
		}
		opened = append(opened, l)
	}
	s.lmu.Lock()
	s.listenOrder = append(stringList(nil), o.listen...)
	s.lmu.Unlock()

	var changed []string
	for _, l := range opened {
		if err := s.serveListener(l); err != nil {
			s.log.Error("listener added by the reload not served", "url", l.url, "err", err)
			continue
		}
		changed = append(changed, "listener added "+l.url+" ("+l.bound+")")
	}
	for _, u := range removed {
		changed = append(changed, "listener removed "+u+" ("+s.removeListener(u)+", draining)")
	}
	if rotate || clientsChanged {
		n := 0
		s.lmu.Lock()
		rls := append([]*radiusListener(nil), s.rls...)
		s.lmu.Unlock()
		for _, rl := range rls {
			// radsec:// has no secret of its own to change; its clients
			// may.
			if slices.Contains(added, rl.url) || (!takesSecret(rl.url) && !clientsChanged) {
				continue
			}
			sec := radiusSecrets{clients: o.clients}
			if len(o.clients) == 0 && takesSecret(rl.url) {
				sec.secret = secret
			}
			if err := rl.rotate(sec); err != nil {
				s.log.Error("RADIUS listener kept its old shared secret", "url", rl.url, "err", err)
				continue
			}
			n++
		}
		if secret != nil {
			s.secret = secret
		}
		if clientsChanged {
			changed = append(changed, fmt.Sprintf("RADIUS clients changed on %d listener(s): %s", n, clientChanges(runningClients, o.clients)))
		} else {
			changed = append(changed, fmt.Sprintf("RADIUS shared secret changed on %d listener(s)", n))
		}
	}
	s.o.listen = o.listen
	s.writeReady()
	if len(restart) > 0 {
		s.log.Warn("configuration reload: changes that need a restart, left as they run", "file", s.o.config, "settings", strings.Join(restart, "; "))
		changed = append(changed, "needs a restart, not applied: "+strings.Join(restart, ", "))
	}
	for _, u := range unused {
		s.log.Warn("--config: the server does not use this part of the file", "file", s.o.config, "ignored", u)
	}
	return changed, nil
}

// tlsFilesChanged reports whether the server's TLS files hold another
// certificate (or key) or client CA than those its listeners were started
// with, as when a certificate is renewed at the same path, or no longer
// load.
func (s *server) tlsFilesChanged() bool {
	running := s.topts.TLS
	if running == nil {
		return false // started without TLS files
	}
	tc, err := transport.ServerTLSConfig(s.o.tlsCert, s.o.tlsKey, s.o.tlsClientCA)
	if err != nil {
		return true
	}
	return !slices.EqualFunc(tc.Certificates[0].Certificate, running.Certificates[0].Certificate, bytes.Equal) ||
		!tc.ClientCAs.Equal(running.ClientCAs)
}

// needsSecret reports whether a listener of o takes a shared secret.
func (o *serverOptions) needsSecret() bool {
	return slices.ContainsFunc(o.listen, takesSecret)
}

// takesSecret reports whether the listener u takes a shared secret:
// radius:// and radius+tcp:// do; radsec:// uses "radsec", Diameter none.
func takesSecret(u string) bool {
	if _, err := radpeer.ParseUDPURL(u); err == nil {
		return true
	}
	ep, err := radpeer.ParseURL(u)
	return err == nil && ep.Scheme == radpeer.SchemeTCP
}

// removeListener takes the listener of u out of the server and drains it
// in the background (closePeers waits for it); it returns its bound URL.
func (s *server) removeListener(u string) string {
	s.lmu.Lock()
	bound := s.bounds[u]
	delete(s.bounds, u)
	var srv *peer.Server
	var rl *radiusListener
	for i, x := range s.rls {
		if x.url == u {
			rl = x
			s.rls = slices.Delete(s.rls, i, i+1)
			break
		}
	}
	if rl == nil {
		for i, x := range s.srvs {
			if x.Addr().String() == strings.SplitN(bound, "://", 2)[1] {
				srv = x
				s.srvs = slices.Delete(s.srvs, i, i+1)
				break
			}
		}
	}
	s.lmu.Unlock()
	s.drains.Add(1)
	go func() {
		defer s.drains.Done()
		switch {
		case rl != nil:
			rl.drain(shutdownBudget) // a stuck handler for at most that
			s.keepRemoved(rl.report())
		case srv != nil:
			ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
			defer cancel()
			if err := srv.Disconnect(ctx, s.o.cause); err != nil {
				s.log.Debug("close", "addr", bound, "err", err)
			}
		}
		s.log.Info("listener removed: drained", "url", u, "addr", bound)
	}()
	return bound
}

// keepRemoved keeps the final counters of a removed RADIUS listener for
// the report.
func (s *server) keepRemoved(r radiusListenerReport) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if len(s.removedRADIUS) >= maxRemovedReports {
		s.removedRADIUS = s.removedRADIUS[1:]
	}
	s.removedRADIUS = append(s.removedRADIUS, r)
}

// maxRemovedReports bounds the removed RADIUS listeners whose counters
// the report keeps: the latest ones.
const maxRemovedReports = 16

// reloadStats counts the reloads.
type reloadStats struct {
	ok, refused atomic.Uint64
	last        atomic.Int64 // UnixNano of the last one applied (of the start before)
	once        sync.Once
}

// Reload metrics.
const (
	metricReloads    = "aaatp_config_reloads_total"
	metricLastReload = "aaatp_config_last_reload_success_timestamp_seconds"
)

// exportTo adds the reload counters to m (nil: none); the last reload is
// the start until one is applied.
func (r *reloadStats) exportTo(m *status.Metrics, started time.Time) {
	r.last.CompareAndSwap(0, started.UnixNano())
	reg := m.Registry()
	if reg == nil {
		return
	}
	for _, res := range []struct {
		name string
		n    *atomic.Uint64
	}{{"ok", &r.ok}, {"refused", &r.refused}} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        metricReloads,
			Help:        "Reloads of --config on SIGHUP, by result: ok (applied) or refused (the file did not validate or changed the node's identity; nothing applied).",
			ConstLabels: prometheus.Labels{"result": res.name},
		}, func() float64 { return float64(res.n.Load()) }))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metricLastReload,
		Help: "When --config was last applied: at start, then at each reload applied (Unix time, seconds).",
	}, func() float64 { return float64(r.last.Load()) / 1e9 }))
}
