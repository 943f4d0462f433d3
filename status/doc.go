// Package status is the live view of an aaatp node: a status page,
// the same data as JSON, and Prometheus metrics, all from one http.Handler.
//
// The node supplies a Source, a function returning a Snapshot: its role and
// identity, one row per peer (watchdog state and time in state, policy
// state, pending, sent, answered, Tw, last DWA), the failover-event table of
// RFC 3539 3.4.2 [5], queue depths and alarms, and totals. ClientSnapshot
// builds a client's from a client.Client (Diameter and RADIUS servers
// alike); PeerRow, PeerRows, ServerPeers and DedupTotals build a server's
// rows and totals from what package peer and dedup.Wrap report.
//
// Metrics holds the Prometheus collectors on a registry of its own (never
// the global one). Watch feeds it from a peer.Bus (watchdog states and
// transitions), WatchClient from a client.Bus (the same for a client's
// peers, and its failovers and requests moved); WrapHandler counts the requests
// a server answers, by peer and Result-Code class, and their latency; the
// remaining methods are for what only the node knows.
//
// Every series names a peer the same way, in its "peer" label (and a
// failover's "from" and "to"): a client's server by its configured name
// (client.PeerSpec.Name, by default its URL), the one thing an operator
// chose and that stays the same across restarts and reconnections; a
// server's client by its Origin-Host (a server has no configuration of its
// clients), a RADIUS server's NAS by the name of its configured client
// (radpeer.NASStats.Name), else by its address. A name is one peer: a
// server's Diameter client whose Origin-Host is also a NAS's name has the
// counts of both summed under it. aaatp_peer_info joins that name with
// the peer's URL, protocol ("diameter,radius" for such a name) and
// Origin-Host. Label values come only from configuration and fixed sets,
// but for a server's peers, whose series are dropped when they go, and
// the Origin-Host of aaatp_peer_info, cut to 255 bytes. Every method of a
// nil *Metrics is a no-op, so a node running without --status can call
// them unconditionally.
//
// Handler serves:
//
//	/             the HTML page (html/template, no external assets)
//	/status.json  the Snapshot as JSON
//	/metrics      Prometheus text exposition (when WithMetrics is given)
//
// The page is rendered complete on the server, so it is readable without
// JavaScript (a <noscript> meta refresh reloads it every 5 s); with
// JavaScript, a small inline script fetches /status.json every second and
// rewrites the tables in place, without reloading the page.
//
// ListenAndServe runs the handler on an address (port 0 picks a free one)
// until a context is done.
//
// The Handler, the Metrics' methods and the snapshot builders are safe for
// concurrent use; a Source must be too, as the Handler calls it from the
// HTTP server's goroutines.
package status
