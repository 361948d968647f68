//===- StageCuts.cpp - where pipeline stages end, by the cost model -------===//
#include "compiler/StageCuts.h"

#include "compiler/CompileNotes.h"
#include "compiler/PipelineStages.h"
#include "compiler/TrainingStepParts.h"
#include "dialects/graph/AttrNames.h"
#include "plan/FormatBytes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <limits>

using namespace mlir;

namespace dtc {

namespace {

/// The cost model's cut replaces the FLOP-even one only when predicted
/// this much faster: below it the two are within the estimates' noise,
/// and the FLOP-even cut is the one a person expects.
constexpr double kCutMargin = 0.01;

/// What a run of the forward between two places to cut, with the
/// backward and optimizer ops that go with it, costs its stage.
struct Segment {
  double microBatch = 0, once = 0; // seconds a step
  double memory = 0, kept = 0;     // bytes; `kept` a micro-batch's in flight

  void add(const OpFigures &f) {
    (f.perMicroBatch ? microBatch : once) += f.seconds;
    memory += f.memory;
    kept += f.kept;
  }
  Segment &operator+=(const Segment &s) {
    microBatch += s.microBatch;
    once += s.once;
    memory += s.memory;
    kept += s.kept;
    return *this;
  }
  /// On a stage whose schedule keeps `copies` micro-batches in flight and
  /// stretches its micro-batches' work by `bubble`.
  double seconds(double bubble) const { return microBatch * bubble + once; }
  double bytes(double copies) const { return memory + kept * (copies - 1); }
};

} // namespace

std::optional<StageCut> cutStages(func::FuncOp main, ArrayRef<OpFigures> figures,
                                  const StageCutOptions &o) {
  Block &block = main.getBody().front();
  llvm::SetVector<Operation *> forward = forwardOps(block);
  Activations activations(block);
  int64_t p = o.stages, v = std::max<int64_t>(1, o.virtualStages), chunks = p * v;
  SmallVector<size_t> checkpoints = pipelineCheckpoints(forward, activations, chunks);
  if (p < 2 || int64_t(checkpoints.size()) + 1 < chunks || forward.empty())
    return std::nullopt;

  // The step in segments, one between each two places to cut, each op in
  // the segment it would run with were every place cut (the placement
  // rules are the same at any cut: docs/pipeline.md); constants, their
  // ops and the step's inputs on every stage.
  SmallVector<size_t> ends(checkpoints.begin(), checkpoints.end());
  ends.push_back(forward.size() - 1);
  size_t k = ends.size();
  llvm::DenseMap<Operation *, int> segmentOf =
      chunkOfOps(block, forward, activations, ends, int64_t(k));
  std::vector<Segment> segments(k);
  Segment every;
  for (const OpFigures &f : figures) {
    auto it = f.op ? segmentOf.find(f.op) : segmentOf.end();
    (it == segmentOf.end() || it->second == kAnyStage ? every : segments[size_t(it->second)])
        .add(f);
  }
  double bubble = (double(o.microBatches) + double(p - 1) / double(v)) / double(o.microBatches);
  // Chunk c (virtual stage c / p of stage c mod p) keeps this many
  // micro-batches' activations; what is on every stage, its first chunk's.
  auto copiesOf = [&](int64_t c) {
    return double(plan::stashSlots(o.schedule, p, c % p, o.microBatches, v, c / p, v + c / p));
  };

  // A cut as each chunk's last segment: each stage's figures.
  StageCut cut;
  auto evaluate = [&](ArrayRef<size_t> lastSegments, StageCut &into) {
    std::vector<Segment> stage(static_cast<size_t>(p));
    std::vector<double> bytes(size_t(p), 0);
    size_t first = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      Segment chunk;
      for (size_t s = first; s <= lastSegments[size_t(c)]; ++s)
        chunk += segments[s];
      first = lastSegments[size_t(c)] + 1;
      stage[size_t(c % p)] += chunk;
      bytes[size_t(c % p)] += chunk.bytes(copiesOf(c));
    }
    into.seconds.clear();
    into.memory.clear();
    into.lasts.clear();
    for (int64_t s = 0; s < p; ++s) {
      into.seconds.push_back(stage[size_t(s)].seconds(bubble) + every.seconds(bubble));
      into.memory.push_back(bytes[size_t(s)] + every.bytes(copiesOf(s)));
    }
    for (size_t last : lastSegments)
      into.lasts.push_back(ends[last]);
    into.stepSeconds = *std::max_element(into.seconds.begin(), into.seconds.end());
  };
  auto fits = [&](const StageCut &c) {
    return o.memoryLimit <= 0 ||
           *std::max_element(c.memory.begin(), c.memory.end()) <= o.memoryLimit;
  };

