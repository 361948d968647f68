//===- SeededParameters.cpp - a generated model's parameters --------------===//
//
// Element i (row-major in the whole tensor) of a seeded parameter is drawn
// from i alone, so a rank draws its shard's values without the rest.
//
//===----------------------------------------------------------------------===//
#include "runtime/SeededParameters.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace dtc::runtime {

namespace {

uint64_t splitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A standard normal from element `index` alone (Box-Muller on two hashed
/// uniforms), so a shard draws the same values the whole tensor would.
float seededNormal(uint64_t seed, uint64_t index) {
  uint64_t bits = splitMix64(seed ^ splitMix64(index));
  double u1 = (double((bits >> 11) | 1) ) * 0x1.0p-53; // (0, 1)
  double u2 = double(splitMix64(bits) >> 11) * 0x1.0p-53;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

} // namespace

void fillSeeded(const plan::ParameterSource &source, const plan::TensorType &type, void *out) {
  const plan::SeededInit &init = source.seeded();
  float *values = static_cast<float *>(out);
  int rank = type.shape_size();
  int64_t count = 1;
  for (int64_t d : type.shape())
    count *= d;
  // Walk the slice's elements in order, keeping the whole tensor's flat
  // index. A padded parameter's elements are numbered in the model's
  // shape, so that they are the unpadded tensor's; past it, zeros.
  bool padded = source.model_shape_size() == rank;
  auto numbered = [&](int d) { return padded ? source.model_shape(d) : init.shape(d); };
  std::vector<int64_t> index(size_t(rank), 0), strides(size_t(rank), 1);
  for (int d = rank - 2; d >= 0; --d)
    strides[size_t(d)] = strides[size_t(d) + 1] * numbered(d + 1);
  auto start = [&](int d) { return source.slice_size() ? source.slice(d).start() : 0; };
  for (int64_t i = 0; i < count; ++i) {
    uint64_t flat = 0;
    bool padding = false;
    for (int d = 0; d < rank; ++d) {
      int64_t at = start(d) + index[size_t(d)];
      padding |= padded && at >= source.model_shape(d);
      flat += uint64_t(at * strides[size_t(d)]);
    }
    if (padding)
      values[i] = 0.0f;
    else
      values[i] = init.std() == 0
                      ? float(init.mean())
                      : float(init.mean() + init.std() * seededNormal(init.seed(), flat));
    for (int d = rank - 1; d >= 0 && ++index[size_t(d)] == type.shape(d); --d)
      index[size_t(d)] = 0;
  }
}

} // namespace dtc::runtime
