//===- TrainLog.cpp -------------------------------------------------------===//
#include "runtime/train/TrainLog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

namespace dtc::runtime::train {

void writeStepRecord(std::FILE *log, const StepRecord &r) {
  fmt::print(log,
             "{{\"step\": {}, \"loss\": {:.9g}, \"lr\": {:.9g}, \"seconds\": {:.9g}, "
             "\"{}_per_second\": {:.9g}, \"flops_per_second\": {:.9g}{}, "
             "\"elapsed_seconds\": {:.9g}}}\n",
             r.step, r.loss, r.lr, r.seconds, r.tokens ? "tokens" : "samples", r.rate, r.flops,
             r.peakShare >= 0 ? fmt::format(", \"peak_share\": {:.6g}", r.peakShare) : "",
             r.elapsedSeconds);
  std::fflush(log);
}

namespace {

/// The number after `"key":` in `line`; false when the key is not there or
/// no number follows.
bool number(const std::string &line, const char *key, double &value) {
  std::string quoted = std::string("\"") + key + "\"";
  size_t at = line.find(quoted);
  if (at == std::string::npos)
    return false;
  at = line.find(':', at + quoted.size());
  if (at == std::string::npos)
    return false;
  const char *begin = line.c_str() + at + 1;
  char *end = nullptr;
  value = std::strtod(begin, &end);
  return end != begin && std::isfinite(value);
}

/// Numbers for JSON (a non-finite one would not parse).
double finite(double x) { return std::isfinite(x) ? x : 0; }

} // namespace

bool readTrainLog(const std::string &path, std::vector<StepRecord> &records, std::string &error) {
  std::ifstream in(path);
  if (!in) {
    error = path + ": cannot read the log";
    return false;
  }
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    StepRecord r;
    double step = 0;
    bool ok = line.front() == '{' && number(line, "step", step) && number(line, "loss", r.loss) &&
              number(line, "lr", r.lr) && number(line, "seconds", r.seconds) &&
              number(line, "flops_per_second", r.flops) &&
              number(line, "elapsed_seconds", r.elapsedSeconds);
    r.tokens = number(line, "tokens_per_second", r.rate);
    ok = ok && (r.tokens || number(line, "samples_per_second", r.rate));
    if (!ok || step < 1 || step != std::floor(step)) {
      error = fmt::format("{}:{}: not a step record of dtc run --log-json (step, loss, lr, "
                          "seconds, tokens_per_second or samples_per_second, "
                          "flops_per_second, elapsed_seconds)",
                          path, n);
      return false;
    }
    r.step = int64_t(step);
    if (!number(line, "peak_share", r.peakShare))
      r.peakShare = -1;
    records.push_back(r);
  }
  if (records.empty()) {
    error = path + ": no step records";
    return false;
  }
  return true;
}

namespace {

constexpr const char *kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 24px; }}
canvas {{ border: 1px solid #ccc; display: block; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p id="last"></p>
<h2>Loss</h2>
<canvas id="loss" width="900" height="280"></canvas>
<h2 id="rate-title">Throughput</h2>
<canvas id="rate" width="900" height="280"></canvas>
<script type="application/json" id="data">{data}</script>
<script>
(function () {{
  'use strict';
  const d = JSON.parse(document.getElementById('data').textContent);
  function chart(id, ys, label) {{
    const c = document.getElementById(id), ctx = c.getContext('2d');
    const left = 70, bottom = 30, w = c.width - left - 10, h = c.height - bottom - 10;
    const xs = d.step, x0 = Math.min(...xs), x1 = Math.max(x0 + 1, ...xs);
    let y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (y1 <= y0) {{ y1 = y0 + 1; }}
    const px = x => left + w * (x - x0) / (x1 - x0), py = y => 10 + h * (1 - (y - y0) / (y1 - y0));
    ctx.font = '11px sans-serif';
    ctx.strokeStyle = '#ccc';
    ctx.strokeRect(left, 10, w, h);
    ctx.fillStyle = '#222';
    for (let k = 0; k <= 4; k++) {{
      const y = y0 + (y1 - y0) * k / 4;
      ctx.fillText(y.toPrecision(4), 4, py(y) + 4);
      const x = x0 + (x1 - x0) * k / 4;
      ctx.fillText(String(Math.round(x)), px(x) - 8, c.height - 10);
    }}
    ctx.strokeStyle = '#4e79a7';
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ys.forEach((y, i) => i ? ctx.lineTo(px(xs[i]), py(y)) : ctx.moveTo(px(xs[i]), py(y)));
    ctx.stroke();
    c.dataset.points = ys.length;
    c.setAttribute('aria-label', label);
  }}
  chart('loss', d.loss, 'loss per step');
  const unit = d.tokens ? 'tokens/s' : 'samples/s';
  document.getElementById('rate-title').textContent = 'Throughput (' + unit + ')';
  chart('rate', d.rate, unit + ' per step');
  const n = d.step.length - 1;
  document.getElementById('last').textContent =
      d.step.length + ' steps logged; step ' + d.step[n] + ': loss ' + d.loss[n].toPrecision(6) +
      ', ' + d.rate[n].toPrecision(4) + ' ' + unit +
      (d.peak_share[n] >= 0 ? ', ' + (100 * d.peak_share[n]).toFixed(1) + '% of the device\'s peak' : '') +
      ', ' + d.elapsed[n].toPrecision(4) + ' s in';
  document.body.dataset.rendered = 'yes';
}})();
</script>
</body>
</html>
)html";

} // namespace

std::string trainLogHtml(const std::vector<StepRecord> &records, const std::string &title) {
  std::vector<std::string> step, loss, rate, share, elapsed;
  for (const StepRecord &r : records) {
    step.push_back(std::to_string(r.step));
    loss.push_back(fmt::format("{:.9g}", finite(r.loss)));
    rate.push_back(fmt::format("{:.9g}", finite(r.rate)));
    share.push_back(fmt::format("{:.6g}", finite(r.peakShare)));
    elapsed.push_back(fmt::format("{:.9g}", finite(r.elapsedSeconds)));
  }
  std::string data = fmt::format(
      "{{\"step\": [{}], \"loss\": [{}], \"rate\": [{}], \"peak_share\": [{}], "
      "\"elapsed\": [{}], \"tokens\": {}}}",
      fmt::join(step, ","), fmt::join(loss, ","), fmt::join(rate, ","), fmt::join(share, ","),
      fmt::join(elapsed, ","), records.front().tokens ? "true" : "false");
  std::string escaped;
  for (char c : title)
    escaped += c == '<' ? "&lt;" : c == '&' ? "&amp;" : std::string(1, c);
  return fmt::format(kPage, fmt::arg("title", escaped), fmt::arg("data", data));
}

} // namespace dtc::runtime::train
