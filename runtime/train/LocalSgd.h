//===- LocalSgd.h - averaging local SGD's replicas --------------*- C++ -*-===//
//
// A plan compiled with --sync local (compiler/LocalSgd.cpp) trains one
// replica of the weights on each rank along its data axes
// (Training.data_axes), with no gradient reduction between them. Every
// Training.average_every steps, and before a trained model is exported,
// the replicas become their mean: the weights (the parameters the step
// updates that came from the model: not optimizer state, not gradient
// accumulators) travel in one all-reduce over the data axes' group and are
// divided by its size. Optimizer state stays each rank's own.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_LOCALSGD_H
#define DTC_RUNTIME_TRAIN_LOCALSGD_H

#include "runtime/Executor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::runtime::train {

class ReplicaAverage {
public:
  /// The weights of `executor`'s program to average (none for a plan
  /// without local SGD); false with `error` when one is split over a data
  /// axis or not f32.
  bool prepare(const plan::Plan &plan, Executor &executor, std::string &error);
  bool enabled() const { return every_ > 0; }
  /// Whether the replicas are averaged after 1-based `step`.
  bool due(int64_t step) const { return every_ > 0 && step % every_ == 0; }
  /// Every rank of the mesh calls it at the same step: the replicas'
  /// mean, in place, by one all-reduce of all the weights.
  bool average(Executor &executor, std::string &error);
  int64_t weightCount() const { return count_; }

private:
  int64_t every_ = 0;
  std::vector<int> axes_;
  std::vector<uint32_t> weights_; // buffer ids
  int64_t count_ = 0;             // f32 elements in all
  std::vector<float> packed_;
};

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_LOCALSGD_H
