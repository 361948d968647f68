//===- ServerTensors.h - what a parameter-server plan moves -----*- C++ -*-===//
//
// A --sync ps plan (plan.proto: ParameterServers) lists each tensor, or
// each row block of one cut over several servers, that a server holds. The
// runtime (runtime/train/ParameterServer.cpp), `dtc plan` and the simulator
// (cost/ServerExchange.cpp) take a block's bytes from here.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_SERVERTENSORS_H
#define DTC_PLAN_SERVERTENSORS_H

#include "plan.pb.h"

#include <cstdint>

namespace dtc::plan {

/// Bytes of one row (dim 0) of `type`; its bytes for a scalar.
int64_t rowBytes(const TensorType &type);

/// Where a block starts in the worker's gradient output, and its bytes (a
/// whole tensor: 0 and all of them).
int64_t pushedOffset(const Plan &plan, const ServerTensor &t);
int64_t pushedBytes(const Plan &plan, const ServerTensor &t);
/// What a push of it can take at most: its rows that a step may touch
/// (ServerTensor.sparse_rows) with their indices, sent by rows where that
/// is less than half the bytes (as the runtime does), else pushedBytes.
int64_t expectedPushBytes(const Plan &plan, const ServerTensor &t);
/// Likewise in the worker's weight (the server's new weight, whole or the
/// block).
int64_t pulledOffset(const Plan &plan, const ServerTensor &t);
int64_t pulledBytes(const Plan &plan, const ServerTensor &t);

} // namespace dtc::plan

#endif // DTC_PLAN_SERVERTENSORS_H
