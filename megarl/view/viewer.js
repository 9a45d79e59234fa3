"use strict";
// The viewer page's behaviour: metric curves (plotly), the step and sample pickers, the chosen sample's PPO stages
// and the validation table across steps. The URL hash (#step=3&sample=1&val=0) holds the selection, so a link or
// a headless browser can choose; with DATA_URL set (the --port server) the data is re-fetched every 10 s.

const REFRESH_MS = 10000;
const HASH_KEYS = ["step", "sample", "val"];
const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };
const dataElement = document.getElementById("run-data");
let dataText = dataElement.textContent;
let data = JSON.parse(dataText);
const selection = { step: null, sample: null, val: null };

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (name === "text") node.textContent = value;
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

function fmt(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value !== "number") return String(value);
  return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(4)));
}

function note(text) {
  return el("p", { class: "note", text });
}

// --- selection and the URL hash -------------------------------------------------------------------------------

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  for (const key of HASH_KEYS) {
    const value = params.get(key);
    selection[key] = value === null || value === "" || isNaN(Number(value)) ? null : Number(value);
  }
}

function writeHash() {
  const parts = HASH_KEYS.filter((key) => selection[key] !== null).map((key) => `${key}=${selection[key]}`);
  const hash = "#" + parts.join("&");
  if (location.hash !== hash) location.replace(hash);
}

function trainEntry() {
  return data.train.steps.find((entry) => entry.step === selection.step) || null;
}

function valIndices() {
  const indices = new Set(data.val.steps.flatMap((entry) => entry.samples.map((sample) => sample.index)));
  return [...indices].sort((a, b) => a - b);
}

// A selection the data does not have (a stale link, a step not logged yet) falls back to the latest or first one.
function clampSelection() {
  const steps = data.train.steps.map((entry) => entry.step);
  if (!steps.includes(selection.step)) selection.step = steps.length ? steps[steps.length - 1] : null;
  const samples = trainEntry() ? trainEntry().samples.map((sample) => sample.index) : [];
  if (!samples.includes(selection.sample)) selection.sample = samples.length ? samples[0] : null;
  const indices = valIndices();
  if (!indices.includes(selection.val)) selection.val = indices.length ? indices[0] : null;
}

function fillPicker(id, values, label) {
  const picker = document.getElementById(id);
  picker.replaceChildren(...values.map((value) => el("option", { value: String(value), text: label(value) })));
  const key = { "step-picker": "step", "sample-picker": "sample", "val-picker": "val" }[id];
  picker.value = String(selection[key]);
  picker.disabled = values.length === 0;
}

function renderPickers() {
  fillPicker("step-picker", data.train.steps.map((entry) => entry.step), (step) => `step ${step}`);
  const samples = trainEntry() ? trainEntry().samples : [];
  const byIndex = new Map(samples.map((sample) => [sample.index, sample]));
  fillPicker("sample-picker", [...byIndex.keys()],
    (index) => `#${index} · score ${fmt(byIndex.get(index).score)} · ${byIndex.get(index).data_source || ""}`);
  fillPicker("val-picker", valIndices(), (index) => `#${index}`);
}

// --- header and curves ----------------------------------------------------------------------------------------

function renderSummary() {
  const header = data.header;
  const items = [
    `last step ${fmt(header.last_step)}`,
    `${data.train.steps.length} steps with samples`,
    `${data.val.steps.length} validations`,
    ...Object.entries(header.metrics).map(([name, value]) => `${name} ${fmt(value)}`),
  ];
  document.getElementById("summary").replaceChildren(
    el("span", { class: "run-dir", text: data.run_dir }),
    ...items.map((text) => el("span", { class: "chip", text })),
    el("span", { id: "refresh-status", class: "chip live", text: DATA_URL ? "live: refreshes every 10 s" : "" }));
}

function series(name) {
  const rows = data.metrics.filter((row) => typeof row[name] === "number");
  return {
    name, x: rows.map((row) => row.step), y: rows.map((row) => row[name]),
    type: "scatter", mode: rows.length > 30 ? "lines" : "lines+markers", marker: { size: 5 },
  };
}

function panelLayout(title) {
  return {
    title: { text: title, font: { size: 14 }, x: 0.02 }, height: 280, autosize: true,
    margin: { l: 48, r: 12, t: 34, b: 28 }, hovermode: "x unified", paper_bgcolor: "#fff", plot_bgcolor: "#fff",
    legend: { orientation: "h", y: -0.18, font: { size: 10 } },
    xaxis: { title: { text: "" }, gridcolor: "#eee", zeroline: false }, yaxis: { gridcolor: "#eee" },
  };
}

