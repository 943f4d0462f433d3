package status

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"
	"time"
)

// DefaultPollInterval is how often the page's script fetches /status.json.
const DefaultPollInterval = time.Second

// fallbackRefresh is the <noscript> meta refresh, in seconds.
const fallbackRefresh = 5

// Option configures Handler.
type Option struct{ apply func(*handler) }

// WithMetrics serves m at /metrics. Before each scrape the handler takes a
// Snapshot from the Source and passes it to m.Sync, so the per-peer gauges
// (watchdog state, pending) and queue gauges are current without the node
// setting them.
func WithMetrics(m *Metrics) Option {
	return Option{func(h *handler) { h.metrics = m }}
}

// WithPollInterval sets how often the page refreshes its data (default
// DefaultPollInterval; at least 100 ms).
func WithPollInterval(d time.Duration) Option {
	return Option{func(h *handler) { h.poll = max(d, 100*time.Millisecond) }}
}

type handler struct {
	src     Source
	metrics *Metrics
	poll    time.Duration
	mux     *http.ServeMux
}

// Handler returns the handler of the status page (/), /status.json and,
// with WithMetrics, /metrics. Any other path is 404. Mount it under a
// prefix with http.StripPrefix: the page's script fetches status.json
// relative to the page.
func Handler(src Source, opts ...Option) http.Handler {
	h := &handler{src: src, poll: DefaultPollInterval, mux: http.NewServeMux()}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(h)
		}
	}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /status.json", h.json)
	if h.metrics != nil {
		h.mux.Handle("GET /metrics", h.metrics.syncingHandler(h.snapshot))
	}
	return h.mux
}

func (h *handler) snapshot() Snapshot {
	s := h.src.Snapshot()
	s.complete(time.Now())
	return s
}

func (h *handler) json(w http.ResponseWriter, r *http.Request) {
	b, err := json.MarshalIndent(h.snapshot(), "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.Write(append(b, '\n'))
}

// pageData is what the template renders.
type pageData struct {
	S       Snapshot
	PollMS  int64
	Refresh int
	Script  template.JS
	Style   template.CSS
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	d := pageData{S: h.snapshot(), PollMS: h.poll.Milliseconds(), Refresh: fallbackRefresh,
		Script: template.JS(pageScript), Style: template.CSS(pageStyle)}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, d); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", pageCSP)
	w.Write(buf.Bytes())
}

// pageCSP allows exactly the page's own inline script and style, and
// fetches from its own origin: nothing else loads.
var pageCSP = "default-src 'none'; script-src '" + cspHash(pageScript) + "'; style-src '" +
	cspHash(pageStyle) + "'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func cspHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// fmtDur formats a duration in milliseconds the way the page's script
// does (fmtDur there): 850ms, 6.4s, 3m07s, 2h05m.
func fmtDur(ms int64) string {
	if ms < 0 {
		ms = 0
	}
	switch {
	case ms < 1000:
		return strconv.FormatInt(ms, 10) + "ms"
	case ms < 60_000:
		t := ms / 100
		return strconv.FormatInt(t/10, 10) + "." + strconv.FormatInt(t%10, 10) + "s"
	case ms < 3_600_000:
		s := ms / 1000
		return strconv.FormatInt(s/60, 10) + "m" + pad2(s%60) + "s"
	}
	m := ms / 60_000
	return strconv.FormatInt(m/60, 10) + "h" + pad2(m%60) + "m"
}

func pad2(n int64) string {
	if n < 10 {
		return "0" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// fmtClock formats t as the script's fmtClock: UTC time of day with
// milliseconds.
func fmtClock(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("15:04:05.000") + "Z"
}

var funcs = template.FuncMap{
	"dur":   func(d time.Duration) string { return fmtDur(d.Milliseconds()) },
	"ms":    fmtDur,
	"clock": fmtClock,
	// ago formats how long before the snapshot t was; "never" for zero.
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return fmtDur(now.Sub(t).Milliseconds()) + " ago"
	},
	"to": func(s string) string {
		if s == "" {
			return "(none: waiting)"
		}
		return s
	},
	"newestFirst": func(n int) []int {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = n - 1 - i
		}
		return idx
	},
	"alarm": func(b bool) string {
		if b {
			return "ALARM"
		}
		return "ok"
	},
}

