// logferry console: renders the snapshots the server pushes (server-sent events).
// Plain JS, no build step. Each snapshot re-renders only the visible view, as one
// innerHTML string (fast enough for 500 partitions).
"use strict";

const state = { snap: null, view: "clusters", topic: {}, tail: null, renderMs: 0 };
const $ = (sel) => document.querySelector(sel);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const NUMBER = new Intl.NumberFormat("en-US"); // one formatter: toLocaleString per cell costs more than the rest of a render
const num = (v) => (v === null || v === undefined ? "-" : NUMBER.format(v));
// One unit system: bytes in binary units (KiB, MiB), rates per second; counts plain.
const RATE = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
function msgRate(v, counted) {
  // messages per second; "≈" when the broker gave no message counts (estimated from bytes)
  return (counted === false && v ? "≈" : "") + RATE.format(v || 0) + " msg/s";
}
const byteRate = (v) => bytes(v || 0) + "/s";
const estimated = (counted) => (counted === false ? ` title="estimated from bytes: this broker reports no message counts"` : "");
function bytes(v) {
  if (v === null || v === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v) + " " + units[i];
}

// One time zone on the whole page: UTC, said beside every time.
const utcTime = (ms) => new Date(ms).toISOString().slice(11, 19) + " UTC";
const utcDate = (ms) => new Date(ms).toISOString().slice(0, 19).replace("T", " ");
const ago = (ms) => (ms < 10000 ? (ms / 1000).toFixed(1) : Math.round(ms / 1000)) + " s";

function cardHead(c, title) {
  // the cluster's name, the time its reading was taken, and a banner when it is stale
  // (no answer for more than two intervals) or its last reading failed
  const asOf = c.as_of_ms ? `<span class="mute" data-as-of="${c.as_of_ms}">as of ${utcTime(c.as_of_ms)}</span>` : "";
  const banner = c.stale
    ? `<p class="stale" data-stale="${esc(c.name)}">STALE: no answer from ${esc(c.name)} for ${ago(c.age_ms)}` +
      `${c.error ? " (" + esc(c.error) + ")" : ""}; showing the reading as of ${utcTime(c.as_of_ms)}</p>`
    : c.error ? `<p class="bad" data-failed="${esc(c.name)}">last reading failed: ${esc(c.error)}</p>` : "";
  return `<div class="card${c.stale ? " is-stale" : ""}" data-cluster="${esc(c.name)}"><h2>${esc(c.name)}${title} ` +
    `<span class="mute">${esc(c.zk)}</span> ${asOf}</h2>${banner}`;
}

function unreachable(c) {
  return `<div class="card" data-cluster="${esc(c.name)}"><h2>${esc(c.name)} <span class="mute">${esc(c.zk)}</span></h2>` +
    `<p class="bad">unreachable: ${esc(c.error)}</p></div>`;
}

function brokerState(b) {
  // registered but not answering the console's requests (killed: its registration
  // outlives it by the ZooKeeper session timeout), said at the next reading
  if (b.up && b.answering === false) return `NOT ANSWERING since ${utcTime(b.silent_since_ms)}`;
  if (b.up) return "up";
  return b.down_since_ms ? `DOWN since ${utcTime(b.down_since_ms)}` : "DOWN";
}
const brokerUp = (b) => b.up && b.answering !== false;

function chart(values, label, format) {
  const w = 200, h = 48, vals = values || [];
  const max = Math.max(1, ...vals);
  const pts = vals.map((v, i) => `${(i / Math.max(vals.length - 1, 1)) * w},${h - 2 - (v / max) * (h - 6)}`).join(" ");
  const last = vals.length ? vals[vals.length - 1] : 0;
  return `<div><span>${esc(label)}: <b data-metric="${esc(label)}">${format(last)}</b></span>` +
    `<svg class="chart" viewBox="0 0 ${w} ${h}" preserveAspectRatio="none">` +
    `<polyline fill="none" stroke="#0969da" stroke-width="1.5" points="${pts}"/></svg></div>`;
}

function listenersList(listeners) {
  // one line per listener, as the broker registered it: name, protocol, address, security
  return (listeners || []).map((l) => `<div class="listener" data-listener="${esc(l.name)}">` +
    `<b data-field="listener-name">${esc(l.name)}</b> <span data-field="listener-protocol">${esc(l.protocol)}</span> ` +
    `<span data-field="listener-address">${esc(l.address)}</span> ` +
    `<span class="mute" data-field="listener-security">${esc(l.security || "?")}</span></div>`).join("") || "-";
}