  // The FLOP-even cut, as dtc-pipeline-split makes it unmarked.
  llvm::DenseMap<size_t, size_t> segmentEndingAt;
  for (auto [i, end] : llvm::enumerate(ends))
    segmentEndingAt[end] = i;
  SmallVector<size_t> even;
  for (size_t last : balancedCuts(forwardCosts(forward), checkpoints, chunks))
    even.push_back(segmentEndingAt.lookup(last));
  evaluate(even, cut);
  cut.evenFlopsSeconds = cut.stepSeconds;
  cut.evenFlopsFits = cut.fits = fits(cut);
  if (v > 1 || o.evenFlops)
    return cut;

  // The dynamic program: best[s][j], the cheapest costliest stage of
  // stages 0..s with stage s ending at segment j, each within memory.
  std::vector<Segment> prefix(k + 1);
  for (size_t j = 0; j < k; ++j) {
    prefix[j + 1] = prefix[j];
    prefix[j + 1] += segments[j];
  }
  auto run = [&](size_t from, size_t to) { // segments from..to
    Segment s = prefix[to + 1];
    s.microBatch -= prefix[from].microBatch;
    s.once -= prefix[from].once;
    s.memory -= prefix[from].memory;
    s.kept -= prefix[from].kept;
    return s;
  };
  const double inf = std::numeric_limits<double>::infinity();
  auto stageCost = [&](int64_t s, size_t from, size_t to) {
    Segment r = run(from, to);
    double copies = copiesOf(s);
    if (o.memoryLimit > 0 && r.bytes(copies) + every.bytes(copies) > o.memoryLimit)
      return inf;
    return r.seconds(bubble) + every.seconds(bubble);
  };
  std::vector<std::vector<double>> best(size_t(p), std::vector<double>(k, inf));
  std::vector<std::vector<size_t>> from(size_t(p), std::vector<size_t>(k, 0));
  for (size_t j = 0; j < k; ++j)
    best[0][j] = stageCost(0, 0, j);
  for (int64_t s = 1; s < p; ++s)
    for (size_t j = size_t(s); j < k; ++j)
      for (size_t i = size_t(s) - 1; i < j; ++i) {
        if (best[size_t(s - 1)][i] >= best[size_t(s)][j])
          continue;
        double worst = std::max(best[size_t(s - 1)][i], stageCost(s, i + 1, j));
        if (worst < best[size_t(s)][j]) {
          best[size_t(s)][j] = worst;
          from[size_t(s)][j] = i;
        }
      }
  if (best[size_t(p - 1)][k - 1] == inf)
    return cut; // nothing fits by these figures: the memory check says so later
  SmallVector<size_t> dp(static_cast<size_t>(p));
  for (size_t s = size_t(p), j = k - 1; s-- > 0;) {
    dp[s] = j;
    j = from[s][j];
  }
  StageCut byCosts;
  evaluate(dp, byCosts);
  if (byCosts.stepSeconds < cut.evenFlopsSeconds * (1 - kCutMargin) || !cut.evenFlopsFits) {
    byCosts.evenFlopsSeconds = cut.evenFlopsSeconds;
    byCosts.evenFlopsFits = cut.evenFlopsFits;
    byCosts.byCosts = dp != even;
    return byCosts;
  }
  return cut;
}

void markStageEnds(func::FuncOp main, ArrayRef<size_t> lasts) {
  Block &block = main.getBody().front();
  for (Operation &op : block)
    op.removeAttr(attr::kStageEnd);
  llvm::SetVector<Operation *> forward = forwardOps(block);
  UnitAttr unit = UnitAttr::get(main.getContext());
  for (size_t c = 0; c + 1 < lasts.size(); ++c)
    forward[lasts[c]]->setAttr(attr::kStageEnd, unit);
}

std::string stageCutNote(const StageCut &cut) {
  std::string stages;
  for (size_t s = 0; s < cut.seconds.size(); ++s)
    stages += (s ? ", " : "") + formatSeconds(cut.seconds[s]) + " (" +
              plan::formatBytes(int64_t(cut.memory[s])) + ")";
  std::string text = "pipeline stages predicted at " + stages + " a step";
  if (!cut.byCosts)
    return text + ": cut to even out forward FLOPs";
  return text + ": cut by the cost model, where the FLOP-even cut's costliest stage " +
         (cut.evenFlopsFits ? "takes " + formatSeconds(cut.evenFlopsSeconds)
                            : std::string("does not fit"));
}

} // namespace dtc
