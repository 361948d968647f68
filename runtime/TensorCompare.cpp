//===- TensorCompare.cpp --------------------------------------------------===//
#include "runtime/TensorCompare.h"

#include "plan/DType.h"
#include "runtime/cpu/BFloat16.h"

#include <cmath>
#include <cstring>

namespace dtc::runtime {
namespace {

template <class T> double load(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::is_same_v<T, cpu::BFloat16> || std::is_same_v<T, _Float16>)
    return double(float(v));
  else
    return double(v);
}

/// Element `i` of `t` as a double; nullptr-free: the dtype was checked.
double element(const HostTensor &t, int64_t i) {
  const char *p = t.bytes.data() + i * plan::dtypeBytes(t.type.dtype());
  switch (t.type.dtype()) {
  case plan::F64: return load<double>(p);
  case plan::F32: return load<float>(p);
  case plan::F16: return load<_Float16>(p);
  case plan::BF16: return load<cpu::BFloat16>(p);
  case plan::I64: return load<int64_t>(p);
  case plan::I32: return load<int32_t>(p);
  case plan::I16: return load<int16_t>(p);
  case plan::I8: return load<int8_t>(p);
  case plan::U64: return load<uint64_t>(p);
  case plan::U32: return load<uint32_t>(p);
  case plan::U16: return load<uint16_t>(p);
  case plan::U8: return load<uint8_t>(p);
  case plan::BOOL: return double(*p != 0);
  default: return 0;
  }
}

bool isFloat(plan::DType d) {
  return d == plan::F64 || d == plan::F32 || d == plan::F16 || d == plan::BF16;
}

std::string shapeText(const plan::TensorType &type) {
  std::string text = "[";
  for (int d = 0; d < type.shape_size(); ++d)
    text += (d ? "," : "") + std::to_string(type.shape(d));
  return text + "]";
}

} // namespace

bool compareTensors(const HostTensor &got, const HostTensor &want, const Tolerance &tolerance,
                    Comparison &result, std::string &error) {
  if (got.type.dtype() != want.type.dtype() ||
      !std::equal(got.type.shape().begin(), got.type.shape().end(), want.type.shape().begin(),
                  want.type.shape().end())) {
    error = std::string("the expected output is ") + plan::dtypeName(want.type.dtype()) + " " +
            shapeText(want.type) + ", the plan's " + plan::dtypeName(got.type.dtype()) + " " +
            shapeText(got.type);
    return false;
  }
  int64_t count = plan::elementCount(got.type);
  if (count < 0 || int64_t(got.bytes.size()) != count * plan::dtypeBytes(got.type.dtype()) ||
      got.bytes.size() != want.bytes.size()) {
    error = "the tensors' sizes do not match their types";
    return false;
  }
  bool exact = !isFloat(got.type.dtype());
  result = Comparison();
  double worstExcess = -1; // the first of equally bad ones
  int64_t worstAt = -1;
  for (int64_t i = 0; i < count; ++i) {
    double g = element(got, i), w = element(want, i);
    if (std::isnan(g) && std::isnan(w))
      continue;
    // NaN against a number, or an infinity against anything but itself,
    // is infinitely far (the tolerance below would let inf pass as inf).
    bool special = std::isnan(g) || std::isnan(w) || std::isinf(g) || std::isinf(w);
    double abs = g == w ? 0.0 : special ? INFINITY : std::fabs(g - w);
    result.maxAbs = std::max(result.maxAbs, abs);
    if (w != 0 && !special)
      result.maxRel = std::max(result.maxRel, abs / std::fabs(w));
    double allowed = exact || special ? 0.0 : tolerance.atol + tolerance.rtol * std::fabs(w);
    if (abs > allowed) {
      ++result.mismatches;
      if (abs - allowed > worstExcess) {
        worstExcess = abs - allowed;
        worstAt = i;
      }
    }
  }
  if (worstAt >= 0) {
    result.worstGot = element(got, worstAt);
    result.worstWant = element(want, worstAt);
    result.worst.assign(size_t(got.type.shape_size()), 0);
    for (int d = got.type.shape_size() - 1; d >= 0; --d) {
      result.worst[size_t(d)] = worstAt % got.type.shape(d);
      worstAt /= got.type.shape(d);
    }
  }
  return true;
}

} // namespace dtc::runtime
