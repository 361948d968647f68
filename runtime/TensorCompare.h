//===- TensorCompare.h - a result against the expected one ------*- C++ -*-===//
//
// `dtc run --check`: each output against the expected output of an ONNX
// test-data folder (output_N.pb beside input_N.pb), element by element as
// numpy.allclose: |got - want| <= atol + rtol * |want|; integers and bools
// exactly; NaN matches NaN.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TENSORCOMPARE_H
#define DTC_RUNTIME_TENSORCOMPARE_H

#include "runtime/HostTensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::runtime {

struct Tolerance {
  double rtol = 1e-3, atol = 1e-5;
};

struct Comparison {
  double maxAbs = 0, maxRel = 0; // over all elements (rel: where want != 0)
  int64_t mismatches = 0;        // elements outside the tolerance
  std::vector<int64_t> worst;    // the index of the one furthest outside it
  double worstGot = 0, worstWant = 0;
};

/// Compares `got` with `want`; false with `error` when they cannot be
/// compared (another dtype or shape), else true with `result` filled.
bool compareTensors(const HostTensor &got, const HostTensor &want, const Tolerance &tolerance,
                    Comparison &result, std::string &error);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_TENSORCOMPARE_H