function lagTime(s, atLeast) {
  // the age, by arrival, of the oldest message not consumed yet
  if (s === null || s === undefined) return "-";
  const text = s < 60 ? s.toFixed(s < 10 ? 1 : 0) + " s" : s < 3600 ? (s / 60).toFixed(1) + " min" : (s / 3600).toFixed(1) + " h";
  return (atLeast ? "≥ " : "") + text;
}

function topicConfig(config) {
  // the topic's settings as key = value, or that it has none of its own
  const entries = Object.entries(config || {});
  return entries.length ? entries.map(([k, v]) => `${esc(k)} = ${esc(v)}`).join(", ") : "broker defaults";
}

function clusterCard(c) {
  if (!c.read) return unreachable(c);
  const s = c.summary, h = c.history || {};
  const brokers = c.brokers.map((b) => `<tr data-broker="${b.id}"><td>${b.id}</td>` +
    `<td class="${brokerUp(b) ? "up" : "down"}" data-field="broker-state"${b.silent_error ? ` title="${esc(b.silent_error)}"` : ""}>${brokerState(b)}</td><td>${b.controller ? "controller" : ""}</td>` +
    `<td data-field="broker-address">${esc(b.host ? b.host + ":" + b.port : "-")}</td><td data-field="broker-rack">${esc(b.rack || "-")}</td>` +
    `<td data-field="broker-dc">${esc(b.datacenter || "-")}</td>` +
    `<td class="num">${b.leaders}</td><td class="listeners">${listenersList(b.listeners)}</td></tr>`).join("");
  const bad = [];
  for (const t of c.topics) for (const p of t.partitions) if (p.offline || p.under_replicated) bad.push([t.name, p]);
  const badRows = bad.slice(0, 50).map(([t, p]) => `<tr class="${p.offline ? "offline" : "urp"}"><td>${esc(t)}</td><td class="num">${p.partition}</td>` +
    `<td class="num">${p.leader}</td><td>${p.replicas.join(",")}</td><td>${p.isr.join(",")}</td><td>${p.offline ? "offline" : "under-replicated"}</td></tr>`).join("");
  return cardHead(c, "") +
    `<div class="stats">` +
    `<div class="stat"><b data-summary="brokers_up" class="${s.brokers_up < s.brokers ? "bad" : ""}">${s.brokers_up}/${s.brokers}</b><span>brokers up</span></div>` +
    `<div class="stat"><b data-summary="controller">${s.controller}</b><span>controller</span></div>` +
    `<div class="stat"><b data-summary="topics">${s.topics}</b><span>topics</span></div>` +
    `<div class="stat"><b data-summary="partitions">${s.partitions}</b><span>partitions</span></div>` +
    `<div class="stat"><b data-summary="offline" class="${s.offline ? "bad" : ""}">${s.offline}</b><span>offline</span></div>` +
    `<div class="stat"><b data-summary="under_replicated" class="${s.under_replicated ? "bad" : ""}">${s.under_replicated}</b><span>under-replicated</span></div>` +
    `<div class="stat"><b data-summary="groups_not_ok" class="${s.groups_not_ok ? "bad" : ""}">${s.groups_not_ok}</b><span>groups not OK</span></div>` +
    `<div class="stat"><b data-summary="not_preferred" class="${s.not_preferred ? "WARN" : ""}">${s.not_preferred || 0}</b><span>not on preferred leader</span></div>` +
    `</div><div class="charts">${chart(h.bytes_in_s, "bytes in", byteRate)}${chart(h.msgs_in_s, "messages in", (v) => msgRate(v, s.msgs_counted))}${chart(h.bytes_out_s, "bytes consumed", byteRate)}</div>` +
    (s.not_preferred ? `<p class="WARN" data-imbalance>${s.not_preferred} partition(s) led by a replica other than their preferred one, which is in sync: ` +
      `leadership is unbalanced. <code data-fix>logferry topic elect-leaders --zk ${esc(c.zk)}</code> hands it back.</p>` : "") +
    `<table><tr><th>broker</th><th>state</th><th>role</th><th>address</th><th>rack</th><th>dc</th><th class="num">leads</th><th>listeners</th></tr>${brokers}</table>` +
    (bad.length ? `<table><tr><th>topic</th><th class="num">partition</th><th class="num">leader</th><th>replicas</th><th>isr</th><th>state</th></tr>${badRows}</table>` +
      (bad.length > 50 ? `<p class="mute">and ${bad.length - 50} more</p>` : "") : `<p class="mute">every partition fully replicated</p>`) +
    `</div>`;
}

