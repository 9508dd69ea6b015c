"""The status page served at ``GET /`` on the health address: one self-contained HTML document.

No external assets (no fonts, scripts or styles from elsewhere: the page
works air-gapped and its content security policy allows nothing else). Its
script fetches ``/status`` (with ``Authorization: Bearer`` from the URL's
``#token=…`` fragment, which never reaches a server log), renders the same
tables as ``agentd status`` and a chart of wakes and model calls per minute
over the last hour, and refreshes itself every :data:`REFRESH_MS`. All text
from the document is inserted with ``textContent``, never as markup: URIs
and errors come from outside. The layout is one column on a phone.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PAGE", "REFRESH_MS"]

REFRESH_MS: Final = 2000
"""How often the page re-reads ``/status``: live enough to watch a wake, a request per 2 s at most."""

PAGE: Final = (
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>agentd status</title>
<style>
:root{color-scheme:light dark;--fg:#1b1f24;--bg:#fff;--mute:#6a737d;--line:#e1e4e8;--ok:#1a7f37;--bad:#cf222e;--acc:#0969da;--acc2:#bf8700}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--mute:#8b949e;--line:#30363d;--ok:#3fb950;--bad:#f85149;--acc:#58a6ff;--acc2:#d29922}}
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;padding:12px;color:var(--fg);background:var(--bg)}
h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px}
#head{color:var(--mute)}#head b{color:var(--fg)}
.ok{color:var(--ok)}.bad{color:var(--bad)}.mute{color:var(--mute)}
.wrap{overflow-x:auto}table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:3px 8px;border-bottom:1px solid var(--line);white-space:nowrap;vertical-align:top}
th{color:var(--mute);font-weight:600}td.wide{white-space:normal;word-break:break-all;min-width:12em}
#error{display:none;padding:6px 8px;border:1px solid var(--bad);color:var(--bad);margin:8px 0}
svg{width:100%;max-width:720px;height:120px;display:block}
.legend span{margin-right:12px}.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
@media (max-width:600px){body{padding:8px;font-size:13px}th,td{padding:2px 5px}}
</style></head>
<body data-updates="0">
<h1>agentd <span id="mode"></span></h1>
<div id="head">loading…</div>
<div id="error"></div>
<h2>Activity, last hour</h2>
<div class="legend"><span><i class="sw" style="background:var(--acc)"></i>wakes/min</span><span><i class="sw" style="background:var(--acc2)"></i>model calls/min</span></div>
<svg id="chart" viewBox="0 0 720 120" preserveAspectRatio="none" role="img" aria-label="wakes and model calls per minute"></svg>
<h2>Agents</h2><div class="wrap"><table id="agents"></table></div>
<h2>Finished agents</h2><div class="wrap"><table id="finished"></table></div>
<h2>Routes</h2><div class="wrap"><table id="routes"></table></div>
<h2>Servers</h2><div class="wrap"><table id="servers"></table></div>
<h2>Budget</h2><div id="budget"></div>
<h2>Watches</h2><div class="wrap"><table id="watches"></table></div>
<h2>Recent routing decisions</h2><div class="wrap"><table id="recent"></table></div>
<script>
"use strict";
const REFRESH = """
    + str(REFRESH_MS)
    + """;
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const $ = (id) => document.getElementById(id);
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; }
function dur(s) { if (s === null || s === undefined) return "-"; s = Math.max(0, Math.round(s)); const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), x = s % 60; return h ? h + "h" + String(m).padStart(2, "0") + "m" : m ? m + "m" + String(x).padStart(2, "0") + "s" : x + "s"; }
function ago(iso, now) { return iso ? dur((Date.parse(now) - Date.parse(iso)) / 1000) + " ago" : "-"; }
function usd(v) { return typeof v === "number" ? "$" + v.toFixed(v < 0.01 ? 6 : 4) : String(v); }
function table(id, heads, rows, key) {
  const t = $(id); t.replaceChildren();
  const hr = el("tr"); heads.forEach((h) => hr.appendChild(el("th", h))); t.appendChild(hr);
  if (!rows.length) { const r = el("tr"); const c = el("td", "none", "mute"); c.colSpan = heads.length; r.appendChild(c); t.appendChild(r); return; }
  rows.forEach((row) => { const r = el("tr"); if (key) r.dataset[key[0]] = row[0]; row[1].forEach((v, i) => r.appendChild(el("td", v, i === row[2] ? "wide" : ""))); t.appendChild(r); });
}
function tree(list) {
  const ids = new Set(list.map((a) => a.id)), kids = new Map(), roots = [], out = [], seen = new Set();
  list.forEach((a) => { if (a.parent && ids.has(a.parent)) { if (!kids.has(a.parent)) kids.set(a.parent, []); kids.get(a.parent).push(a); } else roots.push(a); });
  const stack = roots.slice().reverse();
  while (stack.length) { const a = stack.pop(); if (seen.has(a)) continue; seen.add(a); out.push(a); (kids.get(a.id) || []).slice().reverse().forEach((k) => stack.push(k)); }
  return out;
}
function name(a) { const d = Number.isInteger(a.depth) ? Math.min(a.depth, 16) : 0; return d > 0 ? "\u00a0\u00a0".repeat(d - 1) + "\u2514 " + a.id : a.id; }
function doing(d) { if (!d) return "-"; if (d.kind === "tool") return "tool " + d.tool + " " + dur(d.since_s) + (d.arguments !== undefined ? " " + JSON.stringify(d.arguments) : ""); if (d.kind === "model") return "model call " + dur(d.since_s); return d.kind; }
function chart(mins) {
  const svg = $("chart"), ns = "http://www.w3.org/2000/svg"; svg.replaceChildren();
  const max = Math.max(1, ...mins.map((m) => Math.max(m.wakes, m.model_calls))), w = 720 / Math.max(1, mins.length);
  mins.forEach((m, i) => {
    [[m.wakes, "var(--acc)", 0], [m.model_calls, "var(--acc2)", 1]].forEach(([v, c, k]) => {
      if (!v) return; const r = document.createElementNS(ns, "rect"); const h = 110 * v / max;
      r.setAttribute("x", i * w + k * w / 2); r.setAttribute("width", Math.max(1, w / 2 - 1)); r.setAttribute("y", 115 - h); r.setAttribute("height", h); r.setAttribute("fill", c);
      const tt = document.createElementNS(ns, "title"); tt.textContent = m.minute + ": " + m.wakes + " wakes, " + m.model_calls + " model calls"; r.appendChild(tt); svg.appendChild(r);
    });
  });
  const base = document.createElementNS(ns, "line"); base.setAttribute("x1", 0); base.setAttribute("x2", 720); base.setAttribute("y1", 115); base.setAttribute("y2", 115); base.setAttribute("stroke", "var(--line)"); svg.appendChild(base);
}
function render(s) {
  $("mode").textContent = s.mode + " · " + s.version;
  const head = $("head"); head.replaceChildren();
  const ready = el("b", s.ready ? "ready" : "not ready: " + s.ready_reason, s.ready ? "ok" : "bad");
  head.append(ready, " · ", s.phase, " · up ", dur(s.uptime_s), " · pid ", String(s.pid), " · ", String(s.agents.length), " running · cost ", usd(s.budget.cost_usd), " · ", String(s.budget.tokens), " tokens", " · updated ", new Date(s.now).toLocaleTimeString());
  table("agents", ["agent", "route", "woken by", "doing", "phase", "age", "steps", "tokens", "cost"],
    tree(s.agents).map((a) => [a.id, [name(a), a.route || a.role, (a.woken_by.join(" ") || "-"), doing(a.doing), a.phase, dur(a.age_s), a.steps, a.tokens, usd(a.cost_usd)], 2]), ["agent"]);
  table("finished", ["agent", "route", "woken by", "status", "ended", "took", "steps", "tokens", "cost"],
    tree((s.finished || []).slice().reverse()).map((a) => [a.id, [name(a), a.route || a.role, (a.woken_by.join(" ") || "-"), a.status || "-", ago(a.exited_at, s.now), dur(a.duration_s), a.steps, a.tokens, usd(a.cost_usd)], 2]), ["agent"]);
  table("routes", ["route", "kind", "match", "to", "queued", "in flight", "routed", "coalesced", "dropped", "last wake"],
    s.routes.map((r) => [r.id, [r.id, r.kind, r.match, r.disposition === "continue" ? "session " + r.session : "spawn", r.queued + (r.held ? " +" + r.held + " held" : ""), r.in_flight + "/" + r.max_in_flight, r.routed, r.coalesced, r.dropped, ago(r.last_wake, s.now)], 2]), ["route"]);
  table("servers", ["server", "state", "transport", "protocol", "subscriptions", "last error"],
    s.servers.map((v) => [v.name, [v.name, v.state, v.transport, (v.protocol_version || "-") + (v.era ? " (" + v.era + ")" : ""), v.subscriptions, v.last_error || "-"], 5]), ["server"]);
  const b = s.budget; $("budget").textContent = "steps " + b.steps + (b.max_steps ? " of " + b.max_steps : "") + " · tokens " + b.tokens + (b.max_tokens ? " of " + b.max_tokens : "") + " · cost " + usd(b.cost_usd) + (b.max_usd ? " of " + usd(b.max_usd) : "") + (b.deadline_at ? " · deadline " + b.deadline_at : "");
  table("watches", ["watch", "session", "uri", "events", "notices"], s.watches.map((w) => [w.name, [w.name, w.session || "-", w.uri, w.events, w.notices], 2]));
  table("recent", ["when", "uri", "route", "outcome"], s.recent.slice().reverse().map((d) => [d.uri, [ago(d.at, s.now), d.uri, d.route || "-", d.outcome + (d.agent ? " → " + d.agent : "")], 1]));
  chart(s.per_minute);
  document.body.dataset.updates = String(Number(document.body.dataset.updates) + 1);
}
async function refresh() {
  try {
    const r = await fetch("/status", { headers: token ? { Authorization: "Bearer " + token } : {}, cache: "no-store" });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    render(await r.json()); $("error").style.display = "none";
  } catch (e) { const x = $("error"); x.textContent = "cannot read /status: " + e.message; x.style.display = "block"; }
  setTimeout(refresh, REFRESH);
}
refresh();
</script>
</body></html>
"""
)
