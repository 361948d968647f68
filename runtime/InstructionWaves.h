//===- InstructionWaves.h - small instructions run side by side -*- C++ -*-===//
//
// A small model's step is hundreds of instructions too small to split over
// threads (an elementwise op on 8192 values takes a microsecond; a
// parallel region costs about as much), so a rank's threads sat idle while
// one ran them in turn: 2 threads ran a 2-layer GPT-2's step 1.3x faster
// than one, where 2 ranks ran it 1.85x faster. Many of them do not depend
// on each other (AdamW's moments of every weight, a layer norm's two
// gradients). A wave is a run of consecutive instructions that may run
// alongside others, in levels: each level's instructions touch no bytes
// another of the level writes, and every instruction comes after those of
// the wave it depends on (reads what they write, writes what they read or
// write), so running the levels in order, each level's instructions at
// once, computes what running them in turn does.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_INSTRUCTIONWAVES_H
#define DTC_RUNTIME_INSTRUCTIONWAVES_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtc::runtime {

/// A run of bytes in a rank's arena: [begin, end).
struct ByteRange {
  int64_t begin = 0, end = 0;
  bool overlaps(const ByteRange &o) const { return begin < o.end && o.begin < end; }
};

/// Whether any range of `a` overlaps any of `b`.
inline bool anyOverlap(const std::vector<ByteRange> &a, const std::vector<ByteRange> &b) {
  for (const ByteRange &x : a)
    for (const ByteRange &y : b)
      if (x.overlaps(y))
        return true;
  return false;
}

/// Whether work reading `reads` and writing `writes` must come after work
/// that read `earlierReads` and wrote `earlierWrites`: it reads what that
/// wrote, or writes what that read or wrote.
inline bool conflicts(const std::vector<ByteRange> &reads, const std::vector<ByteRange> &writes,
                      const std::vector<ByteRange> &earlierReads,
                      const std::vector<ByteRange> &earlierWrites) {
  return anyOverlap(reads, earlierWrites) || anyOverlap(writes, earlierReads) ||
         anyOverlap(writes, earlierWrites);
}

/// An instruction writing more than this is split over the threads by its
/// kernel (cpu::kSerialWork f32 values and up: 32768 x 4 bytes); run
/// beside another on one thread it would leave a thread idle when the two
/// differ in size (a 4-layer, 256-wide GPT-2's step took 3% longer), so
/// waves take only smaller ones.
constexpr int64_t kSmallInstructionBytes = int64_t(128) << 10;

/// What one instruction touches, and whether it may run alongside others
/// (a kernel whose state is its own, not a collective or a transfer, and
/// small: kSmallInstructionBytes).
struct InstructionAccess {
  bool alongside = false;
  std::vector<ByteRange> reads, writes;
};

struct Wave {
  size_t begin = 0, end = 0;              // instructions [begin, end)
  std::vector<std::vector<size_t>> levels; // instruction indices, each level's largest first
};

/// The waves of `instructions`: maximal runs of consecutive `alongside`
/// instructions, cut at each of `boundaries` (the parts of a step run
/// apart), levelled as above; a run whose levels each hold one
/// instruction is no wave. At most `window` instructions a wave (the
/// levelling is quadratic in it).
std::vector<Wave> findWaves(const std::vector<InstructionAccess> &instructions,
                            const std::vector<size_t> &boundaries, size_t window = 256);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_INSTRUCTIONWAVES_H