function topicsCard(c) {
  if (!c.read) return unreachable(c);
  const chosen = state.topic[c.name] && c.topics.find((t) => t.name === state.topic[c.name]) ? state.topic[c.name] : (c.topics[0] || {}).name;
  const list = c.topics.map((t) => {
    const urp = t.partitions.filter((p) => p.under_replicated).length;
    return `<tr data-topic-row="${esc(t.name)}" class="${urp ? "urp" : ""}"><td><a href="#" data-pick="${esc(c.name)}|${esc(t.name)}">${esc(t.name)}</a></td>` +
      `<td class="num">${t.partitions.length}</td><td class="num">${urp}</td><td class="num">${bytes(t.size)}</td>` +
      `<td class="num" data-field="topic-bytes-in">${byteRate(t.bytes_in_s)}</td>` +
      `<td class="num" data-field="topic-msgs-in" data-value="${t.msgs_in_s}" data-counted="${t.msgs_counted}"` +
      ` data-window="${(t.rate_window_ms || []).join(",")}"${estimated(t.msgs_counted)}>${msgRate(t.msgs_in_s, t.msgs_counted)}</td>` +
      `<td class="mute" data-field="topic-config">${topicConfig(t.config)}</td></tr>`;
  }).join("");
  const topic = c.topics.find((t) => t.name === chosen);
  let parts = "";
  if (topic) {
    parts = `<h2>${esc(topic.name)}</h2><table data-partitions="${esc(topic.name)}"><tr><th class="num">partition</th><th class="num">leader</th><th>replicas</th><th>isr</th>` +
      `<th class="num">log start</th><th class="num">log end</th><th class="num">size</th><th class="num">bytes in</th><th class="num">messages in</th><th>state</th></tr>` +
      topic.partitions.map((p) => `<tr data-topic="${esc(topic.name)}" data-partition="${p.partition}" class="${p.offline ? "offline" : p.under_replicated ? "urp" : ""}">` +
        `<td class="num">${p.partition}</td><td class="num" data-field="leader">${p.leader}</td><td data-field="replicas">${p.replicas.join(",")}</td>` +
        `<td data-field="isr">${p.isr.join(",")}</td><td class="num" data-field="log_start">${num(p.log_start)}</td><td class="num" data-field="log_end">${num(p.log_end)}</td>` +
        `<td class="num">${bytes(p.size)}</td><td class="num" data-field="bytes_in_s">${byteRate(p.bytes_in_s)}</td>` +
        `<td class="num" data-field="msgs_in_s"${estimated(p.msgs_counted)}>${msgRate(p.msgs_in_s, p.msgs_counted)}</td>` +
        `<td data-field="state">${p.offline ? "offline" : p.under_replicated ? "under-replicated" : p.error ? esc(p.error) : "ok"}</td></tr>`).join("") + `</table>`;
  }
  return cardHead(c, ": topics") +
    `<table><tr><th>topic</th><th class="num">partitions</th><th class="num">under-repl.</th><th class="num">size</th><th class="num">bytes in</th><th class="num">messages in</th><th>settings</th></tr>${list}</table>${parts}</div>`;
}

