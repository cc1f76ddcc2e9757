// The NZC ledger dashboard: reads the JSON under api/ and draws the page.
// Everything is built with DOM calls (no HTML from data) and the charts are
// inline SVG. The page reloads its data every 10 seconds.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const COLOURS = ["#2563eb", "#0d9488", "#7c3aed", "#d97706", "#db2777", "#0891b2", "#65a30d", "#475569"];
  const REFRESH_MS = 10000;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function setText(id, text) {
    document.getElementById(id).textContent = text;
  }

  function replace(id, ...children) {
    const node = document.getElementById(id);
    node.replaceChildren(...children);
  }

  async function get(path) {
    const r = await fetch(path, { cache: "no-store" });
    if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()).trim());
    return r.json();
  }

  // Numbers as the server formats them, for values computed here.
  function fmt(x) {
    if (x === null || x === undefined || !isFinite(x)) return "∞";
    if (Math.abs(x) >= 1e6) return x.toExponential(3);
    return x.toFixed(3);
  }

  function colourOf(hospitals, h) {
    const i = hospitals.indexOf(h);
    return COLOURS[(i < 0 ? 0 : i) % COLOURS.length];
  }

  // chart draws one hospital's ε (a step line) and cap (dashed) against
  // time: the UTC stamps the entries' proposers put on them, on an axis
  // shared by every hospital (history.from_unix_ms … to_unix_ms). A point
  // stamped before its predecessor (proposers' clocks differ) is drawn at
  // its predecessor's time. Without a span of time (one instant, or a
  // server without timestamps) it falls back to the entry number.
  function chart(series, history, colour) {
    const W = 320, H = 130, L = 34, R = 8, T = 10, B = 20;
    const pts = (series && series.points) || [];
    const s = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
    let top = 0;
    for (const p of pts) {
      if (p.cap !== null) top = Math.max(top, p.cap);
      if (p.epsilon !== null) top = Math.max(top, p.epsilon);
    }
    top = top > 0 ? top * 1.1 : 1;
    const from = history.from_unix_ms, to = history.to_unix_ms;
    const timed = typeof from === "number" && typeof to === "number" && to > from;
    // pos is where each point sits on the axis, in [0, 1].
    let held = -Infinity;
    const pos = pts.map((p) => {
      if (!timed) return p.index / Math.max(history.entries, 1);
      held = Math.max(held, p.unix_ms);
      return (held - from) / (to - from);
    });
    const x = (f) => L + (W - L - R) * f;
    const y = (v) => (v === null || v > top ? T : T + (H - T - B) * (1 - v / top));

    for (const f of [0, 0.5, 1]) {
      const v = top * f;
      s.append(svg("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      s.append(svg("text", { x: L - 4, y: y(v) + 3, "text-anchor": "end" }, fmt(v).replace(/\.?0+$/, "")));
    }
    s.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
    if (timed) {
      // "2006-01-02 15:04:05": the clock time at the ends, the date in the
      // middle when both ends share it.
      const sameDay = history.from_time.slice(0, 10) === history.to_time.slice(0, 10);
      const end = (t) => (sameDay ? t.slice(11, 16) : t.slice(5, 16));
      s.append(svg("text", { class: "axis-from", x: L, y: H - 6 }, end(history.from_time)));
      s.append(svg("text", { class: "axis-label", x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" },
        (sameDay ? history.from_time.slice(0, 10) + " " : "") + "UTC, proposer's clock"));
      s.append(svg("text", { class: "axis-to", x: W - R, y: H - 6, "text-anchor": "end" }, end(history.to_time)));
    } else {
      s.append(svg("text", { x: L, y: H - 6 }, "entry 0"));
      s.append(svg("text", { x: W - R, y: H - 6, "text-anchor": "end" }, "entry " + history.entries));
    }
    if (pts.length === 0) return s;

    // Step paths: a value holds until the next point, and the last one
    // until the end of the axis.
    let spend = "", cap = "";
    pts.forEach((p, i) => {
      spend += (i === 0 ? `M${x(pos[i])},${y(p.epsilon)}` : ` H${x(pos[i])} V${y(p.epsilon)}`);
      cap += (i === 0 ? `M${x(pos[i])},${y(p.cap)}` : ` H${x(pos[i])} V${y(p.cap)}`);
    });
    spend += ` H${x(1)}`;
    cap += ` H${x(1)}`;
    const area = spend + ` V${y(0)} H${x(pos[0])} Z`;
    s.append(svg("path", { class: "area", d: area, fill: colour }));
    s.append(svg("path", { class: "capline", d: cap }));
    s.append(svg("path", { class: "spend", d: spend, stroke: colour }));
    const last = pts[pts.length - 1];
    s.append(svg("text", { class: "caplabel", x: W - R, y: y(last.cap) - 3, "text-anchor": "end" }, "cap " + fmt(last.cap)));
    pts.forEach((p, i) => {
      const c = svg("circle", { cx: x(pos[i]), cy: y(p.epsilon), r: 2.2, fill: colour, "data-index": p.index });
      c.append(svg("title", {}, `entry ${p.index} · ${p.time} UTC · ε ${fmt(p.epsilon)} of ${fmt(p.cap)}`));
      s.append(c);
    });
    return s;
  }

  // renderBurnt shows the nzc-svt sessions that burnt: refused their K
  // queries having answered too few, as the ledger's entries show.
  function renderBurnt(overview) {
    const box = document.getElementById("burnt");
    const burnt = overview.burnt_sessions || [];
    box.hidden = burnt.length === 0;
    if (burnt.length === 0) return;
    replace("burnt", el("h2", {}, "Alert: " + burnt.length + " nzc-svt session" + (burnt.length === 1 ? "" : "s") + " burnt"),
      ...burnt.map((b) => el("div", { class: "burnt", "data-session": b.session },
        "entry " + b.ended + " (" + b.time + " UTC): " + b.text)));
  }

  function renderAccounts(overview, history) {
    const hospitals = overview.accounts.map((a) => a.hospital);
    if (hospitals.length === 0) return;
    const cards = overview.accounts.map((a) => {
      const colour = colourOf(hospitals, a.hospital);
      const used = a.used === null ? 1 : Math.min(Math.max(a.used, 0), 1);
      const cls = a.used === null || a.used >= 1 ? "used full" : a.used >= 0.8 ? "used high" : "used";
      const series = history.series.find((s) => s.hospital === a.hospital);
      return el("article", { class: "card", id: "account-" + a.hospital, "data-hospital": a.hospital },
        el("div", { class: "card-head" },
          el("div", { class: "hospital" }, el("span", { class: "swatch", style: null, "data-colour": colour }), a.hospital),
          el("div", { class: cls, id: "used-" + a.hospital }, a.used_text + " of cap")),
        el("div", { class: "figure" },
          el("span", { class: "eps", id: "eps-" + a.hospital }, a.epsilon_text),
          el("span", { class: "cap" }, "of ε cap ", el("span", { id: "cap-" + a.hospital }, a.cap_text))),
        el("div", { class: "bar" }, el("div", { "data-width": (100 * used).toFixed(1), "data-colour": colour })),
        el("div", { class: "stats" },
          el("span", {}, "δ ", el("b", {}, a.delta_text)),
          el("span", {}, "charges ", el("b", {}, a.charges)),
          el("span", {}, "answers ", el("b", {}, a.answers))),
        el("div", { class: "stats" }, el("span", { id: "federation-" + a.hospital }, "ε ", el("b", {}, a.federation_text))),
        ...(a.suspended ? [el("div", { class: "suspended", id: "suspended-" + a.hospital }, a.suspended_text)] : []),
        ...a.cap_changes.map((c) => el("div", { class: c.raise ? "cap-change raise" : "cap-change" },
          (c.raise ? "cap RAISED" : "cap changed") + " at entry " + c.entry + " (" + c.time + ") by " + c.text)),
        chart(series, history, colour));
    });
    replace("accounts", ...cards);
    // Inline styles are barred by the page's CSP; set them through the DOM.
    for (const n of document.querySelectorAll("[data-colour]")) n.style.background = n.dataset.colour;
    for (const n of document.querySelectorAll("[data-width]")) n.style.width = n.dataset.width + "%";
  }

  // membershipWarning names how raft's membership differs from the
  // auditors the ledger registers, or is null when they agree.
  function membershipWarning(cp) {
    if (!cp.membership || cp.membership.length === 0) return null;
    return el("div", { class: "cp-error", id: "membership" },
      el("b", {}, "Membership differs from the ledger's auditors (raft members: " + cp.members.join(", ") + "):"),
      ...cp.membership.map((d) => el("div", {}, d)));
  }

  function renderCheckpoint(cp) {
    const warning = membershipWarning(cp);
    if (!cp.note) {
      replace("checkpoint", el("p", { class: "empty" }, cp.error || "No checkpoint yet."), ...(warning ? [warning] : []));
      return;
    }
    const pending = cp.entries - cp.size;
    const signers = cp.auditors.map((a) => {
      const yes = cp.signers.includes(a);
      return el("span", { class: "signer " + (yes ? "yes" : "no"), "data-signed": yes ? "yes" : "no" }, (yes ? "✓ " : "– ") + a);
    });
    const parts = [
      el("dl", { class: "cp" },
        el("dt", {}, "Tree size"), el("dd", { id: "cp-size" }, cp.size + (pending > 0 ? ` (${pending} newer entries await the next checkpoint)` : "")),
        el("dt", {}, "Root hash"), el("dd", { class: "mono", id: "cp-root" }, cp.root),
        el("dt", {}, "Origin"), el("dd", { class: "mono" }, cp.origin),
        el("dt", {}, "Cosigned by"), el("dd", { id: "cp-signers" }, `${cp.signers.length} of ${cp.auditors.length} auditors (quorum ${cp.quorum})`)),
      el("div", { class: "signers", id: "cosigners" }, ...signers),
    ];
    if (cp.error) parts.push(el("div", { class: "cp-error" }, cp.error));
    if (warning) parts.push(warning);
    parts.push(el("div", { class: "note-title" }, "Signed note, as served (verify it with the auditors' public keys):"));
    parts.push(el("pre", { class: "note", id: "cp-note" }, cp.note));
    replace("checkpoint", ...parts);
  }

  function renderVerification(v) {
    const banner = document.getElementById("verification");
    banner.className = "banner " + (!v.ran ? "pending" : v.ok ? "ok" : "failed");
    setText("verify-badge", !v.ran ? "not run" : v.ok ? "verified" : "failed");
    setText("verify-summary", v.summary);
    setText("verify-detail", v.ran
      ? `${v.accepted} accepted, ${v.refused} refused, ${v.duplicates} duplicate entries · root ${v.root} · ` +
        (v.keys_pinned ? "auditor keys pinned" : "auditor keys taken from the log's genesis") +
        ` · checked ${v.checked_at} in ${v.millis} ms`
      : "");
    setText("verify-when", v.ran ? "at " + v.checked_at : "");
    const rows = v.checks.map((c) =>
      el("tr", {},
        el("td", { class: "mark " + (c.ok ? "ok" : "bad") }, c.ok ? "✓" : "✗"),
        el("td", { class: "name" }, c.name + (c.entry !== undefined ? ` #${c.entry}` : "")),
        el("td", { class: "detail" }, c.detail)));
    replace("checks", ...rows);
  }

  function renderCharges(act, hospitals) {
    if (act.charges.length === 0) return;
    const rows = act.charges.map((c) => {
      const what = c.kind === "open-session"
        ? el("td", { class: "wrap" }, "session ", el("b", {}, c.session), el("div", { class: "dim" }, "opened: its whole cost is paid now"))
        : el("td", {}, el("span", { class: "id" }, c.batch), c.session ? el("div", { class: "dim wrap" }, "in session " + c.session + " (paid at opening)") : null);
      const costs = c.costs.length === 0
        ? el("td", { class: "dim" }, "—")
        : el("td", {}, ...c.costs.map((k) => el("span", { class: "cost" },
            el("span", { class: "swatch", "data-colour": colourOf(hospitals, k.hospital) }), " ", k.hospital, " ", el("b", {}, k.increase_text),
            el("span", { class: "dim" }, " → " + k.epsilon_text))));
      return el("tr", { id: "charge-" + c.index },
        el("td", { class: "num" }, c.index),
        el("td", { class: "dim nowrap" }, c.time),
        what,
        el("td", { class: "nowrap" }, c.student),
        el("td", { class: "wrap" }, c.mechanism, el("div", { class: "dim" }, c.params)),
        el("td", { class: "num" }, c.kind === "open-session" ? "—" : `${c.answers} / ${c.queries}`),
        costs);
    });
    replace("charges", ...rows);
    for (const n of document.querySelectorAll("#charges [data-colour]")) n.style.background = n.dataset.colour;
  }

  function renderRefusals(act) {
    if (act.refusals.length === 0) return;
    const rows = act.refusals.map((r) =>
      el("tr", { id: "refusal-" + r.index },
        el("td", { class: "num" }, r.index),
        el("td", { class: "dim nowrap" }, r.time),
        el("td", {}, el("span", { class: "nowrap" }, r.kind), r.batch ? el("div", { class: "dim id" }, r.batch) : null),
        el("td", { class: "nowrap" }, r.signer),
        el("td", {}, el("span", { class: "code" }, r.code)),
        el("td", { class: "wrap" }, r.reason)));
    replace("refusals", ...rows);
  }

  async function load() {
    try {
      const [overview, history, activity, cp] = await Promise.all([
        get("api/overview"), get("api/history"), get("api/activity"), get("api/checkpoint")]);
      setText("origin", overview.origin || "no genesis yet");
      setText("auditor", overview.auditor || "—");
      setText("entries", overview.entries);
      setText("generated", overview.generated_at);
      const hospitals = overview.accounts.map((a) => a.hospital);
      renderBurnt(overview);
      renderAccounts(overview, history);
      renderCheckpoint(cp);
      renderCharges(activity, hospitals);
      renderRefusals(activity);
      renderVerification(await get("api/verification"));
      setText("error", history.error || "");
    } catch (err) {
      setText("error", "Could not load: " + err.message);
    }
  }

  load();
  setInterval(load, REFRESH_MS);
})();
