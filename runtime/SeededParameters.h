//===- SeededParameters.h - a generated model's parameters ------*- C++ -*-===//
#ifndef DTC_RUNTIME_SEEDEDPARAMETERS_H
#define DTC_RUNTIME_SEEDEDPARAMETERS_H

#include "plan.pb.h"

namespace dtc::runtime {

/// Draws a generated model's parameter (source.seeded, an f32 buffer of
/// `type`, the part of the whole tensor that source.slice names) into `out`.
/// A padded one (source.model_shape) gets the unpadded tensor's values
/// inside the model's shape and zeros past it.
void fillSeeded(const plan::ParameterSource &source, const plan::TensorType &type, void *out);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_SEEDEDPARAMETERS_H