function renderCurves() {
  const box = document.getElementById("panels");
  const wanted = new Set(data.panels.map((panel) => "panel-" + panel.id));
  for (const stale of [...box.children].filter((child) => !wanted.has(child.id))) stale.remove();
  for (const panel of data.panels) {
    const div = document.getElementById("panel-" + panel.id) || el("div", { id: "panel-" + panel.id, class: "panel" });
    box.append(div);  // appending again keeps the panels in PANELS order when a new one appears
    Plotly.react(div, panel.metrics.map(series), panelLayout(panel.title), PLOT_CONFIG);
  }
  if (!data.panels.length) box.replaceChildren(note("metrics.jsonl has no metrics yet."));
}

// --- the chosen sample's PPO iteration ------------------------------------------------------------------------

function stage(id, title, ...content) {
  return el("section", { id, class: "stage" }, el("h3", { text: title }), ...content);
}

function highlighted(sample) {
  const text = sample.output || "";
  const answer = sample.answer;
  if (!answer || answer.start === undefined) return el("pre", { class: "text", text });
  return el("pre", { class: "text" }, text.slice(0, answer.start),
    el("mark", { class: "answer", text: text.slice(answer.start, answer.end) }), text.slice(answer.end));
}

// A multi-turn response: the model's turns (trained) and the tool messages between them (not trained), apart.
function turnList(sample) {
  const calls = sample.agent ? ` · ${sample.agent.tool_calls} tool calls, ${sample.agent.tool_errors} errors, ` +
    `${sample.agent.tool_timeouts} timeouts` : "";
  return el("div", { id: "turns" },
    ...sample.turns.map((turn) => el("div", { class: "turn turn-" + turn.by },
      el("div", { class: "turn-label", text: turn.by === "tool" ? "tool · not trained (masked)" : "model" }),
      el("pre", { class: "text", text: turn.text }))),
    el("p", { class: "meta", text: `${sample.turns.filter((t) => t.by === "model").length} model turns${calls}` }));
}

// What an LLM judge read and wrote for the sample, and whether its output parsed into the score.
function judgeBlock(sample) {
  const judge = sample.judge;
  return el("div", { id: "judge" },
    el("div", { class: "turn-label", text: "judge's prompt" }), el("pre", { class: "text", text: judge.prompt }),
    el("div", { class: "turn-label", text: judge.parsed ? "judge's output" : "judge's output · did not parse" }),
    el("pre", { class: "text", text: judge.output }));
}

function table(id, rows) {
  return el("table", { id, class: "kv" },
    ...rows.map(([name, value]) => el("tr", {}, el("th", { text: name }), el("td", { text: fmt(value) }))));
}

function heatColor(value, maxAbs) {
  if (value === null || value === undefined) return "#e5e7eb";
  const strength = Math.min(1, Math.abs(value) / maxAbs) * 0.85;
  return value < 0 ? `rgba(37, 99, 235, ${strength})` : `rgba(220, 38, 38, ${strength})`;
}

function shownToken(token) {
  return token.replace(/\n/g, "↵").replace(/\t/g, "⇥") || "∅";
}

function heatStrip(strip, tokens) {
  const maxAbs = strip.values.reduce((max, value) => Math.max(max, Math.abs(value || 0)), 0) || 1;
  const row = el("div", { class: "strip", id: "strip-" + strip.key });
  strip.values.forEach((value, i) => {
    const token = tokens[i] === undefined ? "" : tokens[i];
    const span = el("span", { title: `${fmt(value)} (token ${i} ${JSON.stringify(token)})`, text: shownToken(token) });
    span.style.background = heatColor(value, maxAbs);
    row.append(span);
  });
  return el("div", { class: "strip-block" },
    el("div", { class: "strip-label", text: `${strip.label} · max |value| ${fmt(maxAbs)}` }), row);
}