function lagHistory(g) {
  // the group's last readings: a sparkline of its lag in messages (a dot per reading in
  // its status's colour) and the newest few as a table, with since when the status holds
  const h = g.history;
  if (!h || !h.t.length) return "";
  const w = 240, ht = 36, vals = h.lag_messages, n = vals.length, max = Math.max(1, ...vals);
  const x = (i) => (i / Math.max(n - 1, 1)) * (w - 4) + 2, y = (v) => ht - 3 - (v / max) * (ht - 6);
  const colour = { OK: "var(--ok)", WARN: "var(--warn)" };
  const dots = vals.map((v, i) => `<circle cx="${x(i).toFixed(1)}" cy="${y(v).toFixed(1)}" r="1.6" fill="${colour[h.status[i]] || "var(--bad)"}"/>`).join("");
  const line = vals.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const rows = h.t.map((t, i) => i).slice(-5).reverse().map((i) => `<tr><td>${utcTime(h.t[i])}</td><td class="num">${num(h.lag_messages[i])}</td>` +
    `<td class="num">${bytes(h.lag_bytes[i])}</td><td class="num">${lagTime(h.lag_s[i], false)}</td><td class="${h.status[i]}">${h.status[i]}</td></tr>`).join("");
  return `<div class="lag-history" data-lag-history="${esc(g.name)}" data-points="${n}">` +
    `<span class="mute">lag, last ${n} readings (max ${num(max)} msgs); ${esc(g.status)} since ${h.status_since_ms ? utcTime(h.status_since_ms) : "-"}</span>` +
    `<svg class="spark" viewBox="0 0 ${w} ${ht}" width="${w}" height="${ht}"><polyline fill="none" stroke="#0969da" stroke-width="1" points="${line}"/>${dots}</svg>` +
    `<table class="lag-readings"><tr><th>reading</th><th class="num">lag msgs</th><th class="num">lag bytes</th><th class="num">lag time</th><th>status</th></tr>${rows}</table></div>`;
}

function groupsCard(c) {
  if (!c.read) return unreachable(c);
  if (!c.groups.length) return cardHead(c, ": consumer groups") + `<p class="mute">no consumer groups</p></div>`;
  const groups = c.groups.map((g) => {
    const members = Object.entries(g.members || {}).map(([id, m]) => `<li>${esc(id)} <span class="mute">${esc(m.host || "")} pid ${esc(m.pid || "-")}</span></li>`).join("");
    const rows = g.partitions.map((r) => `<tr data-group="${esc(g.name)}" data-topic="${esc(r.topic)}" data-partition="${r.partition}">` +
      `<td>${esc(r.topic)}</td><td class="num">${r.partition}</td><td>${esc(r.owner || "-")}</td>` +
      `<td class="num" data-field="committed">${num(r.committed)}</td><td class="num" data-field="log_end">${num(r.log_end)}</td>` +
      `<td class="num" data-field="lag_bytes">${num(r.lag_bytes)}</td><td class="num" data-field="lag_messages"${r.lag_counted ? "" : ` title="estimated: the committed offset lies between two readings' ends"`}>` +
      `${r.lag_messages === null ? "-" : r.lag_messages && !r.lag_counted ? "≈" + num(r.lag_messages) : num(r.lag_messages)}</td>` +
      `<td class="num" data-field="lag_s" title="since the oldest unread message reached the broker (to within one interval)">${lagTime(r.lag_s, r.lag_s_at_least)}</td>` +
      `<td class="${r.status}" data-field="status">${r.status}</td></tr>`).join("");
    return `<div data-group-card="${esc(g.name)}"><h2>${esc(g.name)} <span class="${g.status}" data-field="group-status">${g.status}</span> ` +
      `<span class="mute">lag <span data-field="group-lag">${num(g.lag_bytes)}</span> bytes, <span data-field="group-lag-messages">${g.lag_counted || !g.lag_messages ? "" : "≈"}${num(g.lag_messages)}</span> messages, <span data-field="group-lag-time">${lagTime(g.lag_s, false)}</span> behind, consumed ${byteRate(g.bytes_out_s)}</span></h2>` +
      lagHistory(g) + `<ul>${members || "<li class=mute>no members</li>"}</ul>` +
      `<table><tr><th>topic</th><th class="num">partition</th><th>owner</th><th class="num">committed</th><th class="num">log end</th><th class="num">lag bytes</th><th class="num">lag msgs</th><th class="num">lag time</th><th>status</th></tr>${rows}</table></div>`;
  }).join("");
  return cardHead(c, ": consumer groups") + `${groups}</div>`;
}

