//===- Replicas.h - the weights local SGD averages --------------*- C++ -*-===//
//
// A plan compiled with --sync local or federated keeps a replica of the
// weights on each rank along Training.data_axes; the runtime averages them
// (runtime/train/LocalSgd.cpp, Federated.cpp), `dtc plan` shows the bytes
// and the simulator costs the all-reduce. All three take the weights from
// here: the parameters a program updates that come from the model (not
// optimizer state or gradient accumulators, which start as zeros, and not
// frozen buffers).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_REPLICAS_H
#define DTC_PLAN_REPLICAS_H

#include "plan.pb.h"

#include <cstdint>
#include <vector>

namespace dtc::plan {

/// The buffer ids of `program`'s averaged weights, in update order.
std::vector<uint32_t> averagedWeights(const Plan &plan, const RankProgram &program);

/// Their bytes in all.
int64_t averagedWeightBytes(const Plan &plan, const RankProgram &program);

} // namespace dtc::plan

#endif // DTC_PLAN_REPLICAS_H
