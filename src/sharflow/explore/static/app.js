// sharflow explorer: a plain page over the explorer's JSON API (sharflow.explore.api). Every text
// from the run goes in as textContent, never as HTML.
"use strict";

const state = { dataset: null, datasets: [], page: 0, size: 50, sort: null, desc: false, total: 0, columns: [] };
const $ = (id) => document.getElementById(id);
const SHOWN_FIRST = ["cut_id", "status", "split", "speaker", "duration", "dnsmos_bak", "dnsmos_ovrl", "context_similarity"];

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function url(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  return path + "?" + q.toString();
}

async function api(path, params) {
  const response = await fetch(url(path, params));
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function player(src, id) {
  const audio = el("audio", null, { controls: "", preload: "metadata", src: src });
  if (id) audio.id = id;
  return audio;
}

function fmt(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(4).replace(/\.?0+$/, "");
  if (Array.isArray(value)) return value.join(" ");
  return String(value);
}

// ---- datasets and tabs -------------------------------------------------------------------------
async function loadDatasets() {
  state.datasets = await api("/api/datasets");
  const select = $("dataset");
  for (const d of state.datasets) select.append(el("option", d.name, { value: d.name }));
  select.onchange = () => chooseDataset(select.value);
  if (state.datasets.length) await chooseDataset(state.datasets[0].name);
}

async function chooseDataset(name) {
  const asked = thresholdAsked; // a threshold asked for while the dataset loads is not overwritten by its default
  state.dataset = name;
  state.page = 0;
  const d = state.datasets.find((x) => x.name === name);
  const names = d.columns.map((c) => c.name);
  state.columns = [...SHOWN_FIRST.filter((c) => names.includes(c)), ...names.filter((c) => !SHOWN_FIRST.includes(c))];
  $("dataset-info").textContent = `${d.rows} rows: ${d.kept} cuts kept, ${d.dropped} dropped by the quality filter`;
  const metric = $("metric");
  metric.replaceChildren(...d.metrics.map((m) => el("option", m, { value: m })));
  $("recordings-tab").hidden = !d.long_form;
  if (!d.long_form && !$("tab-recordings").hidden) document.querySelector("nav button[data-tab=cuts]").click();
  await Promise.all([loadCuts(), loadReasons(), d.long_form ? loadRecordings(0) : null]);
  if (d.long_form && !d.rows) document.querySelector("nav button[data-tab=recordings]").click(); // not run past its segments
  if (d.metrics.length && thresholdAsked === asked) await loadThreshold(null, null);
}

for (const button of document.querySelectorAll("nav button")) {
  button.onclick = () => {
    for (const b of document.querySelectorAll("nav button")) b.classList.toggle("active", b === button);
    for (const s of document.querySelectorAll(".tab")) s.hidden = s.id !== "tab-" + button.dataset.tab;
    if (button.dataset.tab === "identity") loadLinks(0);
  };
}

// ---- cuts ------------------------------------------------------------------------------------------
let cutsAsked = 0;

async function loadCuts() {
  const asked = ++cutsAsked;
  $("filter-error").textContent = "";
  let found;
  try {
    found = await api("/api/cuts", {
      dataset: state.dataset, filter: $("filter").value, sort: state.sort, desc: state.desc ? 1 : 0,
      page: state.page, size: state.size,
    });
  } catch (e) {
    if (asked === cutsAsked) $("filter-error").textContent = e.message;
    return;
  }
  if (asked !== cutsAsked) return;
  state.total = found.total;
  const pages = Math.max(1, Math.ceil(found.total / state.size));
  $("page-info").textContent = `${found.total} cuts, ${found.hours.toFixed(3)} h · page ${found.page + 1} of ${pages}`;
  $("page-info").dataset.total = found.total;
  const head = el("tr");
  for (const c of state.columns) {
    const th = el("th", c + (state.sort === c ? (state.desc ? " ▼" : " ▲") : ""));
    th.onclick = () => { state.desc = state.sort === c ? !state.desc : false; state.sort = c; state.page = 0; loadCuts(); };
    head.append(th);
  }
  $("cuts").tHead.replaceChildren(head);
  const rows = found.rows.map((row) => {
    const tr = el("tr", null, { "data-cut": row.cut_id });
    if (row.status !== "kept") tr.classList.add("dropped");
    for (const c of state.columns) tr.append(el("td", fmt(row[c]), { "data-column": c }));
    tr.onclick = () => { for (const r of $("cuts").tBodies[0].rows) r.classList.remove("selected"); tr.classList.add("selected"); showCut(row.cut_id); };
    return tr;
  });
  $("cuts").tBodies[0].replaceChildren(...rows);
}

$("filter-form").onsubmit = (e) => { e.preventDefault(); state.page = 0; loadCuts(); };
$("prev").onclick = () => { if (state.page > 0) { state.page--; loadCuts(); } };
$("next").onclick = () => { if ((state.page + 1) * state.size < state.total) { state.page++; loadCuts(); } };

async function showCut(id) {
  const panel = $("cut-panel");
  const info = await api("/api/cut", { dataset: state.dataset, id: id });
  const row = info.row;
  const parts = [el("h3", id), el("p", row.status === "kept" ? "kept" : `dropped: ${row.status} (${row.detail || ""})`)];
  parts.push(el("h4", "target audio"), player(url("/audio/cut", { dataset: state.dataset, id: id, kind: "target" }), "target-audio"));
  if (info.has_context) {
    parts.push(el("h4", `context audio (similarity ${fmt(row.context_similarity)})`));
    parts.push(player(url("/audio/cut", { dataset: state.dataset, id: id, kind: "context" }), "context-audio"));
  }
  parts.push(el("img", null, { id: "cut-picture", alt: "waveform and spectrogram", src: url("/picture/cut", { dataset: state.dataset, id: id, kind: "target" }) }));
  const texts = el("dl");
  const add = (k, v) => { texts.append(el("dt", k), el("dd", v)); };
  add("text", info.text ?? "(not in the Shar: a dropped record)");
  add("spoken form", info.normalized_text ?? "");
  const dropped = el("dd", "…", { id: "dropped-chars" });
  texts.append(el("dt", "tokenizer skips"), dropped);
  parts.push(texts);
  if (info.asr_diff) {
    const diff = el("p", null, { id: "asr-diff" });
    for (const [op, words] of info.asr_diff) diff.append(el("span", words + " ", { class: op === "-" ? "diff-del" : op === "+" ? "diff-add" : "" }));
    parts.push(el("h4", "ASR transcript against the text"), diff);
  }
  const fields = el("dl");
  for (const [k, v] of Object.entries(row)) if (v !== null && k !== "_order") fields.append(el("dt", k), el("dd", fmt(v)));
  for (const [k, v] of Object.entries(info.context)) fields.append(el("dt", k), el("dd", fmt(v)));
  parts.push(el("h4", "every field"), fields);
  panel.replaceChildren(...parts);
  api("/api/dropped", { dataset: state.dataset, id: id }).then((d) => {
    dropped.textContent = d.symbols === null ? (d.why || "not measured") : d.symbols.length ? d.symbols.join(" ") : "nothing";
  }).catch((e) => { dropped.textContent = e.message; });
}

// ---- thresholds --------------------------------------------------------------------------------
let thresholdRange = null;
let thresholdAsked = 0; // answers can come back out of order: only the latest question's is shown

async function loadThreshold(value, side = $("side").value) {
  const asked = ++thresholdAsked;
  const found = await api("/api/threshold", { dataset: state.dataset, metric: $("metric").value, side: side, value: value });
  if (asked !== thresholdAsked) return;
  $("side").value = found.side;
  $("side").disabled = found.sides.length < 2; // the context similarity: NeMo's sampler keeps at or above
  thresholdRange = [found.edges[0], found.edges[found.edges.length - 1]];
  $("threshold-value").value = found.value;
  $("threshold-range").value = Math.round(1000 * (found.value - thresholdRange[0]) / (thresholdRange[1] - thresholdRange[0]));
  const hours = $("threshold-hours");
  hours.textContent = `${found.metric} ${found.side === "min" ? "≥" : "≤"} ${fmt(found.value)}: ` +
    `${found.cuts_kept} cuts (${found.hours_kept.toFixed(4)} h) kept, ` +
    `${found.cuts_dropped} cuts (${found.hours_dropped.toFixed(4)} h) dropped` +
    (found.hours_null ? ` (${found.hours_null.toFixed(4)} h without a value)` : "");
  hours.dataset.kept = found.hours_kept;
  hours.dataset.cutsDropped = found.cuts_dropped;
  $("threshold-scale").textContent = found.scale || "";
  hours.dataset.value = found.value;
  hours.dataset.metric = found.metric;
  hours.dataset.dropped = found.hours_dropped;
  $("config-line").textContent = found.config_line;
  drawHistogram(found);
  for (const [list, rows] of [["below", found.below], ["above", found.above]]) {
    $(list).replaceChildren(...rows.map((r) => {
      const li = el("li", `${r.cut_id} · ${fmt(r[found.metric])} · ${fmt(r.duration)} s · ${r.status}`, { "data-cut": r.cut_id });
      li.append(player(url("/audio/cut", { dataset: state.dataset, id: r.cut_id, kind: "target" })));
      return li;
    }));
  }
}

function drawHistogram(found) {
  const canvas = $("histogram");
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, canvas.width, canvas.height);
  if (!found.hours.length) return;
  const most = Math.max(...found.hours) || 1;
  // the threshold in view even where no value lies (NeMo's 0.6 below every GE2E similarity)
  const [lo, hi] = [Math.min(found.edges[0], found.value), Math.max(found.edges[found.edges.length - 1], found.value)];
  const x = (v) => 40 + (canvas.width - 50) * (v - lo) / (hi - lo);
  found.hours.forEach((h, i) => {
    const mid = (found.edges[i] + found.edges[i + 1]) / 2;
    const keeps = found.side === "min" ? mid >= found.value : mid <= found.value;
    g.fillStyle = keeps ? "#2563eb" : "#f59e0b";
    const height = (canvas.height - 30) * h / most;
    g.fillRect(x(found.edges[i]), canvas.height - 20 - height, Math.max(1, x(found.edges[i + 1]) - x(found.edges[i]) - 1), height);
  });
  g.strokeStyle = "#b91c1c";
  g.beginPath(); g.moveTo(x(found.value), 0); g.lineTo(x(found.value), canvas.height - 20); g.stroke();
  g.fillStyle = "#222";
  g.fillText(fmt(lo), 40, canvas.height - 5);
  g.fillText(fmt(hi), canvas.width - 60, canvas.height - 5);
  g.fillText(`hours (most: ${most.toFixed(4)})`, 2, 12);
}