function auditCard(c) {
  if (!c.read) return unreachable(c);
  const a = c.audit;
  const head = cardHead(c, ": audit");
  if (!a) return head + `<p class="mute">no audit topic in this cluster</p></div>`;
  const shown = auditFilter(a.rows);
  const stages = [...new Set(shown.flatMap((r) => Object.keys(r.stages)))].sort((x, y) => (x === "agent" ? -1 : y === "agent" ? 1 : x.localeCompare(y)));
  const rows = shown.slice(0, 200).map((r) => `<tr data-audit-topic="${esc(r.topic)}" data-window="${r.window_start}" data-window-state="${esc(r.state)}"><td>${esc(r.topic)}</td>` +
    `<td>${utcDate(r.window_start)}</td><td class="mute">${esc(r.state)}</td><td class="num">${r.hosts}</td>` +
    stages.map((s) => {
      const st = r.stages[s];
      if (!st) return `<td class="mute">-</td><td></td>`;
      if (st.missing) return missingTier(s, st, r.state, "data-stage");
      const count = s === "agent" ? `${num(st.acked)} / ${num(st.sent)}` : num(st.acked);
      return `<td class="num" data-stage="${esc(s)}">${count}</td><td class="num ${judged(st.complete_pct, r.state)}" data-stage-pct="${esc(s)}"${judgedAgainst(st)}>${pct(st.complete_pct)}</td>`;
    }).join("") + `</tr>`).join("");
  const header = stages.map((s) => `<th class="num">${esc(s)}${s === "agent" ? " acked / sent" : ""}</th><th class="num">complete</th>`).join("");
  return head + `<p class="mute">from ${esc(a.topic)}; later stages against the agents' acknowledged counts${a.error ? "; <span class=bad>" + esc(a.error) + "</span>" : ""}</p>` +
    (shown.length ? `<table><tr><th>topic</th><th>window (UTC)</th><th>window</th><th class="num">hosts</th>${header}</tr>${rows}</table>` : `<p class="mute">${a.rows.length ? "no window matches the filter" : "no audit records yet"}</p>`) + `</div>`;
}

// Audit windows: a percentage is coloured only once its window settled (every tier had
// time to publish its count for it); an open or settling window's figure is shown plain.
const pct = (v) => (v === null || v === undefined ? "-" : v.toFixed(2) + "%");
function judged(v, state) {
  if (v === null || v === undefined) return "";
  if (state && state !== "settled") return "mute";
  return v < 100 ? "bad" : v > 100 ? "WARN" : "OK";
}
function missingTier(stage, st, windowState, attr) {
  // a tier that counts this topic published no count for this window: not 100%, missing;
  // amber once settled when a later tier counted the window (its count is what is
  // missing), red when none did (nothing after it confirms the messages)
  const cls = windowState === "settled" ? (st.counted_after ? "WARN" : "bad") : "mute";
  const why = `${stage} published no count for this window, though it counts this topic`;
  return `<td class="num ${cls}" ${attr}="${esc(stage)}" data-missing title="${esc(why)}">missing</td>` +
    `<td class="num mute" ${attr}-pct="${esc(stage)}">-</td>`;
}
const judgedAgainst = (st) => st.complete_pct === null && st.of ? ` title="no count of ${esc(st.of)} to judge it against"` : "";
const outside = (st) => st.missing || (st.complete_pct !== null && st.complete_pct !== 100);
const settleText = () => `${(state.snap && state.snap.audit_settle_s) || 60} s after it ended`;

function auditFilter(rows) {
  // the audit view's filter (a static form above it): topic substring, and settled
  // windows outside 100% only
  const f = new FormData($("#audit-filter"));
  const topic = String(f.get("topic") || "").trim();
  const problems = f.get("problems") === "on";
  return rows.filter((r) => (!topic || r.topic.includes(topic)) &&
    (!problems || (r.state === "settled" && Object.values(r.stages).some(outside))));
}

function pipelineCard(all) {
  const rows = auditFilter(all);
  // agent -> mirror -> landed across clusters: each stage from the cluster it publishes to
  const order = ["agent", "mirror", "landed"];
  const rank = (s) => (order.includes(s) ? order.indexOf(s) : order.length);
  const stages = [...new Set(rows.flatMap((r) => Object.keys(r.stages)))].sort((x, y) => rank(x) - rank(y) || x.localeCompare(y));
  const head = `<div class="card" id="pipeline"><h2>pipeline: completeness between tiers</h2>`;
  if (!rows.length) return head + `<p class="mute">${all.length ? "no window matches the filter" : "no audit records yet"}</p></div>`;
  const body = rows.slice(0, 200).map((r) => `<tr data-pipeline-topic="${esc(r.topic)}" data-window="${r.window_start}" data-window-state="${esc(r.state)}"><td>${esc(r.topic)}</td>` +
    `<td>${utcDate(r.window_start)}</td><td class="mute">${esc(r.state)}</td>` +
    stages.map((s) => {
      const st = r.stages[s];
      if (!st) return `<td class="mute">-</td><td></td>`;
      if (st.missing) return missingTier(s, st, r.state, "data-tier");
      return `<td class="num" data-tier="${esc(s)}" title="${esc(st.cluster || "")}">${num(st.acked)}</td>` +
        `<td class="num ${judged(st.complete_pct, r.state)}" data-tier-pct="${esc(s)}"${judgedAgainst(st)}>${pct(st.complete_pct)}</td>`;
    }).join("") + `</tr>`).join("");
  const header = stages.map((s, i) => `<th class="num">${esc(s)}</th><th class="num">${i ? "of " + esc(stages[i - 1]) : "acked / sent"}</th>`).join("");
  return head + `<p class="mute">each stage's count from the cluster it publishes to, every message in the window of its own time; ` +
    `over 100% = copies that tier made; "missing" = a tier that counts the topic published nothing for the window; judged (amber, red) only once a window settled, ${esc(settleText())}</p>` +
    `<table><tr><th>topic</th><th>window (UTC)</th><th>window</th>${header}</tr>${body}</table></div>`;
}