function updateTable(step) {
  const row = data.metrics.find((metrics) => metrics.step === step);
  const names = row ? Object.keys(row).filter((name) => /^(actor|critic)\//.test(name)).sort() : [];
  if (!names.length) return note(`metrics.jsonl has no actor/ or critic/ metrics for step ${step}.`);
  return table("update-table", names.map((name) => [name, row[name]]));
}

function renderStages() {
  const stages = document.getElementById("stages");
  const entry = trainEntry();
  const sample = entry && entry.samples.find((candidate) => candidate.index === selection.sample);
  document.getElementById("train-note").textContent = data.train.found
    ? (entry ? "" : `No training-sample files in ${data.train.dir} yet.`)
    : `Training samples are off for this run (no ${data.train.dir}): curves only.`;
  if (!sample) return stages.replaceChildren();
  stages.replaceChildren(
    stage("stage-prompt", "1 · Prompt", el("pre", { class: "text", text: sample.input || "" })),
    stage("stage-response", "2 · Response", sample.turns ? turnList(sample) : highlighted(sample),
      el("p", { class: "meta", text: `${fmt(sample.response_length)} tokens · finish: ${fmt(sample.finish_reason)}` })),
    stage("stage-reward", "3 · Reward", table("reward-table", [
      ["ground truth", sample.gts], ["extracted answer", sample.answer ? sample.answer.text : null],
      ["score", sample.score], ["acc", sample.acc],
      ...(sample.rm_score == null ? [] : [["reward model's score", sample.rm_score]]),
      ...(sample.judge_score == null ? [] : [["judge's score", sample.judge_score]]),
      ...(sample.rule_score == null ? [] : [["rule score", sample.rule_score]]),
      ["reward (after KL)", sample.reward], ["data source", sample.data_source], ["uid", sample.uid]]),
      ...(sample.judge ? [judgeBlock(sample)] : [])),
    stage("stage-tokens", "4 · Per-token values (blue negative, red positive)",
      ...(sample.strips.length ? sample.strips.map((strip) => heatStrip(strip, sample.tokens))
        : [note("This sample has no per-token values.")])),
    stage("stage-update", `5 · Update statistics, step ${selection.step}`, updateTable(selection.step)));
}

// --- validation across steps ----------------------------------------------------------------------------------

function renderValidation() {
  const box = document.getElementById("val-sample");
  document.getElementById("val-note").textContent = data.val.found
    ? (data.val.steps.length ? "" : `No validation-sample files in ${data.val.dir} yet.`)
    : `Validation samples are off for this run (no ${data.val.dir}).`;
  const columns = data.val.steps.map((entry) =>
    [entry.step, entry.samples.find((sample) => sample.index === selection.val)]);
  const first = columns.map(([, sample]) => sample).find(Boolean);
  if (!first) return box.replaceChildren();
  const cells = (render) => columns.map(([, sample]) => el("td", {}, sample ? render(sample) : note("not in this step")));
  box.replaceChildren(
    el("pre", { class: "text prompt", text: first.input || "" }),
    el("p", { class: "meta", text: `ground truth: ${fmt(first.gts)} · ${first.data_source || ""}` }),
    el("div", { class: "scroll" }, el("table", { id: "val-table" },
      el("thead", {}, el("tr", {}, el("th", {}),
        ...columns.map(([step]) => el("th", { class: "val-step", text: `step ${step}` })))),
      el("tbody", {},
        el("tr", {}, el("th", { text: "response" }), ...cells(highlighted)),
        el("tr", {}, el("th", { text: "score" }), ...cells((sample) => el("span", {
          class: sample.score > 0 ? "score good" : "score bad", text: fmt(sample.score) }))),
        el("tr", {}, el("th", { text: "answer" }),
          ...cells((sample) => document.createTextNode(sample.answer ? sample.answer.text : "—"))),
        el("tr", {}, el("th", { text: "length · finish" }), ...cells((sample) =>
          document.createTextNode(`${fmt(sample.response_length)} · ${fmt(sample.finish_reason)}`)))))));
}

// --- wiring ---------------------------------------------------------------------------------------------------

function renderSelection() {
  clampSelection();
  writeHash();
  renderPickers();
  renderStages();
  renderValidation();
}

function renderAll() {
  renderSummary();
  renderCurves();
  renderSelection();
}

async function refresh() {
  const status = document.getElementById("refresh-status");
  try {
    const response = await fetch(DATA_URL, { cache: "no-store" });
    const text = await response.text();
    if (!response.ok) throw new Error(`${response.status}: ${text}`);
    if (text !== dataText) {
      dataText = text;
      data = JSON.parse(text);
      renderAll();
    } else if (status) status.textContent = `live: refreshed ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    if (status) status.textContent = `refresh failed: ${error.message}`;
  }
}

for (const [id, key] of [["step-picker", "step"], ["sample-picker", "sample"], ["val-picker", "val"]]) {
  document.getElementById(id).addEventListener("change", (event) => {
    selection[key] = Number(event.target.value);
    renderSelection();
  });
}
window.addEventListener("hashchange", () => {
  readHash();
  renderSelection();
});
readHash();
renderAll();
if (DATA_URL) setInterval(refresh, REFRESH_MS);