var pageTemplate = template.Must(template.New("page").Funcs(funcs).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<noscript><meta http-equiv="refresh" content="{{.Refresh}}"></noscript>
<title>aaatp {{.S.Role}} {{or .S.Identity.OriginHost .S.Identity.NASIdentifier}}</title>
<style>{{.Style}}</style>
</head>
<body data-poll-ms="{{.PollMS}}">
<header>
<h1>aaatp <span id="role">{{.S.Role}}</span> <span id="host">{{or .S.Identity.OriginHost .S.Identity.NASIdentifier}}</span></h1>
<p class="meta">realm <b>{{.S.Identity.OriginRealm}}</b>
{{- range .S.Identity.Listen}} &middot; listening on <b>{{.}}</b>{{end}}
{{- range $k, $v := .S.Identity.Info}} &middot; {{$k}} <b>{{$v}}</b>{{end}}
{{- if not .S.Identity.Started.IsZero}} &middot; up <span id="uptime">{{ago .S.Time .S.Identity.Started}}</span>{{end}}
&middot; <span id="live" class="live">as of {{clock .S.Time}}</span></p>
</header>

<section>
<h2>Totals</h2>
<dl id="totals">
<div><dt>sent</dt><dd data-total="sent">{{.S.Totals.Sent}}</dd></div>
<div><dt>received</dt><dd data-total="received">{{.S.Totals.Received}}</dd></div>
<div><dt>answered</dt><dd data-total="answered">{{.S.Totals.Answered}}</dd></div>
<div><dt>failed</dt><dd data-total="failed">{{.S.Totals.Failed}}</dd></div>
<div><dt>pending</dt><dd data-total="pending">{{.S.Totals.Pending}}</dd></div>
<div><dt>moved</dt><dd data-total="moved">{{.S.Totals.Moved}}</dd></div>
<div><dt>retransmitted</dt><dd data-total="retransmitted">{{.S.Totals.Retransmitted}}</dd></div>
<div><dt>duplicates</dt><dd data-total="duplicates">{{.S.Totals.Duplicates}}</dd></div>
</dl>
</section>

<section>
<h2>Peers</h2>
<table id="peers">
<thead><tr><th>peer</th><th>server</th><th>watchdog</th><th>in state</th><th>policy</th><th class="n">pending</th><th class="n">unanswered</th><th class="n">sent</th><th class="n">retransmitted</th><th class="n">answered</th><th class="n">moved out</th><th class="n">recycled</th><th>stray replies</th><th class="n">Tw</th><th>last DWA</th></tr></thead>
<tbody>
{{- range .S.Peers}}
<tr class="peer" data-peer="{{.Peer}}"><td class="name">{{.Peer}}</td><td>{{.Server}}</td><td class="state s-{{.State}}">{{.State}}</td><td>{{ms .InStateMS}}</td><td class="policy">{{.Policy}}</td><td class="n">{{.Pending}}</td><td class="n">{{if .Unanswered}}{{.Unanswered}}{{end}}</td><td class="n">{{.Sent}}</td><td class="n">{{if .Retransmissions}}{{.Retransmissions}}{{end}}</td><td class="n">{{.Answered}}</td><td class="n">{{.MovedOut}}</td><td class="n">{{if .RecycledConns}}{{.RecycledConns}}{{end}}</td><td class="stray">{{.Stray}}</td><td class="n">{{dur .Tw}}</td><td>{{ago $.S.Time .LastDWA}}</td></tr>
{{- else}}
<tr class="empty"><td colspan="15">no peers</td></tr>
{{- end}}
</tbody>
</table>
</section>

<section>
<h2>Failover events <small id="failover-count">({{len .S.Failovers}} kept of {{.S.FailoversTotal}})</small></h2>
<table id="failovers">
<thead><tr><th>time (UTC)</th><th>from</th><th>to</th><th class="n">moved</th><th>reason</th></tr></thead>
<tbody>
{{- range $i := newestFirst (len .S.Failovers)}}{{with index $.S.Failovers $i}}
<tr class="failover"><td>{{clock .Time}}</td><td>{{.From}}</td><td>{{to .To}}</td><td class="n">{{.Moved}}</td><td>{{.Reason}}</td></tr>
{{- end}}{{else}}
<tr class="empty"><td colspan="5">no failover</td></tr>
{{- end}}
</tbody>
</table>
</section>

<section>
<h2>Queues</h2>
<table id="queues">
<thead><tr><th>server</th><th class="n">depth</th><th>alarm</th></tr></thead>
<tbody>
{{- range .S.Queues}}
<tr class="queue" data-server="{{.Server}}"><td>{{.Server}}</td><td class="n">{{.Depth}}</td><td class="alarm-{{.Alarm}}">{{alarm .Alarm}}</td></tr>
{{- else}}
<tr class="empty"><td colspan="3">no queues</td></tr>
{{- end}}
</tbody>
</table>
</section>
<footer><a href="status.json">status.json</a> &middot; <a href="metrics">metrics</a></footer>
<script>{{.Script}}</script>
</body>
</html>
`

const pageStyle = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin:0}h2{font-size:1.1em;margin:1.2em 0 .4em}
.meta{color:#555;margin:.3em 0}
table{border-collapse:collapse;background:#fff}
th,td{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left;white-space:nowrap}
th{background:#eee;font-weight:600}
.n{text-align:right;font-variant-numeric:tabular-nums}
td.empty,tr.empty td{color:#888;font-style:italic}
.state{font-weight:700;border-radius:3px}
.s-OKAY{background:#c8f0c8;color:#145214}
.s-SUSPECT{background:#ffe08a;color:#6b4a00}
.s-DOWN{background:#f6b3b3;color:#7a0d0d}
.s-REOPEN{background:#bcd9ff;color:#0b3d7a}
.s-INITIAL{background:#e2e2e2;color:#444}
.alarm-true{background:#f6b3b3;color:#7a0d0d;font-weight:700}
dl{display:flex;flex-wrap:wrap;gap:.4em 1.5em;margin:0}
dl div{display:flex;gap:.4em}dt{color:#555}dd{margin:0;font-weight:600;font-variant-numeric:tabular-nums}
.live.stale{color:#a00;font-weight:700}
footer{margin-top:1.5em;color:#666}
`

// pageScript fetches status.json every data-poll-ms and rewrites the
// tables in place. Text goes in with textContent only. Its formatting
// functions mirror fmtDur and fmtClock.
const pageScript = `
(function () {
  "use strict";
  var poll = parseInt(document.body.getAttribute("data-poll-ms"), 10) || 1000;
  function pad2(n) { return n < 10 ? "0" + n : "" + n; }
  function fmtDur(ms) {
    ms = Math.max(0, Math.floor(ms));
    if (ms < 1000) return ms + "ms";
    if (ms < 60000) { var t = Math.floor(ms / 100); return Math.floor(t / 10) + "." + (t % 10) + "s"; }
    if (ms < 3600000) { var s = Math.floor(ms / 1000); return Math.floor(s / 60) + "m" + pad2(s % 60) + "s"; }
    var m = Math.floor(ms / 60000); return Math.floor(m / 60) + "h" + pad2(m % 60) + "m";
  }
  function parse(t) { return t ? Date.parse(t) : NaN; }
  function fmtClock(t) { var v = parse(t); return isNaN(v) ? "" : new Date(v).toISOString().substring(11, 23) + "Z"; }
  function ago(now, t) { var v = parse(t); return isNaN(v) || v <= 0 ? "never" : fmtDur(now - v) + " ago"; }
  function row(cls, cells) {
    var tr = document.createElement("tr");
    if (cls) tr.className = cls;
    cells.forEach(function (c) {
      var td = document.createElement("td");
      if (typeof c === "object") { td.textContent = c.t; if (c.c) td.className = c.c; if (c.span) td.colSpan = c.span; }
      else td.textContent = c;
      tr.appendChild(td);
    });
    return tr;
  }
  function fill(id, rows, empty, span) {
    var tb = document.querySelector("#" + id + " tbody");
    var frag = document.createDocumentFragment();
    rows.forEach(function (r) { frag.appendChild(r); });
    if (rows.length === 0) frag.appendChild(row("empty", [{ t: empty, span: span }]));
    tb.replaceChildren(frag);
  }
  // stray is StrayReplies.String: each count above zero with its reason.
  function stray(r) {
    if (!r) return "";
    return ["late", "duplicate", "unmatched", "bad", "bad_auth", "no_ma"].filter(function (k) { return r[k]; })
      .map(function (k) { return k + " " + r[k]; }).join(", ");
  }
  function render(s) {
    var now = parse(s.time);
    fill("peers", (s.peers || []).map(function (p) {
      var tr = row("peer", [{ t: p.peer, c: "name" }, p.server || "", { t: p.state, c: "state s-" + p.state },
        fmtDur(p.in_state_ms), { t: p.policy || "", c: "policy" }, { t: p.pending, c: "n" }, { t: p.unanswered || "", c: "n" }, { t: p.sent, c: "n" }, { t: p.retransmissions || "", c: "n" },
        { t: p.answered, c: "n" }, { t: p.moved_out, c: "n" }, { t: p.recycled_conns || "", c: "n" }, { t: stray(p.stray_replies), c: "stray" },
        { t: fmtDur(p.tw_ns / 1e6), c: "n" }, ago(now, p.last_dwa)]);
      tr.setAttribute("data-peer", p.peer);
      return tr;
    }), "no peers", 15);
    var fo = (s.failovers || []).slice().reverse();
    fill("failovers", fo.map(function (f) {
      return row("failover", [fmtClock(f.time), f.from_peer, f.to_peer || "(none: waiting)", { t: f.moved, c: "n" }, f.reason]);
    }), "no failover", 5);
    document.getElementById("failover-count").textContent = "(" + fo.length + " kept of " + s.failovers_total + ")";
    fill("queues", (s.queues || []).map(function (q) {
      var tr = row("queue", [q.server, { t: q.depth, c: "n" }, { t: q.alarm ? "ALARM" : "ok", c: "alarm-" + q.alarm }]);
      tr.setAttribute("data-server", q.server);
      return tr;
    }), "no queues", 3);
    var tot = s.totals || {};
    document.querySelectorAll("[data-total]").forEach(function (dd) {
      var v = tot[dd.getAttribute("data-total")];
      dd.textContent = v === undefined ? "" : v;
    });
    var up = document.getElementById("uptime");
    if (up && s.identity && s.identity.started) up.textContent = ago(now, s.identity.started);
    var live = document.getElementById("live");
    live.textContent = "live, as of " + fmtClock(s.time);
    live.className = "live";
  }
  function stale(err) {
    var live = document.getElementById("live");
    live.textContent = "not updating: " + err;
    live.className = "live stale";
  }
  function tick() {
    fetch("status.json", { cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(render)
      .catch(function (e) { stale(e && e.message ? e.message : e); })
      .then(function () { setTimeout(tick, poll); });
  }
  setTimeout(tick, poll);
})();
`
