//===- ReportCommand.cpp - dtc report -------------------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "plan/FormatBytes.h"
#include "runtime/train/TrainLog.h"

#include <fmt/format.h>

namespace dtc::cli {

int runReport(const Args &args) {
  std::string path, html;
  OptionParser parser("report", "training log", path);
  parser.text("--html", html);
  if (int rc = parser.parse(args))
    return rc;
  if (path.empty())
    return usageError("report needs a log: dtc report LOG.jsonl [--html PAGE.html] (written by "
                      "dtc run --log-json)");
  std::vector<runtime::train::StepRecord> records;
  std::string error;
  if (!runtime::train::readTrainLog(path, records, error))
    return failure(error);
  if (!html.empty())
    return writeOutput(html, runtime::train::trainLogHtml(records, "dtc report: " + path));
  // On the terminal: where the run went, first and last step.
  const runtime::train::StepRecord &first = records.front(), &last = records.back();
  double rate = 0;
  for (const runtime::train::StepRecord &r : records)
    rate += r.rate / double(records.size());
  fmt::print("{}: {} steps logged, {} to {}\n", path, records.size(), first.step, last.step);
  fmt::print("  loss {:.6f} at step {} -> {:.6f} at step {}\n", first.loss, first.step,
             last.loss, last.step);
  fmt::print("  {:.4g} {}/s on average; last step {}{}\n", rate,
             last.tokens ? "tokens" : "samples", plan::formatSeconds(last.seconds),
             last.peakShare >= 0 ? fmt::format(", {:.1f}% of the device's peak",
                                               100 * last.peakShare)
                                 : "");
  return 0;
}

} // namespace dtc::cli
