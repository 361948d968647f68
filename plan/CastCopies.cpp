//===- CastCopies.cpp -----------------------------------------------------===//
#include "plan/CastCopies.h"

#include <algorithm>
#include <map>

namespace dtc::plan {

bool castCopies(const RankProgram &program, bool standalone, std::vector<CastCopy> &copies,
                std::string &error) {
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
    if (copy.type().dtype() != BF16 || weight.type().dtype() != F32 ||
        copy.type().shape_size() != weight.type().shape_size() ||
        !std::equal(copy.type().shape().begin(), copy.type().shape().end(),
                    weight.type().shape().begin()) ||
        copy.sharding_size() != weight.sharding_size() ||
        isCastCopy(weight) || source.zeros() || source.accumulator() || source.has_seeded() ||
        source.slice_size() != 0) {
      error = what + ": not a bf16 buffer of an f32 weight's shape, made from nothing else";
      return false;
    }
    for (int d = 0; d < copy.sharding_size(); ++d)
      if (copy.sharding(d).SerializeAsString() != weight.sharding(d).SerializeAsString()) {
        error = what + ": split otherwise than its weight";
        return false;
      }
    copies.push_back({uint32_t(b), found->second});
  }
  return true;
}

} // namespace dtc::plan
