//===- StageCuts.cpp - where pipeline stages end, by the cost model -------===//
#include "compiler/StageCuts.h"

#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/PipelineStages.h"
#include "compiler/TrainingStepParts.h"
#include "cost/CostModel.h"
#include "dialects/graph/AttrNames.h"
#include "plan/FormatBytes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <limits>
#include <map>

using namespace mlir;

namespace dtc {

namespace {

/// The cost model's cut replaces the FLOP-even one only when predicted
/// this much faster: below it the two are within the estimates' noise,
/// and the FLOP-even cut is the one a person expects.
constexpr double kCutMargin = 0.01;

/// The interleaved schedule's descent stops after this many rounds over
/// the chunk ends a segment: each round that moves one makes the cut
/// strictly better, so this only bounds a long creep.
constexpr size_t kRoundsPerSegment = 4;

/// Replicated stages: up to this many ways to share the copies among the
/// stages are each tried with their best cut; more, and the counts are
/// grown greedily from a cut instead.
constexpr size_t kReplicaWays = 64;

/// What a run of the forward between two places to cut, with the
/// backward and optimizer ops that go with it, costs its stage.
struct Segment {
  double microBatch = 0, once = 0; // seconds a step
  double memory = 0, kept = 0;     // bytes; `kept` a micro-batch's in flight
  double gradients = 0;            // bytes of its gradient accumulators