$("metric").onchange = () => loadThreshold(null, null); // the metric's own default and usual side
$("side").onchange = () => loadThreshold($("threshold-value").value);
$("threshold-value").onchange = () => loadThreshold($("threshold-value").value);
$("threshold-range").oninput = () => {
  if (!thresholdRange) return;
  const v = thresholdRange[0] + (thresholdRange[1] - thresholdRange[0]) * $("threshold-range").value / 1000;
  loadThreshold(v);
};

// ---- rejects and identity ----------------------------------------------------------------------
async function loadReasons() {
  const reasons = await api("/api/rejects", { dataset: state.dataset });
  $("reasons").tBodies[0].replaceChildren(...reasons.map((r) => {
    const tr = el("tr", null, { "data-stage": r.stage, "data-reason": r.reason });
    tr.append(el("td", r.stage), el("td", r.reason), el("td", String(r.count)));
    tr.onclick = () => loadRejects(r.stage, r.reason);
    return tr;
  }));
  $("reject-title").textContent = reasons.length ? "Click a reason to see its records." : "No record was rejected.";
  $("reject-rows").replaceChildren();
}

function pager(list, page, full, load) {
  // ← and → under a list of PAGE_ROWS rows a page (the API's page size)
  const nav = el("li", null, { class: "pager" });
  const back = el("button", "←"), next = el("button", "→");
  back.disabled = page === 0;
  next.disabled = !full;
  back.onclick = () => load(page - 1);
  next.onclick = () => load(page + 1);
  nav.append(back, el("span", ` page ${page + 1} `), next);
  list.append(nav);
}

