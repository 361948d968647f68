//===- PlanReport.cpp -----------------------------------------------------===//
#include "plan/PlanReport.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

namespace dtc::plan {

namespace {

/// The page's styles and script: they read the data (the summary's JSON,
/// the timeline, the device's capacity) from the element #data and build
/// everything else, so a browser shows exactly what dtc plan --json says.
constexpr const char *kStyle = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
p { margin: 2px 0; }
table { border-collapse: collapse; font-size: 13px; }
td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }
th { border-bottom: 1px solid #ccc; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.bar { display: flex; align-items: center; margin: 2px 0; }
.bar .label { width: 110px; flex: none; }
.bar .track { display: flex; width: 800px; height: 16px; background: #f2f2f2; border: 1px solid #ccc; }
.bar .track div { height: 100%; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
#filter { width: 320px; margin: 6px 0; }
canvas { border: 1px solid #ccc; }
ul { padding-left: 18px; } li { margin: 2px 0; }
)css";

constexpr const char *kScript = R"js(
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('data').textContent);
  const s = data.summary, t = data.timeline;
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  function bytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(2) : String(n)) + ' ' + units[i];
  }
  function secs(x) {
    if (x >= 1) return x.toPrecision(3) + ' s';
    if (x >= 1e-3) return (x * 1e3).toPrecision(3) + ' ms';
    return (x * 1e6).toPrecision(3) + ' us';
  }

  // Header.
  const header = document.getElementById('header');
  header.appendChild(el('p', 'model: ' + s.model));
  header.appendChild(el('p', 'mesh: ' + s.mesh.map(a => a.name + '=' + a.size).join(' x ') +
                             ' (' + s.ranks + (s.ranks === 1 ? ' rank)' : ' ranks)')));
  if (s.training) {
    const tr = s.training;
    header.appendChild(el('p', 'training: ' + tr.optimizer + ', learning rate ' + tr.learning_rate +
                               ', loss ' + tr.loss + ', ' + tr.precision + ', ' + tr.micro_batches +
                               (tr.micro_batches === 1 ? ' micro-batch' : ' micro-batches')));
    if (tr.pipeline)
      header.appendChild(el('p', 'pipeline: ' + tr.pipeline.stages + ' stages, ' +
                                 tr.pipeline.schedule + ' schedule' +
                                 (tr.pipeline.virtual_stages > 1
                                      ? ' of ' + tr.pipeline.virtual_stages + ' virtual stages'
                                      : '') +
                                 (tr.pipeline.replicas.some(r => r > 1)
                                      ? ', stage replicas ' + tr.pipeline.replicas.join(',')
                                      : '')));
  }
  if (s.predicted)
    header.appendChild(el('p', 'predicted step: ' + secs(s.predicted.step_seconds) + ' on ' +
                               s.predicted.cluster + ' (per rank: compute ' +
                               secs(s.predicted.compute_seconds) + ', communication ' +
                               secs(s.predicted.communication_seconds) + ', idle ' +
                               secs(s.predicted.idle_seconds) + ')'));
  header.appendChild(el('p', 'plan format ' + s.plan_format + ', written by ' + s.producer));

  // Memory: a bar per rank against the device's capacity.
  const kinds = [['weights', '#4e79a7'], ['optimizer state', '#f28e2b'],
                 ['load-time values', '#bab0ac'], ['activations kept', '#59a14f'],
                 ['gradients and workspace', '#e15759']];
  const memory = document.getElementById('memory');
  const legend = el('div', undefined, 'legend');
  for (const [name, colour] of kinds) {
    const item = el('span', name);
    const swatch = el('i');
    swatch.style.background = colour;
    item.prepend(swatch);
    legend.appendChild(item);
  }
  memory.appendChild(legend);
  const peak = Math.max(1, ...s.memory.map(r => r.peak_bytes));
  // Bars against the memory a rank may use (the device's less what the
  // runtime keeps), or against the largest rank when
  // that is under a quarter of it (a small model's bars would not show).
  const scaled = !(data.capacity > 0) || peak < data.capacity / 4;
  const capacity = scaled ? peak : Math.max(data.capacity, peak);
  if (data.capacity > 0)
    memory.appendChild(el('p', 'memory a rank may use ' + bytes(data.capacity) +
                               (peak > data.capacity ? ': the largest rank does not fit' : '') +
                               (scaled ? '; bars to the scale of the largest rank' : '')));
  for (const r of s.memory) {
    const bar = el('div', undefined, 'bar');
    bar.dataset.rank = r.rank;
    bar.appendChild(el('span', 'rank ' + r.rank, 'label'));
    const track = el('div', undefined, 'track');
    const loadTime = Math.max(0, r.parameter_bytes - r.weight_bytes - r.optimizer_state_bytes);
    const other = Math.max(0, r.peak_bytes - r.parameter_bytes - r.activation_bytes);
    const amounts = [r.weight_bytes, r.optimizer_state_bytes, loadTime, r.activation_bytes, other];
    amounts.forEach((amount, i) => {
      const part = el('div');
      part.style.width = (100 * amount / capacity) + '%';
      part.style.background = kinds[i][1];
      part.title = kinds[i][0] + ': ' + bytes(amount);
      track.appendChild(part);
    });
    bar.appendChild(track);
    bar.appendChild(el('span', ' ' + bytes(r.peak_bytes)));
    memory.appendChild(bar);
  }