  void add(const OpFigures &f) {
    (f.perMicroBatch ? microBatch : once) += f.seconds;
    memory += f.memory;
    kept += f.kept;
    if (f.op && f.op->hasAttr(attr::kAccumulator))
      gradients += f.memory;
  }
  Segment &operator+=(const Segment &s) {
    microBatch += s.microBatch;
    once += s.once;
    memory += s.memory;
    kept += s.kept;
    gradients += s.gradients;
    return *this;
  }
  Segment operator-(const Segment &s) const {
    Segment d = *this;
    d.microBatch -= s.microBatch;
    d.once -= s.once;
    d.memory -= s.memory;
    d.kept -= s.kept;
    d.gradients -= s.gradients;
    return d;
  }
  /// On a stage whose schedule stretches its micro-batches' work by
  /// `bubble` ((M + P - 1) / M: P - 1 micro-batches' time idle);
  /// replicated, each replica runs 1 micro-batch in `replicas`, idles as
  /// long (the pipeline fills and drains through each replica alike), and
  /// sums its gradients with the others' in `reduce` seconds.
  double seconds(double bubble, int64_t replicas = 1, double reduce = 0) const {
    return microBatch / double(replicas) + microBatch * (bubble - 1) + once + reduce;
  }
  double bytes(double copies) const { return memory + kept * (copies - 1); }
};

/// The step in segments at some places to cut: each segment's figures,
/// and those of what runs on every stage.
struct Segmented {
  std::vector<Segment> segments;
  Segment every;
};

} // namespace

struct StageCutCache::Held {
  Operation *main = nullptr;
  const OpFigures *figures = nullptr;
  size_t count = 0;
  llvm::SetVector<Operation *> forward;
  std::optional<Activations> activations;
  std::map<std::vector<size_t>, Segmented> byEnds; // by the places cut
};

StageCutCache::StageCutCache() = default;
StageCutCache::~StageCutCache() = default;

std::optional<StageCut> cutStages(func::FuncOp main, ArrayRef<OpFigures> figures,
                                  const StageCutOptions &o) {
  Block &block = main.getBody().front();
  // The step's forward and activations, kept for the next cut of the same
  // step and figures when the options carry a cache.
  StageCutCache::Held local;
  StageCutCache::Held *held = o.cache ? o.cache->held.get() : nullptr;
  if (o.cache && (!held || held->main != main.getOperation() || held->figures != figures.data() ||
                  held->count != figures.size())) {
    o.cache->held = std::make_unique<StageCutCache::Held>();
    held = o.cache->held.get();
  }
  if (!held)
    held = &local;
  if (!held->activations) {
    held->main = main.getOperation();
    held->figures = figures.data();
    held->count = figures.size();
    held->forward = forwardOps(block);
    held->activations.emplace(block);
  }
  const llvm::SetVector<Operation *> &forward = held->forward;
  const Activations &activations = *held->activations;
  int64_t p = o.stages, v = std::max<int64_t>(1, o.virtualStages), chunks = p * v;
  SmallVector<size_t> checkpoints = pipelineCheckpoints(forward, activations, chunks);
  if (p < 2 || int64_t(checkpoints.size()) + 1 < chunks || forward.empty())
    return std::nullopt;

  // The step in segments, one between each two places to cut (a CNN's
  // block outputs at every resolution, not only those FLOP-even cuts take),
  // each op in the segment it would run with were every place cut (the
  // placement rules are the same at any cut: docs/pipeline.md);
  // constants, their ops and the step's inputs on every stage.
  SmallVector<size_t> ends = stageCutCandidates(forward, activations, chunks);
  if (ends.empty() || ends.back() != forward.size() - 1)
    ends.push_back(forward.size() - 1);
  size_t k = ends.size();
  auto [known, fresh] = held->byEnds.try_emplace(std::vector<size_t>(ends.begin(), ends.end()));
  if (fresh) {
    llvm::DenseMap<Operation *, int> segmentOf =
        chunkOfOps(block, forward, activations, ends, int64_t(k));
    Segmented &step = known->second;
    step.segments.resize(k);
    for (const OpFigures &f : figures) {
      auto it = f.op ? segmentOf.find(f.op) : segmentOf.end();
      (it == segmentOf.end() || it->second == kAnyStage ? step.every
                                                        : step.segments[size_t(it->second)])
          .add(f);
    }
  }
  const std::vector<Segment> &segments = known->second.segments;
  const Segment &every = known->second.every;
  // A chunk ending at segment j sends the activation there forward and
  // receives its gradient back, each micro-batch.
  std::vector<double> crossing(k, 0);
  if (o.transfer)
    for (size_t j = 0; j + 1 < k; ++j)
      crossing[j] = 2 * o.transfer(double(tensorBytes(forward[ends[j]]->getResult(0))));
  double bubble = (double(o.microBatches) + double(p - 1) / double(v)) / double(o.microBatches);
  // Replicated stages (cutReplicatedStages): each stage's count, held.
  std::vector<int64_t> replicas(size_t(p), 1);
  if (int64_t(o.replicas.size()) == p && v == 1)
    replicas = o.replicas;
  bool replicate = o.copies > p;
  if (replicate && (v > 1 || o.schedule == plan::INTERLEAVED))
    return std::nullopt;
  auto reduceOf = [&](int64_t stage, const Segment &r) {
    int64_t n = replicas[size_t(stage)];
    return n > 1 && o.replicaReduce ? o.replicaReduce(r.gradients + every.gradients, n) : 0.0;
  };
  // Chunk c (virtual stage c / p of stage c mod p) keeps this many
  // micro-batches' activations; what is on every stage, its first chunk's.
  // Each (chunk, replica count) once: stashSlots walks the stage's whole
  // schedule, and the cuts' search asks for it per cut it weighs (GPT-3
  // on --devices 1024, 16 stages of 192 micro-batches: 8 minutes of
  // schedules before this cache, most of the compile).
  // A replica's order depends on its stage's count and its warm-up (the
  // later stages' counts: plan::replicatedWarmup).
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> copiesKnown;
  auto copiesOf = [&](int64_t c) {
    int64_t s = c % p, n = replicas[size_t(s)];
    auto [it, fresh] =
        copiesKnown.try_emplace({c, n, plan::replicatedWarmup(p, s, replicas)}, 0.0);
    if (fresh)
      it->second =
          double(plan::stashSlots(o.schedule, p, s, o.microBatches, v, c / p, v + c / p, replicas));
    return it->second;
  };

  // A cut as each chunk's last segment: each stage's figures.
  StageCut cut;
  auto overLimit = [&](const StageCut &c) { // bytes the fullest device is over
    double most = *std::max_element(c.memory.begin(), c.memory.end());
    return o.memoryLimit > 0 ? std::max(0.0, most - o.memoryLimit) : 0.0;
  };
  auto evaluate = [&](ArrayRef<size_t> lastSegments, StageCut &into) {
    std::vector<Segment> stage(static_cast<size_t>(p));
    std::vector<double> bytes(size_t(p), 0);
    size_t first = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      Segment chunk;
      for (size_t s = first; s <= lastSegments[size_t(c)]; ++s)
        chunk += segments[s];
      chunk.microBatch += crossing[lastSegments[size_t(c)]];
      first = lastSegments[size_t(c)] + 1;
      stage[size_t(c % p)] += chunk;
      bytes[size_t(c % p)] += chunk.bytes(copiesOf(c));
    }
    into.seconds.clear();
    into.memory.clear();
    into.lasts.clear();
    for (int64_t s = 0; s < p; ++s) {
      int64_t n = replicas[size_t(s)];
      into.seconds.push_back(stage[size_t(s)].seconds(bubble, n, reduceOf(s, stage[size_t(s)])) +
                             every.seconds(bubble, n));
      into.memory.push_back(bytes[size_t(s)] + every.bytes(copiesOf(s)));
    }
    if (llvm::any_of(replicas, [](int64_t n) { return n > 1; }))
      into.replicas = replicas;
    for (size_t last : lastSegments)
      into.lasts.push_back(ends[last]);
    into.stepSeconds = *std::max_element(into.seconds.begin(), into.seconds.end());
    into.fits = overLimit(into) == 0;
  };

