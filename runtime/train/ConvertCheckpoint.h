//===- ConvertCheckpoint.h - a checkpoint rewritten for another plan -*- C++ -*-===//
//
// `dtc checkpoint convert DIR --plan PLAN.dtcp -o OUT`: the checkpoint in
// DIR, written under one split of a model, rewritten as the one PLAN's
// ranks would have written at the same step, a file per rank, so that
// `dtc run PLAN --resume --checkpoint OUT` starts with no conversion (and
// each rank reads one file, not all of DIR's). Each new rank's parts come
// from readResharded (Reshard.h); files are written atomically.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_CONVERTCHECKPOINT_H
#define DTC_RUNTIME_TRAIN_CONVERTCHECKPOINT_H

#include "plan.pb.h"

#include <functional>
#include <string>

namespace dtc::runtime::train {

/// Writes OUT's files for every rank of `plan` (which must be a training
/// plan of the checkpoint's model); `progress` hears a line per rank.
/// False with `error` (the folder, the rank and why) otherwise; nothing in
/// `dir` changes.
bool convertCheckpoint(const std::string &dir, const plan::Plan &plan, const std::string &out,
                       const std::function<void(const std::string &)> &progress,
                       std::string &error);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_CONVERTCHECKPOINT_H