const PAGE_ROWS = 50;

async function loadRejects(stage, reason, page = 0) {
  const found = await api("/api/reject_rows", { dataset: state.dataset, stage: stage, reason: reason, page: page });
  $("reject-title").textContent = `${stage}: ${reason}`;
  $("reject-rows").replaceChildren(...found.rows.map((r) => {
    const li = el("li", null, { "data-n": r.n });
    li.append(el("div", r.detail), el("code", r.original));
    if (r.playable) li.append(player(url("/audio/reject", { dataset: state.dataset, stage: stage, reason: reason, n: r.n })));
    else li.append(el("div", "(no audio: the record names none that can be read)", { class: "hint" }));
    return li;
  }));
  pager($("reject-rows"), page, found.rows.length === PAGE_ROWS, (p) => loadRejects(stage, reason, p));
}

async function loadLinks(page = 0) {
  const found = await api("/api/links", { page: page });
  $("links").replaceChildren(...found.rows.map((r) => {
    const li = el("li", null, { "data-n": r.n });
    li.append(el("div", `${r.reason} (score ${fmt(r.score)}): ${r.dataset} ${r.audio_filepath} → held-out ${r.matched.split} ${r.matched.dataset} ${r.matched.audio_filepath}`));
    li.append(el("div", "train copy (kept out of train):", { class: "hint" }), player(url("/audio/link", { n: r.n, side: "record" })));
    li.append(el("div", `held-out record (${r.matched.split}):`, { class: "hint" }), player(url("/audio/link", { n: r.n, side: "matched" })));
    return li;
  }));
  if (!found.rows.length && page === 0) $("links").replaceChildren(el("li", "No train record is linked to a held-out one."));
  else pager($("links"), page, found.rows.length === PAGE_ROWS, loadLinks);
}

