// The Sluice dashboard: polls /ui/state.json and /v1/policies, and with the
// admin token /v1/top-refused; inspects and resets keys through /v1/keys.
// Everything shown is set with textContent: keys come from clients.
"use strict";

(function () {
  const params = new URLSearchParams(location.search);
  const refresh = Math.max(200, Number(params.get("refresh")) || 2000);
  let token = ""; // the admin token: only in this variable, never in the page
  // Rates are differences between two states over the time between them:
  // never over less than RATE_FLOOR_S, too short a span to mean anything
  // (polls may come every 200ms, and a browser's clock may run fast). The
  // baseline is the newest earlier state at least that old.
  const RATE_FLOOR_S = 1;
  let history = []; // earlier states, oldest first
  let policyNames = [];

  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function cell(row, text, field, cls) {
    const td = el("td", text, cls);
    if (field) td.dataset.field = field;
    row.appendChild(td);
    return td;
  }

  function fmtRate(x) {
    if (x === null) return "–";
    return x < 10 ? x.toFixed(2) : x.toFixed(1);
  }

  function fmtSeconds(s) {
    if (s === null) return "–";
    if (s < 0.001) return Math.round(s * 1e6) + "µs";
    return (s * 1000).toFixed(2) + "ms";
  }

  // quantile estimates q of the latency histogram delta between two
  // snapshots (cumulative buckets), interpolating within a bucket as
  // Prometheus's histogram_quantile does.
  function quantile(q, cur, old) {
    if (!cur || cur.length === 0) return null;
    const counts = cur.map((b, i) => b.count - (old && old[i] ? old[i].count : 0));
    const total = counts[counts.length - 1];
    if (total <= 0) return null;
    const rank = q * total;
    let lower = 0, below = 0;
    for (let i = 0; i < cur.length; i++) {
      if (counts[i] >= rank) {
        if (cur[i].inf) return lower; // beyond the last bound: at least it
        const inBucket = counts[i] - below;
        return lower + (cur[i].le - lower) * (inBucket > 0 ? (rank - below) / inBucket : 1);
      }
      below = counts[i];
      lower = cur[i].inf ? lower : cur[i].le;
    }
    return null;
  }

  // The tests compare quantile with a reference model.
  window.sluiceQuantile = quantile;

  // baseline returns the index in states (oldest first, each with its
  // server time "now") of the newest one at least floorS seconds older
  // than nowMs, or -1 when none is: no rate is shown then.
  function baseline(states, nowMs, floorS) {
    for (let i = states.length - 1; i >= 0; i--) {
      if (nowMs - Date.parse(states[i].now) >= floorS * 1000) return i;
    }
    return -1;
  }
  window.sluiceBaseline = baseline;
  window.sluiceRateFloor = RATE_FLOOR_S;

  async function getJSON(url, opts) {
    const r = await fetch(url, Object.assign({ cache: "no-store" }, opts || {}));
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    return { status: r.status, body: body };
  }

  function authHeaders() {
    return token ? { Authorization: "Bearer " + token } : {};
  }

  function renderPolicies(st) {
    const tbody = $("policies").tBodies[0];
    tbody.replaceChildren();
    const nowMs = Date.parse(st.now);
    const bi = baseline(history, nowMs, RATE_FLOOR_S);
    const prev = bi >= 0 ? history[bi] : null;
    const dt = prev ? (nowMs - Date.parse(prev.now)) / 1000 : 0;
    $("interval").textContent = prev ? dt.toFixed(1) + "s" : "– (less than " + RATE_FLOOR_S + "s of data yet)";
    // What is older than the baseline is never needed again.
    if (bi > 0) history = history.slice(bi);
    const old = {};
    if (prev) for (const p of prev.policies) old[p.name] = p;
    for (const p of st.policies) {
      const o = old[p.name];
      const rate = (f) => (o && dt > 0 ? Math.max(0, p[f] - o[f]) / dt : null);
      const row = el("tr");
      row.dataset.policy = p.name;
      cell(row, p.name, "name");
      cell(row, rules[p.name] || "", "rule", "muted");
      cell(row, fmtRate(rate("allowed")), "allowed_rate", "num");
      cell(row, fmtRate(rate("refused")), "refused_rate", "num");
      const dr = rate("degraded");
      cell(row, fmtRate(dr), "degraded_rate", "num" + (dr ? " bad" : ""));
      cell(row, p.allowed, "allowed", "num");
      cell(row, p.refused, "refused", "num");
      cell(row, p.shadow_refused, "shadow_refused", "num");
      cell(row, p.degraded, "degraded", "num" + (p.degraded ? " warn" : ""));
      cell(row, p.blocks, "blocks", "num" + (p.blocks ? " warn" : ""));
      const ob = o ? o.latency_buckets : null;
      // Over the last span; since the start when nothing was decided in it.
      const q = (x) => { const v = quantile(x, p.latency_buckets, ob); return v !== null ? v : quantile(x, p.latency_buckets, null); };
      cell(row, fmtSeconds(q(0.5)), "p50", "num");
      cell(row, fmtSeconds(q(0.99)), "p99", "num");
      tbody.appendChild(row);
    }
  }

  // renderWarnings fills the warnings and waits card, with rates over the
  // same baseline as the policies' (run after renderPolicies).
  function renderWarnings(st) {
    const nowMs = Date.parse(st.now);
    const bi = baseline(history, nowMs, RATE_FLOOR_S);
    const prev = bi >= 0 ? history[bi] : null;
    const dt = prev ? (nowMs - Date.parse(prev.now)) / 1000 : 0;
    const tbody = $("warnings").tBodies[0];
    tbody.replaceChildren();
    const old = {};
    if (prev && prev.warnings) for (const w of prev.warnings) old[w.name] = w;
    for (const w of st.warnings) {
      const o = old[w.name];
      const row = el("tr");
      row.dataset.policy = w.name;
      cell(row, w.name, "name");
      cell(row, w.warn_at ? w.warn_at + "%" : "–", "warn_at", "num");
      cell(row, fmtRate(o && dt > 0 ? Math.max(0, w.warnings - o.warnings) / dt : null), "warnings_rate", "num");
      cell(row, w.warnings, "warnings", "num" + (w.warnings ? " warn" : ""));
      cell(row, w.wait_ms ? w.wait_ms + "ms" : "–", "wait", "num");
      cell(row, w.waits.admitted, "admitted", "num");
      cell(row, w.waits.refused, "wait_refused", "num");
      cell(row, w.waits.full, "full", "num" + (w.waits.full ? " bad" : ""));
      cell(row, w.waits.abandoned, "abandoned", "num");
      tbody.appendChild(row);
    }
    $("waiting").textContent = String(st.waiting);
    $("warnings-note").textContent = st.warnings.length ? "" : "No policy sets warn_at or wait.";
  }

  // renderLeases fills the in-flight leases section, shown only when an
  // in_flight policy is configured.
  function renderLeases(st) {
    const tbody = $("leases").tBodies[0];
    tbody.replaceChildren();
    let any = false;
    for (const p of st.policies) {
      const l = p.leases;
      if (!l) continue;
      any = true;
      const row = el("tr");
      row.dataset.policy = p.name;
      cell(row, p.name, "name");
      cell(row, l.limit, "limit", "num");
      cell(row, l.lease_ms >= 1000 ? l.lease_ms / 1000 + "s" : l.lease_ms + "ms", "lease", "num");
      cell(row, p.allowed, "acquired", "num");
      cell(row, p.refused, "refused", "num");
      cell(row, l.released, "released", "num");
      cell(row, l.ended, "ended", "num" + (l.ended ? " warn" : ""));
      cell(row, l.renewed, "renewed", "num");
      cell(row, l.lost, "lost", "num" + (l.lost ? " bad" : ""));
      cell(row, l.expired, "expired", "num" + (l.expired ? " warn" : ""));
      tbody.appendChild(row);
    }
    $("leases-section").hidden = !any;
  }

  // renderGrants fills the card of policies with grants: decisions made
  // locally against those made on Valkey (rates over the same span as the
  // policies', totals since the start).
  function renderGrants(st) {
    const card = $("grants-card");
    const grants = st.grants || [];
    card.hidden = grants.length === 0;
    const tbody = $("grants").tBodies[0];
    tbody.replaceChildren();
    const nowMs = Date.parse(st.now);
    const bi = baseline(history, nowMs, RATE_FLOOR_S);
    const prev = bi >= 0 ? history[bi] : null;
    const dt = prev ? (nowMs - Date.parse(prev.now)) / 1000 : 0;
    const old = {};
    if (prev) for (const g of prev.grants || []) old[g.name] = g;
    for (const g of grants) {
      const o = old[g.name];
      const rate = (f) => (o && dt > 0 ? Math.max(0, g[f] - o[f]) / dt : null);
      const total = g.local + g.valkey + g.failed;
      const row = el("tr");
      row.dataset.policy = g.name;
      cell(row, g.name, "name");
      cell(row, fmtRate(rate("local")), "local_rate", "num");
      cell(row, fmtRate(rate("valkey")), "valkey_rate", "num");
      cell(row, g.local, "local", "num");
      cell(row, g.valkey, "valkey", "num");
      cell(row, g.failed, "failed", "num" + (g.failed ? " warn" : ""));
      cell(row, total ? (100 * g.local / total).toFixed(1) + "%" : "–", "local_share", "num");
      cell(row, total ? (g.calls / total).toFixed(3) : "–", "calls_per_decision", "num");
      tbody.appendChild(row);
    }
  }

  function renderNodes(st) {
    const tbody = $("nodes").tBodies[0];
    tbody.replaceChildren();
    for (const n of st.nodes) {
      const row = el("tr");
      row.dataset.node = n.address;
      cell(row, n.address, "address");
      cell(row, n.breaker, "breaker", n.breaker === "closed" ? "ok" : "bad");
      tbody.appendChild(row);
    }
    const risks = $("risks");
    risks.replaceChildren();
    for (const r of st.risks) {
      risks.appendChild(el("li", r.node + ": " + r.setting + " " + r.value, "bad"));
    }
    let note = "";
    if (st.store === "memory") note = "In-process store: no Valkey; limits are per process.";
    else if (st.nodes.length === 0) note = "No breaker state reported by the store.";
    if (!st.ready) note += (note ? " " : "") + "Not ready: " + (st.ready_error || "");
    $("nodes-note").textContent = note;
  }

  let rules = {};
  function renderConfig(st, pol) {
    const c = st.config;
    $("cfg-source").textContent = c.source;
    $("cfg-loaded").textContent = new Date(c.loaded_at).toISOString();
    $("cfg-counts").textContent = c.policies + " policies, " + c.domains + " domains";
    const rl = $("cfg-reload");
    if (!c.reload.at) {
      rl.textContent = "none since start";
      rl.className = "";
    } else if (c.reload.error) {
      rl.textContent = "failed at " + c.reload.at + ": " + c.reload.error + " (the last good configuration keeps serving)";
      rl.className = "bad";
    } else {
      rl.textContent = "succeeded at " + c.reload.at;
      rl.className = "ok";
    }
    $("cfg-reloads").textContent = c.reload.successes + " succeeded, " + c.reload.failures + " failed";
    if (!pol) return;
    const tbody = $("config").tBodies[0];
    tbody.replaceChildren();
    rules = {};
    const names = [];
    for (const p of pol.policies) {
      rules[p.name] = p.rule;
      names.push(p.name);
      const row = el("tr");
      row.dataset.policy = p.name;
      cell(row, p.name);
      cell(row, p.rule);
      cell(row, p.on_failure);
      cell(row, p.shadow ? "yes" : "");
      cell(row, p.description || "", "", "muted");
      tbody.appendChild(row);
    }
    if (names.join("\n") !== policyNames.join("\n")) {
      policyNames = names;
      const sel = $("key-policy");
      const keep = sel.value;
      sel.replaceChildren();
      for (const n of names) sel.appendChild(el("option", n));
      if (names.includes(keep)) sel.value = keep;
    }
  }

  async function renderTop() {
    const box = $("top");
    if (!token) {
      box.replaceChildren(el("p", "Enter the admin token to see them.", "muted"));
      return;
    }
    const r = await getJSON("/v1/top-refused?n=10&span=" + encodeURIComponent($("span").value), { headers: authHeaders() });
    if (r.status !== 200) {
      box.replaceChildren(el("p", r.status + ": " + ((r.body && r.body.detail) || "refused"), "bad"));
      return;
    }
    box.replaceChildren();
    for (const p of r.body.policies) {
      const div = el("div", undefined, "toppol");
      div.dataset.policy = p.policy;
      div.appendChild(el("h3", p.policy + " — " + p.refused + " refused, keys " + p.show_keys));
      if (p.resolve) div.appendChild(el("p", p.resolve, "muted"));
      if (p.keys.length === 0) {
        div.appendChild(el("p", "no refusals", "muted"));
      } else {
        const t = el("table");
        const head = el("tr");
        for (const h of ["key", "refused (at most)", "at least"]) head.appendChild(el("th", h));
        t.appendChild(head);
        for (const k of p.keys) {
          const row = el("tr");
          cell(row, k.key, "key");
          cell(row, k.count, "count", "num");
          cell(row, k.count - k.error, "min", "num");
          t.appendChild(row);
        }
        div.appendChild(t);
      }
      box.appendChild(div);
    }
  }

  async function poll() {
    try {
      const [s, p] = await Promise.all([getJSON("/ui/state.json"), getJSON("/v1/policies")]);
      if (s.status !== 200) throw new Error("state: HTTP " + s.status);
      const st = s.body;
      $("store").textContent = "store: " + st.store;
      const ready = $("ready");
      ready.textContent = st.ready ? "ready" : "not ready";
      ready.className = "pill " + (st.ready ? "ok" : "bad");
      $("version").textContent = st.version ? "sluice " + st.version : "";
      renderConfig(st, p.status === 200 ? p.body : null);
      renderGrants(st);
      renderPolicies(st);
      renderWarnings(st);
      renderLeases(st);
      renderNodes(st);
      await renderTop();
      history.push(st);
      if (history.length > 64) history = history.slice(-64);
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
      document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
    } catch (e) {
      $("updated").textContent = "update failed: " + e.message;
    }
    setTimeout(poll, refresh);
  }

  async function keyAction(method) {
    const policy = $("key-policy").value;
    const key = $("key").value;
    const out = $("key-result");
    if (!policy || !key) {
      out.textContent = "choose a policy and type a key";
      return;
    }
    const r = await getJSON("/v1/keys/" + encodeURIComponent(policy) + "/" + encodeURIComponent(key), { method: method, headers: authHeaders() });
    out.dataset.status = String(r.status);
    if (r.status !== 200) {
      out.textContent = r.status + ": " + ((r.body && r.body.detail) || "refused");
      out.className = "result bad";
      return;
    }
    out.className = "result";
    const b = r.body;
    out.textContent = method === "DELETE"
      ? "reset " + b.policy + " / " + b.key
      : b.policy + " / " + b.key + ": remaining " + b.remaining + " of " + b.limit +
        (b.allowed ? ", a request would be allowed" : ", a request would be refused for " + b.retry_after_ms + "ms") +
        (b.reset_after_ms ? ", fully restored in " + b.reset_after_ms + "ms" : "") +
        (b.rule ? "; in force: " + b.source + " " + b.rule : "");
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      token = $("token").value.trim();
      $("token").value = "";
      $("token-state").textContent = token ? "token set (not shown)" : "no token";
      renderTop();
    });
    $("token-forget").addEventListener("click", () => {
      token = "";
      $("token-state").textContent = "no token";
      renderTop();
    });
    $("span").addEventListener("change", renderTop);
    $("inspect").addEventListener("click", () => keyAction("GET"));
    $("reset").addEventListener("click", () => keyAction("DELETE"));
    poll();
  });
})();
