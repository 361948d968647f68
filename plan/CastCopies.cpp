//===- CastCopies.cpp -----------------------------------------------------===//
#include "plan/CastCopies.h"

#include "plan/Sharding.h"

#include <algorithm>
#include <map>

namespace dtc::plan {

namespace {
/// A buffer's whole shape: its part's times the parts each dim is cut into.
std::vector<int64_t> wholeShape(const Buffer &buffer, const std::vector<int64_t> &axisSizes) {
  std::vector<int64_t> whole(buffer.type().shape().begin(), buffer.type().shape().end());
  std::vector<int64_t> parts = shardParts(buffer, axisSizes);
  for (size_t d = 0; d < whole.size() && d < parts.size(); ++d)
    whole[d] *= parts[d];
  return whole;
}

bool sameSplit(const Buffer &a, const Buffer &b) {
  if (a.sharding_size() != b.sharding_size())
    return false;
  for (int d = 0; d < a.sharding_size(); ++d)
    if (a.sharding(d).SerializeAsString() != b.sharding(d).SerializeAsString())
      return false;
  return true;
}
} // namespace

bool castCopies(const RankProgram &program, const std::vector<int64_t> &axisSizes,
                bool standalone, std::vector<CastCopy> &copies, std::string &error) {
  copies.clear();
  std::map<std::string, uint32_t> parameters;
  for (int b = 0; b < program.buffers_size(); ++b)
    if (program.buffers(b).has_parameter())
      parameters.emplace(program.buffers(b).parameter().initializer(), uint32_t(b));
  for (int b = 0; b < program.buffers_size(); ++b) {
    const Buffer &copy = program.buffers(b);
    if (!isCastCopy(copy))
      continue;
    const ParameterSource &source = copy.parameter();
    std::string what = "parameter '" + source.initializer() + "' (the bf16 copy of '" +
                       source.cast_of() + "')";
    auto found = parameters.find(source.cast_of());
    if (found == parameters.end() && standalone && copy.type().dtype() == BF16 &&
        !source.zeros() && !source.accumulator() && !source.has_seeded() &&
        source.slice_size() == 0) {
      copies.push_back({uint32_t(b), CastCopy::kFromModel});
      continue;
    }
    if (found == parameters.end()) {
      error = what + ": the program has no parameter '" + source.cast_of() + "'";
      return false;
    }
    const Buffer &weight = program.buffers(int(found->second));
    bool same = sameSplit(copy, weight);
    if (copy.type().dtype() != BF16 || weight.type().dtype() != F32 ||
        wholeShape(copy, axisSizes) != wholeShape(weight, axisSizes) ||
        (same && !std::equal(copy.type().shape().begin(), copy.type().shape().end(),
                             weight.type().shape().begin(), weight.type().shape().end())) ||
        isCastCopy(weight) || source.zeros() || source.accumulator() || source.has_seeded() ||
        source.slice_size() != 0) {
      auto shape = [&](const Buffer &buffer) {
        std::string text;
        for (int64_t d : wholeShape(buffer, axisSizes))
          text += (text.empty() ? "" : ",") + std::to_string(d);
        return "[" + text + "]";
      };
      error = what + ": not a bf16 tensor of an f32 weight's shape, made from nothing else "
                     "(the copy's whole shape " + shape(copy) + ", the weight's " +
              shape(weight) + ")";
      return false;
    }
    copies.push_back({uint32_t(b), found->second, !same});
  }
  return true;
}

} // namespace dtc::plan