// ---- a long_form dataset's recordings: timelines, and thresholds tried before a run -----------------
const SPEAKER_COLORS = ["#2563eb", "#16a34a", "#9333ea", "#0891b2", "#ca8a04", "#db2777"];
const DROPPED_COLORS = { silence: "#e5e7eb", overlap: "#ef4444", no_speaker: "#f97316", too_short: "#a3a3a3", low_confidence: "#facc15", unreadable: "#111827" };
const recording = { n: null, duration: 0, shown: [] };

function color(stretch) {
  return stretch.what === "kept" ? SPEAKER_COLORS[stretch.label % SPEAKER_COLORS.length] : DROPPED_COLORS[stretch.what] || "#666";
}

function drawTimeline(canvas, stretches, duration) {
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, canvas.width, canvas.height);
  const x = (t) => canvas.width * t / Math.max(duration, 1e-9);
  for (const s of stretches) {
    g.fillStyle = color(s);
    g.fillRect(x(s.start), s.what === "kept" ? 4 : 20, Math.max(1, x(s.end) - x(s.start)), s.what === "kept" ? 40 : 24);
  }
  g.fillStyle = "#222";
  g.fillText(`0 s`, 2, canvas.height - 4);
  g.fillText(`${fmt(duration)} s`, canvas.width - 60, canvas.height - 4);
}

function legend(stretches) {
  // a swatch for each speaker and each reason the timeline holds: kept above, dropped below
  const seen = new Map();
  for (const s of stretches) seen.set(s.what === "kept" ? `speaker ${s.speaker}` : s.what, s);
  $("timeline-legend").replaceChildren(...[...seen].map(([name, s]) => {
    const item = el("span", null, { class: "legend" });
    const swatch = el("span", null, { class: "swatch" });
    swatch.style.background = color(s);
    item.append(swatch, name + " ");
    return item;
  }));
}

function playStretch(s) {
  const audio = $("stretch-audio");
  audio.src = url("/audio/recording", { dataset: state.dataset, n: recording.n, start: s.start, end: s.end });
  audio.dataset.start = s.start;
  audio.dataset.end = s.end;
  $("stretch-info").textContent = `${fmt(s.start)}–${fmt(s.end)} s · ${s.what}` + (s.speaker ? ` · ${s.speaker}` : "") + (s.text ? ` · ${s.text}` : "");
}