function landedCard(lakes) {
  // the last tier: rows the loader landed, per topic and event hour, from its manifests
  // (Parquet) or its tables' metadata (Iceberg), against the tier before it (summed over
  // the audit windows of the hour)
  // an hour is judged (coloured) only once it ended and settled before the loader's last
  // run started; a later one is open: the next run lands the rest
  const openWhy = (l) => ` title="open: the hour had not ended and settled (${esc(settleText())}) when the loader's last run started${l.last_started_ms ? " at " + utcDate(l.last_started_ms) + " UTC" : ""}; the next run lands the rest"`;
  return lakes.map((l) => {
    const kind = l.format === "iceberg" ? "Iceberg" : l.format === "parquet" ? "Parquet" : "";
    const source = l.format === "iceberg" ? `${l.tables} table(s), ` : "";
    const head = `<div class="card landed" data-lake="${esc(l.name)}" data-format="${esc(l.format || "")}"><h2>landed ${kind}${kind ? ": " : ""}${esc(l.name)} <span class="mute">${esc(l.path)}</span></h2>` +
      `<p class="mute">from ${source}the loader's ${l.runs} committed run(s)` +
      `${l.last_committed_ms ? ", last " + utcDate(l.last_committed_ms) + " UTC" : ""}; ` +
      `event hours in ${esc(l.timezone)}; against the tier before it on ${esc(l.cluster)}` +
      `${l.duplicates_without_hour ? `; ${num(l.duplicates_without_hour)} copies dedup dropped in older loads are in no hour` : ""}` +
      `${l.error ? "; <span class=bad>" + esc(l.error) + "</span>" : ""}</p>`;
    if (!l.rows.length) return head + `<p class="mute">nothing landed yet</p></div>`;
    const body = l.rows.slice(0, 200).map((r) => `<tr data-landed-topic="${esc(r.topic)}" data-hour="${esc(r.hour)}"><td>${esc(r.topic)}</td><td>${esc(r.hour)}${r.state === "open" ? ' <span class="mute">open</span>' : ""}</td>` +
      `<td class="num" data-field="expected" title="${esc(r.of || "")}">${r.expected === null ? "-" : num(r.expected)}</td><td>${esc(r.of || "-")}</td>` +
      `<td class="num" data-field="landed">${num(r.landed)}</td><td class="num" data-field="duplicates">${num(r.duplicates)}</td>` +
      `<td class="num ${judged(r.complete_pct, r.state)}" data-field="landed-pct" data-state="${esc(r.state || "")}"${r.state === "open" ? openWhy(l) : ""}>${pct(r.complete_pct)}</td></tr>`).join("");
    return head + `<table><tr><th>topic</th><th>hour</th><th class="num">tier before</th><th>stage</th><th class="num">landed rows</th>` +
      `<th class="num">dedup dropped</th><th class="num">complete</th></tr>${body}</table></div>`;
  }).join("");
}

function agentFile(f) {
  // one tailed file; the files of one path after rotations told apart: where each is now
  // (app.log.1, or unknown), its inode, rotated or deleted (older agents send only the path)
  const now = f.where && f.where !== f.path ? ` now ${esc(f.where)}` : f.where === null && f.rotated ? " now unknown" : "";
  const tags = [f.rotated ? "rotated" : "", f.deleted ? "deleted" : ""].filter(Boolean).join(", ");
  return `<div data-agent-file="${esc(f.path)}" data-inode="${esc(f.inode ?? "")}">${esc(f.path)}` +
    `<span data-field="file-now">${now}</span>${tags ? ` <b data-field="file-state">(${tags})</b>` : ""} ` +
    `<span class="mute">${f.inode ? "inode " + esc(f.inode) + ", " : ""}lag ${num(f.lag)}</span></div>`;
}