  // The simulated step: a lane per rank and stream.
  const canvas = document.getElementById('timeline');
  const info = document.getElementById('timeline-info');
  const laneHeight = 16, left = 180, width = 1000;
  const end = Math.max(1e-12, ...t.spans.map(x => x[3]));
  canvas.width = left + width + 10;
  canvas.height = t.lanes.length * laneHeight + 30;
  const ctx = canvas.getContext('2d');
  ctx.font = '11px sans-serif';
  const colours = ['#4e79a7', '#e15759', '#f28e2b'];
  t.lanes.forEach((name, i) => {
    ctx.fillStyle = i % 2 ? '#fafafa' : '#f0f0f0';
    ctx.fillRect(left, i * laneHeight, width, laneHeight);
    ctx.fillStyle = '#222';
    ctx.fillText(name, 4, i * laneHeight + 12);
  });
  for (const [lane, kind, start, stop] of t.spans) {
    ctx.fillStyle = colours[kind] || '#999';
    ctx.fillRect(left + width * start / end, lane * laneHeight + 2,
                 Math.max(0.5, width * (stop - start) / end), laneHeight - 4);
  }
  ctx.fillStyle = '#222';
  for (let k = 0; k <= 5; k++)
    ctx.fillText(secs(end * k / 5), left + width * k / 5 - (k === 5 ? 40 : 0),
                 t.lanes.length * laneHeight + 20);
  canvas.dataset.spans = t.spans.length;
  info.textContent = t.spans.length + ' spans over ' + secs(end) +
                     ' (compute blue, collectives red, pipeline transfers orange)' +
                     (t.left_out ? '; the ' + t.left_out + ' shortest left out' : '');

  // Parameters, narrowed by the filter.
  const body = document.querySelector('#parameters tbody');
  for (const p of s.parameters) {
    const row = el('tr');
    const split = p.split.map(d => d.length ? d.join(',') : '-').join(' x ');
    for (const text of [p.name, p.dtype + '[' + p.shape.join(',') + ']', split,
                        p.stages.join(','), p.frozen ? 'frozen' : ''])
      row.appendChild(el('td', text));
    body.appendChild(row);
  }
  const filter = document.getElementById('filter'), shown = document.getElementById('shown');
  function narrow() {
    const words = filter.value.toLowerCase();
    let count = 0;
    for (const row of body.rows) {
      const keep = row.cells[0].textContent.toLowerCase().includes(words);
      row.style.display = keep ? '' : 'none';
      count += keep;
    }
    shown.textContent = count + ' of ' + s.parameters.length + ' shown';
  }
  filter.addEventListener('input', narrow);
  narrow();

  // Communication and decisions.
  const comm = document.querySelector('#communication tbody');
  for (const c of s.communication) {
    const row = el('tr');
    row.appendChild(el('td', c.programs.join(',')));
    row.appendChild(el('td', c.kind));
    row.appendChild(el('td', c.axes.join(',')));
    row.appendChild(el('td', c.messages < c.count ? c.count + ' in ' + c.messages : String(c.count),
                       'num'));
    row.appendChild(el('td', bytes(c.bytes), 'num'));
    comm.appendChild(row);
  }
  const decisions = document.getElementById('decisions');
  for (const note of s.decisions)
    decisions.appendChild(el('li', note));
  document.body.dataset.rendered = 'yes';
})();
)js";

/// JSON text that may sit inside a <script> element: "</" cannot end it.
std::string scriptSafe(std::string json) {
  for (size_t at = 0; (at = json.find("</", at)) != std::string::npos; at += 3)
    json.replace(at, 2, "<\\/");
  return json;
}

std::string timelineJson(const Timeline &timeline) {
  std::vector<std::string> lanes, spans;
  for (const std::string &lane : timeline.lanes)
    lanes.push_back(jsonString(lane));
  for (const Timeline::Span &s : timeline.spans)
    spans.push_back(fmt::format("[{}, {}, {:.9g}, {:.9g}]", s.lane, s.kind, s.start, s.end));
  return fmt::format("{{\"lanes\": [{}], \"spans\": [{}], \"left_out\": {}}}",
                     fmt::join(lanes, ", "), fmt::join(spans, ","), timeline.leftOut);
}

} // namespace

std::string reportHtml(const PlanSummary &summary, const Timeline &timeline,
                       double capacityBytes) {
  std::string data = fmt::format("{{\"summary\": {}, \"timeline\": {}, \"capacity\": {:.17g}}}",
                                 summaryJson(summary), timelineJson(timeline), capacityBytes);
  std::string title = "dtc plan: " + summary.plan->model();
  std::string escaped;
  for (char c : title)
    escaped += c == '<' ? "&lt;" : c == '&' ? "&amp;" : std::string(1, c);
  return fmt::format(R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{0}</title>
<style>{1}</style>
</head>
<body>
<h1>{0}</h1>
<div id="header"></div>
<h2>Memory per rank</h2>
<div id="memory"></div>
<h2>Simulated step</h2>
<p id="timeline-info"></p>
<canvas id="timeline"></canvas>
<h2>Parameters</h2>
<input id="filter" type="search" placeholder="filter by name"> <span id="shown"></span>
<table id="parameters">
<thead><tr><th>name</th><th>whole shape</th><th>split per dim</th><th>stages</th><th></th></tr></thead>
<tbody></tbody>
</table>
<h2>Communication per step</h2>
<table id="communication">
<thead><tr><th>programs</th><th>kind</th><th>axes</th><th>count</th><th>bytes a rank moves</th></tr></thead>
<tbody></tbody>
</table>
<h2>Decisions</h2>
<ul id="decisions"></ul>
<script type="application/json" id="data">{2}</script>
<script>{3}</script>
</body>
</html>
)html",
                     escaped, kStyle, scriptSafe(data), kScript);
}

} // namespace dtc::plan