  // One chunk a stage, the dynamic program: best[s][j], the cheapest
  // costliest stage of stages 0..s with stage s ending at segment j, each
  // within memory.
  auto program = [&]() -> std::optional<SmallVector<size_t>> {
    std::vector<Segment> prefix(k + 1);
    for (size_t j = 0; j < k; ++j) {
      prefix[j + 1] = prefix[j];
      prefix[j + 1] += segments[j];
    }
    auto run = [&](size_t from, size_t to) { // segments from..to
      Segment s = prefix[to + 1] - prefix[from];
      s.microBatch += crossing[to];
      return s;
    };
    const double inf = std::numeric_limits<double>::infinity();
    auto stageCost = [&](int64_t s, size_t from, size_t to) {
      Segment r = run(from, to);
      double copies = copiesOf(s);
      if (o.memoryLimit > 0 && r.bytes(copies) + every.bytes(copies) > o.memoryLimit)
        return inf;
      int64_t n = replicas[size_t(s)];
      return r.seconds(bubble, n, reduceOf(s, r)) + every.seconds(bubble, n);
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
      return std::nullopt;
    SmallVector<size_t> lasts(static_cast<size_t>(p));
    for (size_t s = size_t(p), j = k - 1; s-- > 0;) {
      lasts[s] = j;
      j = from[s][j];
    }
    return lasts;
  };

  // The chunk ends that make the costliest chunk cheapest, each chunk on
  // its own (the minimax partition of the segments into `chunks` runs).
  auto evenChunks = [&]() {
    std::vector<double> cost(k);
    for (size_t j = 0; j < k; ++j)
      cost[j] = segments[j].seconds(bubble);
    const double inf = std::numeric_limits<double>::infinity();
    // best[c][j]: chunks 0..c, chunk c ending at segment j.
    std::vector<std::vector<double>> best(size_t(chunks), std::vector<double>(k, inf));
    std::vector<std::vector<size_t>> from(size_t(chunks), std::vector<size_t>(k, 0));
    double run = 0;
    for (size_t j = 0; j < k; ++j)
      best[0][j] = (run += cost[j]) + crossing[j];
    for (size_t c = 1; c < size_t(chunks); ++c)
      for (size_t j = c; j < k; ++j) {
        double piece = crossing[j];
        for (size_t i = j; i-- > c - 1;) { // chunk c is segments i + 1 .. j
          piece += cost[i + 1];
          if (piece >= best[c][j])
            break;
          double worst = std::max(best[c - 1][i], piece);
          if (worst < best[c][j]) {
            best[c][j] = worst;
            from[c][j] = i;
          }
        }
      }
    SmallVector<size_t> lasts(static_cast<size_t>(chunks));
    for (size_t c = size_t(chunks), j = k - 1; c-- > 0;) {
      lasts[c] = j;
      j = from[c][j];
    }
    return lasts;
  };

  // Interleaved, a stage's chunks lie apart in the step: from `start`,
  // each chunk end moved a segment either way while that brings the
  // fullest device under the limit, or (within it) the costliest stage
  // down. Nothing when the cut it ends at does not fit.
  auto descend = [&](ArrayRef<size_t> start) -> std::optional<SmallVector<size_t>> {
    SmallVector<size_t> lasts(start.begin(), start.end());
    StageCut at;
    evaluate(lasts, at);
    auto score = [&](const StageCut &c) { return std::pair(overLimit(c), c.stepSeconds); };
    for (size_t round = 0; round < kRoundsPerSegment * k; ++round) {
      bool moved = false;
      for (size_t c = 0; c + 1 < lasts.size(); ++c)
        for (bool later : {false, true}) {
          size_t low = c ? lasts[c - 1] + 1 : 0, high = lasts[c + 1] - 1;
          if (later ? lasts[c] >= high : lasts[c] <= low)
            continue;
          SmallVector<size_t> tried = lasts;
          tried[c] = later ? lasts[c] + 1 : lasts[c] - 1;
          StageCut then;
          evaluate(tried, then);
          if (score(then) < score(at)) {
            lasts = std::move(tried);
            at = std::move(then);
            moved = true;
          }
        }
      if (!moved)
        break;
    }
    if (!at.fits)
      return std::nullopt;
    return lasts;
  };

  // Replicated stages: from a cut, each stage's replica count (every
  // stage one, then each spare copy to the costliest stage whose next
  // count divides the micro-batches), then the best cut with those
  // counts, and again while the cut moves.
  auto replicatedCut = [&](ArrayRef<size_t> from) -> std::optional<StageCut> {
    SmallVector<size_t> lasts(from.begin(), from.end());
    std::optional<StageCut> best;
    auto consider = [&](const SmallVector<size_t> &cutAt) {
      StageCut c, even;
      evaluate(cutAt, c);
      evaluate(from, even); // with the same replicas
      c.evenFlopsSeconds = even.stepSeconds;
      c.evenFlopsFits = even.fits;
      c.byCosts = cutAt != SmallVector<size_t>(from.begin(), from.end());
      if (c.fits && (!best || c.stepSeconds < best->stepSeconds))
        best = c;
    };
    // Few ways to share the copies (every count dividing the
    // micro-batches): each, with its best cut.
    std::vector<std::vector<int64_t>> ways;
    std::vector<int64_t> way;
    std::function<void(int64_t)> share = [&](int64_t left) {
      if (ways.size() > kReplicaWays)
        return;
      if (int64_t(way.size()) == p) {
        if (left == 0)
          ways.push_back(way);
        return;
      }
      for (int64_t n = 1; n <= left - (p - int64_t(way.size()) - 1); ++n)
        if (o.microBatches % n == 0) {
          way.push_back(n);
          share(left - n);
          way.pop_back();
        }
    };
    share(o.copies);
    if (ways.size() <= kReplicaWays) {
      for (const std::vector<int64_t> &counts : ways) {
        replicas = counts;
        if (std::optional<SmallVector<size_t>> at = program())
          consider(*at);
      }
      return best;
    }
    for (int round = 0; round < 3; ++round) {
      std::vector<Segment> stage(static_cast<size_t>(p));
      for (size_t s = 0, first = 0; s < size_t(p); first = lasts[s] + 1, ++s) {
        for (size_t j = first; j <= lasts[s]; ++j)
          stage[s] += segments[j];
        stage[s].microBatch += crossing[lasts[s]];
      }
      std::vector<int64_t> counts(size_t(p), 1);
      auto secondsAt = [&](size_t s, int64_t n) {
        replicas[s] = n;
        return stage[s].seconds(bubble, n, reduceOf(int64_t(s), stage[s])) +
               every.seconds(bubble, n);
      };
      int64_t spare = o.copies - p;
      while (spare > 0) {
        int64_t grow = -1, to = 0;
        double worst = -1;
        for (size_t s = 0; s < size_t(p); ++s) {
          int64_t n = counts[s] + 1;
          while (n - counts[s] <= spare && o.microBatches % n != 0)
            ++n;
          if (n - counts[s] > spare)
            continue;
          replicas = counts;
          if (double t = secondsAt(s, counts[s]); t > worst) {
            worst = t;
            grow = int64_t(s);
            to = n;
          }
        }
        if (grow < 0)
          return best; // the copies left fit no stage's count
        spare -= to - counts[size_t(grow)];
        counts[size_t(grow)] = to;
      }
      replicas = counts;
      std::optional<SmallVector<size_t>> again = program();
      if (!again)
        return best;
      consider(*again);
      if (*again == lasts)
        break;
      lasts = *again;
    }
    return best;
  };

  // The FLOP-even cut, as dtc-pipeline-split makes it unmarked.
  llvm::DenseMap<size_t, size_t> segmentEndingAt;
  for (auto [i, end] : llvm::enumerate(ends))
    segmentEndingAt[end] = i;
  SmallVector<size_t> even;
  for (size_t last : balancedCuts(forwardCosts(forward), checkpoints, chunks))
    even.push_back(segmentEndingAt.lookup(last));
  if (replicate)
    return replicatedCut(even);
  evaluate(even, cut);
  cut.evenFlopsSeconds = cut.stepSeconds;
  cut.evenFlopsFits = cut.fits;
  if (o.evenFlops)
    return cut;
  std::optional<SmallVector<size_t>> better = v > 1 ? descend(even) : program();
  // Interleaved, the descent is local: it also starts from the chunks
  // whose own costs are most even (a chunk's micro-batch work, its cut's
  // transfers and its once-a-step work; the minimax of contiguous pieces),
  // and the better end is kept.
  if (v > 1) {
    if (std::optional<SmallVector<size_t>> other = descend(evenChunks())) {
      StageCut a, b;
      evaluate(*other, b);
      if (!better || (evaluate(*better, a), std::pair(overLimit(b), b.stepSeconds) <
                                                std::pair(overLimit(a), a.stepSeconds)))
        better = other;
    }
  }
  if (!better)
    return cut; // nothing fits by these figures: the memory check says so later
  StageCut byCosts;
  evaluate(*better, byCosts);
  if (byCosts.fits &&
      (byCosts.stepSeconds < cut.evenFlopsSeconds * (1 - kCutMargin) || !cut.evenFlopsFits)) {
    byCosts.evenFlopsSeconds = cut.evenFlopsSeconds;
    byCosts.evenFlopsFits = cut.evenFlopsFits;
    byCosts.byCosts = *better != even;
    return byCosts;
  }
  return cut;
}

std::function<double(double)> stageTransfer(const cost::Cluster &cluster, int64_t stageDevices) {
  int64_t perNode = std::max<int64_t>(1, cluster.devicesPerNode);
  cost::Link link = stageDevices < perNode ? cluster.intraNode : cluster.interNode;
  double devices = double(std::max<int64_t>(1, stageDevices));
  return [link, devices](double bytes) {
    return cost::collectiveSeconds(cost::Collective::SendRecv, cost::Algorithm::Ring, 2,
                                   bytes / devices, link);
  };
}

std::function<double(double, int64_t)> replicaReduce(const cost::Cluster &cluster,
                                                     int64_t stageDevices) {
  int64_t perNode = std::max<int64_t>(1, cluster.devicesPerNode);
  cost::Cluster copy = cluster;
  return [copy, perNode, stageDevices](double bytes, int64_t replicas) {
    const cost::Link &link =
        stageDevices * replicas <= perNode ? copy.intraNode : copy.interNode;
    return cost::collectiveSeconds(cost::Collective::AllReduce, cost::Algorithm::Ring, replicas,
                                   bytes, link);
  };
}

void markStageEnds(func::FuncOp main, const StageCut &cut) {
  Block &block = main.getBody().front();
  for (Operation &op : block)
    op.removeAttr(attr::kStageEnd);
  if (!cut.byCosts)
    return;
  ArrayRef<size_t> lasts = cut.lasts;
  llvm::SetVector<Operation *> forward = forwardOps(block);
  UnitAttr unit = UnitAttr::get(main.getContext());
  for (size_t c = 0; c + 1 < lasts.size(); ++c)
    forward[lasts[c]]->setAttr(attr::kStageEnd, unit);
}

std::string stageCutNote(const StageCut &cut) {
  std::string text = "pipeline stages predicted at ";
  if (!cut.replicas.empty()) {
    std::string counts;
    for (int64_t n : cut.replicas)
      counts += (counts.empty() ? "" : ",") + std::to_string(n);
    text = "pipeline stages (replicated " + counts + ") predicted at ";
  }
  if (cut.seconds.size() <= 4) { // each stage's
    for (size_t s = 0; s < cut.seconds.size(); ++s)
      text += (s ? ", " : "") + formatSeconds(cut.seconds[s]) + " (" +
              plan::formatBytes(int64_t(cut.memory[s])) + ")";
    text += " a step";
  } else { // the range, and which stage sets its top
    auto range = [](const std::vector<double> &v, auto format) {
      auto [low, high] = std::minmax_element(v.begin(), v.end());
      return format(*low) + " to " + format(*high) + " (stage " +
             std::to_string(high - v.begin()) + ")";
    };
    text += range(cut.seconds, [](double x) { return formatSeconds(x); }) + " a step, " +
            range(cut.memory, [](double x) { return plan::formatBytes(int64_t(x)); }) +
            " a device";
  }
  if (!cut.byCosts)
    return text + ": cut to even out forward FLOPs";
  return text + ": cut by the cost model, where the FLOP-even cut's costliest stage " +
         (cut.evenFlopsFits ? "takes " + formatSeconds(cut.evenFlopsSeconds)
                            : std::string("does not fit"));
}

} // namespace dtc