function agentsCard(a) {
  // the agents' heartbeats (_agents): files, lag, last heartbeat; stale after 3 intervals
  const head = `<div class="card" id="agents"><h2>agents</h2>`;
  if (!a) return head + `<p class="mute">no agent heartbeats (topic _agents) yet</p></div>`;
  const rows = a.agents.map((g) => `<tr data-agent="${esc(g.host)}" class="${g.stale ? "bad" : ""}"><td>${esc(g.host)}</td>` +
    `<td>${esc(g.version)}</td><td data-agent-state>${g.stale ? "STALE" : esc(g.state)}</td>` +
    `<td class="num" data-agent-age>${g.age_s}s</td><td class="num" data-agent-lag>${num(g.lag_bytes)}</td>` +
    `<td>${g.files.map(agentFile).join("")}` +
    `${g.file_count > g.files.length ? `<div class="mute">and ${g.file_count - g.files.length} more</div>` : ""}</td></tr>`).join("");
  return head + `<p class="mute">from ${esc(a.topic)} on ${esc(a.cluster)}; stale = no heartbeat for 3 intervals</p>` +
    `<table><tr><th>host</th><th>version</th><th>state</th><th class="num">last heartbeat</th><th class="num">lag bytes</th><th>files (lag bytes)</th></tr>${rows}</table></div>`;
}

function render() {
  const snap = state.snap;
  if (!snap) return;
  const t0 = performance.now();
  const views = { clusters: clusterCard, topics: topicsCard, groups: groupsCard, audit: auditCard };
  const fn = views[state.view];
  const top = state.view === "audit" ? pipelineCard(snap.pipeline || []) + landedCard(snap.landed || []) + agentsCard(snap.agents) : "";
  const target = state.view === "audit" ? "#audit-content" : "#view-" + state.view; // the audit filter stays put
  if (fn) $(target).innerHTML = top + `<div class="cols">${snap.clusters.map(fn).join("")}</div>`;
  const select = $("#browse select[name=cluster]");
  if (select.options.length !== snap.clusters.length) {
    select.innerHTML = snap.clusters.map((c) => `<option>${esc(c.name)}</option>`).join("");
  }
  topicChoices();
  state.renderMs = performance.now() - t0;
  document.body.dataset.seq = snap.seq;
  document.body.dataset.renderMs = state.renderMs.toFixed(1);
}

function show(view) {
  state.view = view;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("on", b.dataset.view === view);
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== "view-" + view;
  render();
}

function messagesTable(page) {
  // the offset as Kafka clients see it (one per message), and the native position
  // (batch byte offset + index in the batch) that native consumers commit
  const rows = page.messages.map((m) => {
    const r = m.record;
    const meta = r ? `${esc(r.host)} ${esc(r.file)}:${esc(r.offset)} ${utcDate(r.time)}` : "";
    return `<tr data-message-offset="${m.message_offset ?? ""}"><td class="num" data-field="offset">${m.message_offset === null || m.message_offset === undefined ? "-" : num(m.message_offset)}</td>` +
      `<td class="num mute" data-field="position">${m.offset}+${m.index}</td><td>${utcDate(m.timestamp)}</td><td data-field="key">${esc(m.key ?? "")}</td>` +
      `<td class="mute">${meta}</td><td><pre>${esc(m.value)}</pre></td></tr>`;
  }).join("");
  return `<table id="message-rows"><tr><th class="num" title="as Kafka clients see it: one per message">offset</th>` +
    `<th class="num" title="the native position: the batch's byte offset + the message's index in it">byte offset+i</th>` +
    `<th>timestamp (UTC)</th><th>key</th><th>agent record</th><th>value</th></tr>${rows}</table>`;
}

