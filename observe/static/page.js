// The status page: fetches status.json every second and draws it. No
// framework, no build step.
"use strict";
const colors = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"];
const $ = (id) => document.getElementById(id);

function text(id, v) { $(id).textContent = v; }

function duration(s) {
  if (s < 0 || !isFinite(s)) return "–";
  if (s < 1) return "< 1 s";
  const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), sec = Math.round(s % 60);
  return (h ? h + " h " : "") + (h || m ? m + " min " : "") + sec + " s";
}

function cell(tr, v, cls) {
  const td = document.createElement("td");
  td.textContent = v;
  if (cls) td.className = cls;
  tr.appendChild(td);
}

function fill(tbody, rows, make) {
  tbody.replaceChildren(...rows.map(make));
}

function chart(history) {
  const svg = $("chart"), legend = $("legend");
  const names = [...new Set(history.flatMap((p) => Object.keys(p.nodes)))].sort();
  let top = 1;
  for (const p of history) for (const n of names) top = Math.max(top, p.nodes[n] || 0);
  const t0 = history.length ? Date.parse(history[0].t) : 0;
  const t1 = history.length ? Date.parse(history[history.length - 1].t) : 1;
  const span = Math.max(t1 - t0, 1);
  const ns = "http://www.w3.org/2000/svg";
  const lines = names.map((n, i) => {
    const pl = document.createElementNS(ns, "polyline");
    pl.setAttribute("fill", "none");
    pl.setAttribute("stroke", colors[i % colors.length]);
    pl.setAttribute("stroke-width", "2");
    pl.setAttribute("vector-effect", "non-scaling-stroke");
    pl.dataset.node = n;
    pl.setAttribute("points", history.filter((p) => n in p.nodes).map((p) =>
      ((Date.parse(p.t) - t0) / span * 600).toFixed(1) + "," + (195 - (p.nodes[n] / top) * 185).toFixed(1)).join(" "));
    return pl;
  });
  svg.replaceChildren(...lines);
  legend.replaceChildren(...names.map((n, i) => {
    const s = document.createElement("span");
    const sw = document.createElement("i");
    sw.style.background = colors[i % colors.length];
    s.append(sw, n);
    return s;
  }));
  legend.append(Object.assign(document.createElement("span"), {className: "muted", textContent: "max " + Math.round(top) + "/s"}));
}

function draw(s) {
  text("job", s.job.dataset + " · " + s.job.samples + " samples × " + s.job.epochs + " epochs, batch " + s.job.batch_size);
  text("state", s.stopped ? "stopped: " + s.stopped : s.done ? "job done" : "running");
  const p = s.progress;
  $("progress").value = p.ratio;
  text("percent", (100 * p.ratio).toFixed(1) + "%");
  text("epoch", Math.min(p.epoch, s.job.epochs - 1));
  text("epochs", s.job.epochs);
  text("committed", p.committed);
  text("total", p.total);
  text("rate", Math.round(p.committed_per_second));
  text("eta", s.done ? "done" : duration(p.eta_seconds));
  text("bottleneck", s.bottleneck.stage);
  text("bottleneck-node", s.bottleneck.node ? "(" + s.bottleneck.node + ")" : "");
  text("bottleneck-reason", s.bottleneck.reason || "");
  text("bottleneck-advice", s.bottleneck.advice || "");
  const tw = s.trainer_wait;
  text("stall", tw && tw.stall_share >= 0 ? (100 * tw.stall_share).toFixed(1) + "% waiting for data" : "not reported");
  text("stall-detail", tw && tw.stall_share >= 0 ? tw.wait_seconds.toFixed(1) + " s waiting, " + tw.compute_seconds.toFixed(1) + " s computing over " + tw.steps + " steps" : "");
  text("leases", Object.entries(s.leases).map(([k, v]) => v + " " + k).join(", "));
  text("generation", s.journal ? s.journal.generation : "no journal");
  text("token", s.journal && s.journal.last_token ? s.journal.last_token : "–");
  fill($("nodes").tBodies[0], s.nodes || [], (n) => {
    const tr = document.createElement("tr");
    tr.dataset.node = n.node;
    tr.dataset.state = n.state;
    cell(tr, n.node);
    cell(tr, n.state, "state");
    const live = n.state === "alive" || n.state === "suspect" || n.state === "silent";
    cell(tr, live ? Math.round(n.samples_per_second) : "–");
    cell(tr, n.samples);
    cell(tr, n.failed);
    cell(tr, n.bottleneck || "–");
    cell(tr, n.report_age_seconds < 0 ? "never" : n.report_age_seconds.toFixed(1) + " s ago");
    tr.title = (n.bottleneck_reason || "") + (n.store_rps > 0 ? " · store budget " + Math.round(n.store_rps) + " requests/s" : "");
    return tr;
  });
  fill($("ranks").tBodies[0], s.ranks || [], (r) => {
    const tr = document.createElement("tr");
    tr.dataset.rank = r.rank;
    cell(tr, r.rank);
    cell(tr, r.node);
    cell(tr, r.epoch < 0 ? "–" : r.epoch);
    cell(tr, r.leases);
    cell(tr, r.delivered_step < 0 ? "–" : r.delivered_epoch + "/" + r.delivered_step);
    cell(tr, r.committed_step < 0 ? "–" : r.committed_step);
    cell(tr, r.samples);
    cell(tr, r.slots_in_use);
    cell(tr, r.stall_share < 0 ? "–" : (100 * r.stall_share).toFixed(1) + "%");
    return tr;
  });
  $("mixture-section").hidden = !(s.mixture && s.mixture.length);
  fill($("mixture").tBodies[0], s.mixture || [], (m) => {
    const tr = document.createElement("tr");
    tr.dataset.source = m.source;
    cell(tr, m.source);
    cell(tr, m.samples);
    cell(tr, m.committed);
    cell(tr, m.source_epochs.toFixed(2));
    return tr;
  });
  const fl = $("failures");
  if (s.failures && s.failures.length) {
    fill(fl, s.failures, (f) => Object.assign(document.createElement("li"), {textContent: f.reason + ": " + f.count}));
  } else {
    fl.replaceChildren(Object.assign(document.createElement("li"), {className: "muted", textContent: "none"}));
  }
  chart(s.history || []);
  text("updated", new Date(s.now).toLocaleTimeString());
  document.body.dataset.loaded = "true";
}

async function refresh() {
  try {
    const r = await fetch("status.json", {cache: "no-store"});
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    draw(await r.json());
  } catch (e) {
    text("state", "no answer from the coordinator: " + e.message);
  }
}

refresh();
setInterval(refresh, 1000);
