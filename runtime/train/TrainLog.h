//===- TrainLog.h - the per-step log of a training run ----------*- C++ -*-===//
//
// `dtc run --log-json LOG.jsonl` writes one JSON object per step, a line
// each, flushed as it goes (a run that stops keeps what it logged; a
// resumed run appends); `dtc report LOG.jsonl --html PAGE.html` reads it
// back and draws the loss and the throughput over the steps on one
// self-contained page.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_TRAINLOG_H
#define DTC_RUNTIME_TRAIN_TRAINLOG_H

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dtc::runtime::train {

struct StepRecord {
  int64_t step = 0;            // 1-based
  double loss = 0, lr = 0;
  double seconds = 0;          // the step's wall time
  double rate = 0;             // tokens (or samples) per second
  bool tokens = true;          // rate counts tokens, else samples
  double flops = 0;            // per second, on this rank
  double peakShare = -1;       // of the device's peak; < 0: not known
  double elapsedSeconds = 0;   // since the run (or its resumption) began
};

/// Appends `record` to `log` as one line and flushes it.
void writeStepRecord(std::FILE *log, const StepRecord &record);

/// The records of a log; false with `error` ("LOG:3: ...") when a line is
/// not one.
bool readTrainLog(const std::string &path, std::vector<StepRecord> &records, std::string &error);

/// The page: loss and throughput over the steps, and the figures of the
/// last step, its data and script inline.
std::string trainLogHtml(const std::vector<StepRecord> &records, const std::string &title);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_TRAINLOG_H