async function browse(ev, next) {
  ev.preventDefault();
  stopTail();
  const f = new FormData($("#browse"));
  const q = new URLSearchParams({ cluster: f.get("cluster"), topic: f.get("topic"), partition: f.get("partition") || "0", limit: f.get("limit") || "50" });
  if (f.get("q")) q.set("q", f.get("q"));
  if (next) { q.set("offset", String(next.next)); q.set("skip", String(next.next_skip || 0)); }
  else if (f.get("time")) q.set("time_ms", String(new Date(f.get("time") + "Z").getTime())); // the box is read as UTC, like every time on the page
  else if (f.get("offset")) q.set(f.get("offset_kind") === "byte" || !/^[0-9]+$/.test(f.get("offset")) ? "offset" : "message", f.get("offset"));
  const res = await fetch("/api/messages?" + q);
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) { $("#messages").innerHTML = `<p class="bad">${esc(body.error || res.statusText)}</p>`; return; }
  state.page = body;
  const more = body.next < body.log_end;
  const at = (m, b, skip) => (m === null || m === undefined ? "" : `offset ${num(m)}, `) + `byte ${num(b)}${skip ? "+" + skip : ""}`;
  const searched = body.query ? `<p class="mute" data-searched>searched ${num(body.scanned)} message(s) from ${at(body.start_message, body.start)} ` +
    `to ${at(body.next_message, body.next, body.next_skip)} (at most ${num(body.scan_limit)} a page) for "${esc(body.query)}": ` +
    `<span data-field="matches">${num(body.messages.length)}</span> found; ${more ? "Next page searches on" : "the end of the log"}</p>` : "";
  $("#messages").innerHTML = `<p class="mute">log ${num(body.log_start)}..${num(body.log_end)} (bytes), from ${at(body.start_message, body.start)}, next ${at(body.next_message, body.next, body.next_skip)}` +
    ` ${more ? `<button type="button" id="next-page">Next page</button>` : "(the end)"}</p>` + searched + messagesTable(body);
}

function topicChoices() {
  // the topic box offers the chosen cluster's topics (a datalist: typing still works)
  const cluster = (state.snap?.clusters || []).find((c) => c.name === $("#browse select[name=cluster]").value);
  const names = (cluster?.topics || []).map((t) => t.name);
  const list = $("#topic-names");
  if (list.dataset.names !== names.join("\n")) {
    list.dataset.names = names.join("\n");
    list.innerHTML = names.map((n) => `<option value="${esc(n)}">`).join("");
  }
}

function stopTail() {
  if (state.tail) { state.tail.close(); state.tail = null; $("#tail").textContent = "Tail live"; }
}

function startTail() {
  if (state.tail) { stopTail(); return; }
  const f = new FormData($("#browse"));
  const q = new URLSearchParams({ cluster: f.get("cluster"), topic: f.get("topic"), partition: f.get("partition") || "0" });
  const shown = [];
  $("#messages").innerHTML = `<p class="mute">tailing ${esc(f.get("topic"))}-${esc(f.get("partition"))}…</p>`;
  state.tail = new EventSource("/api/tail?" + q);
  $("#tail").textContent = "Stop tail";
  state.tail.addEventListener("messages", (e) => {
    shown.push(...JSON.parse(e.data));
    shown.splice(0, Math.max(shown.length - 200, 0));
    $("#messages").innerHTML = messagesTable({ messages: shown.slice().reverse() });
  });
  state.tail.addEventListener("failure", (e) => { $("#error").textContent = JSON.parse(e.data).error; });
}

function connect() {
  const events = new EventSource("/api/events");
  events.addEventListener("snapshot", (e) => {
    state.snap = JSON.parse(e.data);
    $("#live").textContent = "live · " + utcTime(state.snap.time_ms) + " · times in UTC";
    $("#error").textContent = "";
    render();
  });
  events.onerror = () => { $("#live").textContent = "reconnecting…"; };
}

document.addEventListener("click", (e) => {
  const pick = e.target.closest("[data-pick]");
  if (pick) { e.preventDefault(); const [c, t] = pick.dataset.pick.split("|"); state.topic[c] = t; render(); }
  if (e.target.id === "next-page" && state.page) browse(e, state.page);
  const tab = e.target.closest("#tabs button");
  if (tab) show(tab.dataset.view);
});
$("#browse").addEventListener("submit", browse);
$("#audit-filter").addEventListener("input", render);
$("#audit-filter").addEventListener("submit", (e) => e.preventDefault());
$("#tail").addEventListener("click", startTail);
const initial = new URLSearchParams(location.search).get("view");
if (initial) show(initial);
connect();
