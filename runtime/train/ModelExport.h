//===- ModelExport.h - a trained model as an ONNX file ----------*- C++ -*-===//
#ifndef DTC_RUNTIME_TRAIN_MODELEXPORT_H
#define DTC_RUNTIME_TRAIN_MODELEXPORT_H

#include "runtime/Executor.h"
#include "runtime/comm/Communicator.h"

#include "plan.pb.h"

#include <functional>
#include <string>

namespace dtc::runtime::train {

/// Writes the model the plan was compiled from (`modelPath`) with its
/// trained weights to `out`: every initializer that is a trained parameter
/// of the plan gets the parameter's current bytes; the others (frozen
/// parameters, constants) keep theirs. When the model kept weights in
/// external data (or they pass 1 GiB), every tensor of 1 KiB or more goes
/// to `<out>.data` beside `out`, else all go inside: either way the result
/// loads from wherever it is written. Weights split over the ranks are
/// gathered first (every rank of `world` takes part); rank 0 writes, the
/// data file and then the model, each atomically. `replaced` counts the
/// trained initializers written (rank 0). False with `error` otherwise.
bool exportTrainedModel(const plan::Plan &plan, Executor &executor, const std::string &modelPath,
                        const std::string &out, Communicator *world, int &replaced,
                        std::string &error);

/// exportTrainedModel from the model `modelPath` (the plan's own when
/// empty), then rank 0 says "exported OUT with N trained initializers".
bool exportTrainedModel(const plan::Plan &plan, Executor &executor, const std::string &modelPath,
                        const std::string &out, Communicator *world,
                        const std::function<void(const std::string &)> &say,
                        std::string &error);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_MODELEXPORT_H
