//===- InstructionWaves.cpp - small instructions run side by side ---------===//
#include "runtime/InstructionWaves.h"

#include <algorithm>
#include <set>

namespace dtc::runtime {

namespace {

/// Whether `later` must run after `earlier`.
bool dependsOn(const InstructionAccess &later, const InstructionAccess &earlier) {
  return conflicts(later.reads, later.writes, earlier.reads, earlier.writes);
}

/// Instructions [begin, end) in levels: each one level past the highest
/// it depends on.
Wave levelled(const std::vector<InstructionAccess> &instructions, size_t begin, size_t end) {
  Wave wave{begin, end, {}};
  std::vector<size_t> level(end - begin, 0);
  for (size_t k = begin; k < end; ++k) {
    for (size_t j = begin; j < k; ++j)
      if (level[j - begin] + 1 > level[k - begin] && dependsOn(instructions[k], instructions[j]))
        level[k - begin] = level[j - begin] + 1;
    if (wave.levels.size() <= level[k - begin])
      wave.levels.resize(level[k - begin] + 1);
    wave.levels[level[k - begin]].push_back(k);
  }
  // The largest first: threads claim them in order as they come free.
  auto bytes = [&](size_t k) {
    int64_t total = 0;
    for (const auto *ranges : {&instructions[k].reads, &instructions[k].writes})
      for (const ByteRange &r : *ranges)
        total += r.end - r.begin;
    return total;
  };
  for (std::vector<size_t> &instructionsOfLevel : wave.levels)
    std::stable_sort(instructionsOfLevel.begin(), instructionsOfLevel.end(),
                     [&](size_t a, size_t b) { return bytes(a) > bytes(b); });
  return wave;
}

} // namespace

std::vector<Wave> findWaves(const std::vector<InstructionAccess> &instructions,
                            const std::vector<size_t> &boundaries, size_t window) {
  std::set<size_t> cuts(boundaries.begin(), boundaries.end());
  std::vector<Wave> waves;
  size_t i = 0, n = instructions.size();
  while (i < n) {
    if (!instructions[i].alongside) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < n && instructions[end].alongside && !cuts.count(end) && end - i < window)
      ++end;
    Wave wave = levelled(instructions, i, end);
    if (wave.levels.size() < end - i) // some level holds two or more
      waves.push_back(std::move(wave));
    i = end;
  }
  return waves;
}

} // namespace dtc::runtime
