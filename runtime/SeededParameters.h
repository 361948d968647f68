//===- SeededParameters.h - a generated model's parameters ------*- C++ -*-===//
#ifndef DTC_RUNTIME_SEEDEDPARAMETERS_H
#define DTC_RUNTIME_SEEDEDPARAMETERS_H

#include "plan.pb.h"

namespace dtc::runtime {

/// Draws a generated model's parameter (source.seeded, an f32 buffer of
/// `type`, the part of the whole tensor that source.slice names) into `out`.
void fillSeeded(const plan::ParameterSource &source, const plan::TensorType &type, void *out);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_SEEDEDPARAMETERS_H