function clickable(canvas, stretches, duration) {
  canvas.onclick = (e) => {
    const t = duration * e.offsetX / canvas.clientWidth;
    const s = stretches.find((x) => x.start <= t && t < x.end);
    if (s) playStretch(s);
  };
}

async function loadRecordings(page = 0) {
  const found = await api("/api/recordings", { dataset: state.dataset, page: page });
  recording.settings = found.settings;
  $("recordings").tBodies[0].replaceChildren(...found.rows.map((r) => {
    const tr = el("tr", null, { "data-n": r.n });
    tr.append(el("td", String(r.n)), el("td", r.recording), el("td", fmt(r.duration)), el("td", fmt(r.speakers)),
      el("td", fmt(r.segments)), el("td", fmt(r.seconds.kept)));
    tr.onclick = () => loadTimeline(r.n, r);
    return tr;
  }));
}

async function loadTimeline(n, row) {
  // the run's thresholds to start from; a recording not segmented yet has no timeline, but can be tried
  Object.assign(recording, { n: n, duration: row.duration, shown: [] });
  for (const [k, v] of Object.entries(recording.settings)) $("try-" + k).value = v;
  $("try-info").textContent = "";
  for (const id of ["timeline", "tried"]) $(id).getContext("2d").clearRect(0, 0, $(id).width, $(id).height);
  $("stretches").replaceChildren();
  $("timeline-legend").replaceChildren();
  let found;
  try {
    found = await api("/api/timeline", { dataset: state.dataset, n: n });
  } catch (err) {
    $("recording-title").textContent = `${row.recording}: ${err.message}`;
    $("recording-title").dataset.n = n;
    return;
  }
  Object.assign(recording, { duration: found.duration, shown: found.stretches });
  const dropped = Object.entries(found.seconds).filter(([k]) => k !== "kept").map(([k, v]) => `${k} ${fmt(v)} s`).join(", ");
  $("recording-title").textContent = `${found.recording}: ${fmt(found.duration)} s, ${found.speakers} speakers, ` +
    `${fmt(found.seconds.kept || 0)} s kept` + (dropped ? `; dropped: ${dropped}` : "") + (found.error ? ` (${found.error})` : "");
  $("recording-title").dataset.n = n;
  legend(found.stretches);
  drawTimeline($("timeline"), found.stretches, found.duration);
  clickable($("timeline"), found.stretches, found.duration);
  $("stretches").replaceChildren(...found.stretches.filter((s) => s.what !== "silence").map((s, k) => {
    const li = el("li", `${fmt(s.start)}–${fmt(s.end)} s · ${s.what}` + (s.speaker ? ` · ${s.speaker}` : "") + (s.text ? ` · ${s.text}` : ""), { "data-what": s.what, "data-start": s.start, "data-end": s.end });
    li.onclick = () => playStretch(s);
    return li;
  }));
}

$("try-form").onsubmit = async (e) => {
  e.preventDefault();
  const asked = { dataset: state.dataset, n: recording.n };
  for (const k of ["max_pause", "min_segment", "max_segment", "cluster_similarity"]) asked[k] = $("try-" + k).value;
  $("try-info").textContent = "cutting again (the first try of a recording runs its models: seconds)…";
  let found;
  try {
    found = await api("/api/try_segment", asked);
  } catch (err) {
    $("try-info").textContent = err.message;
    return;
  }
  const dropped = Object.entries(found.seconds).filter(([k]) => k !== "kept").map(([k, v]) => `${k} ${fmt(v)} s`).join(", ");
  const info = $("try-info");
  info.textContent = `tried: ${found.segments} segments, ${found.speakers} speakers, ${fmt(found.seconds.kept || 0)} s kept` +
    (dropped ? `; dropped: ${dropped}` : "") + (found.whole ? "" : ` (the first ${fmt(found.tried_seconds)} s only)`) +
    " — no transcripts are made again, so nothing is dropped for low confidence";
  info.dataset.segments = found.segments;
  info.dataset.speakers = found.speakers;
  info.dataset.kept = found.seconds.kept || 0;
  drawTimeline($("tried"), found.stretches, recording.duration);
  clickable($("tried"), found.stretches, recording.duration);
};

loadDatasets().catch((e) => { document.body.prepend(el("p", e.message, { class: "error" })); });
