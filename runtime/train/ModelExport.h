//===- ModelExport.h - a trained model as an ONNX file ----------*- C++ -*-===//
#ifndef DTC_RUNTIME_TRAIN_MODELEXPORT_H
#define DTC_RUNTIME_TRAIN_MODELEXPORT_H

#include "runtime/Executor.h"
#include "runtime/comm/Communicator.h"

#include "plan.pb.h"

#include <string>

namespace dtc::runtime::train {

/// Writes the model the plan was compiled from (`modelPath`) with its
/// trained weights to `out`: every initializer that is a parameter of the
/// plan gets the parameter's current bytes, inline (external data is not
/// kept: the result is one self-contained file, under protobuf's 2 GiB
/// limit). Weights split over the ranks are gathered first (every rank of
/// `world` takes part); rank 0 writes, atomically. `replaced` counts the
/// initializers written (rank 0). False with `error` otherwise.
bool exportTrainedModel(const plan::Plan &plan, Executor &executor, const std::string &modelPath,
                        const std::string &out, Communicator *world, int &replaced,
                        std::string &error);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_MODELEXPORT_H
