//===- ReduceKernel.cpp - sum, mean, max, min over axes -------------------===//
//
// The input's dims are first simplified: size-1 dims dropped, neighbours of
// the same kind (reduced or kept) merged. What is left alternates kept and
// reduced dims, and the innermost one decides the loop:
//  - reduced innermost: each output folds contiguous runs of the input;
//  - kept innermost: a block of adjacent outputs folds contiguous runs
//    together, one run per reduced position.
// Either way each output is written by one thread, so outputs split over
// the pool without locks.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <limits>
#include <type_traits>

namespace dtc::runtime::cpu {
namespace {

template <class Acc> struct SumFold {
  static Acc init() { return Acc(0); }
  static Acc apply(Acc acc, Acc v) { return acc + v; }
};

template <class Acc> struct MaxFold {
  static Acc init() {
    return std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity()
                                                  : std::numeric_limits<Acc>::lowest();
  }
  static Acc apply(Acc acc, Acc v) { return std::max(acc, v); }
};

template <class Acc> struct MinFold {
  static Acc init() {
    return std::numeric_limits<Acc>::has_infinity ? std::numeric_limits<Acc>::infinity()
                                                  : std::numeric_limits<Acc>::max();
  }
  static Acc apply(Acc acc, Acc v) { return std::min(acc, v); }
};

/// The simplified loop nest, precomputed.
struct ReducePlan {
  bool innerReduced = false;
  int64_t inner = 1;          // the innermost dim's size (contiguous)
  Shape keptSizes, keptStrides; // the kept dims outside the innermost, input strides
  std::vector<int64_t> reducedOffsets; // input offsets of the reduced positions outside the innermost
  int64_t count = 1;          // input elements per output (MEAN's divisor)
  bool mean = false;
};

/// Outputs folded together when the innermost dim is kept.
constexpr int64_t kReduceColumns = 256;

/// Partial sums per output when the innermost dim is reduced (a power of 2).
constexpr int64_t kSumLanes = 16;

template <class T, class Acc, class Fold> class ReduceKernel final : public Kernel {
public:
  explicit ReduceKernel(ReducePlan loops) : p_(std::move(loops)) {}
  bool runsAlongsideOthers() const override { return true; } // no state but its plan

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &) override {
    const T *x = static_cast<const T *>(inputs[0]);
    T *y = static_cast<T *>(outputs[0]);
    int64_t outer = product(p_.keptSizes);
    int64_t runs = int64_t(p_.reducedOffsets.size());
    if (p_.innerReduced) {
      pool.parallelFor(outer, grainFor(runs * p_.inner), [&](int64_t b, int64_t e) {
        // Kept positions by an odometer: a division per kept dim per output
        // took longer than summing a short row.
        Odometer kept;
        kept.start(p_.keptSizes.data(), p_.keptStrides.data(), p_.keptSizes.size(), b);
        for (int64_t o = b; o < e; ++o, kept.next())
          y[o] = finish(foldRuns(x + kept.offset()));
      });
      return true;
    }
    // Narrower blocks of columns when there are too few to share out: a
    // bias's gradient sums thousands of rows into one row of a few hundred
    // columns, which one block of kReduceColumns would leave to one thread.
    // Each column is folded in the same order whatever the width.
    int64_t columns = kReduceColumns;
    while (columns > 32 && outer * ((p_.inner + columns - 1) / columns) < 2 * pool.threads())
      columns /= 2;
    int64_t blocks = (p_.inner + columns - 1) / columns;
    pool.parallelFor(outer * blocks, grainFor(runs * columns), [&](int64_t b, int64_t e) {
      Acc acc[kReduceColumns];
      for (int64_t item = b; item < e; ++item) {
        int64_t o = item / blocks, c0 = item % blocks * columns;
        int64_t width = std::min(columns, p_.inner - c0);
        const T *base = x + keptOffset(o) + c0;
        std::fill(acc, acc + width, Fold::init());
        for (int64_t offset : p_.reducedOffsets)
          for (int64_t c = 0; c < width; ++c)
            acc[c] = Fold::apply(acc[c], Acc(base[offset + c]));
        T *out = y + o * p_.inner + c0;
        for (int64_t c = 0; c < width; ++c)
          out[c] = finish(acc[c]);
      }
    });
    return true;
  }

private:
  /// The fold of one output's contiguous runs (reduced innermost). A sum
  /// keeps kSumLanes partial sums, element j of a run's whole vectors going
  /// to lane j mod kSumLanes and the run's tail to a sum of its own, added
  /// pairwise at the end: one chain of dependent adds
  /// held a sum to one add per add latency; independent lanes vectorise. The order is fixed, so results do not
  /// depend on the thread count. Max and min keep one chain (their NaN
  /// handling follows the element order).
  Acc foldRuns(const T *base) const {
    if constexpr (std::is_same_v<Fold, SumFold<Acc>>) {
      Acc lanes[kSumLanes] = {}, tail = 0;
      for (int64_t offset : p_.reducedOffsets) {
        const T *run = base + offset;
        int64_t j = 0;
        for (; j + kSumLanes <= p_.inner; j += kSumLanes)
          for (int64_t l = 0; l < kSumLanes; ++l)
            lanes[l] += Acc(run[j + l]);
        // Apart from the lanes: a scalar store into them stalls their
        // vector load (store forwarding), which dominated short rows.
        for (; j < p_.inner; ++j)
          tail += Acc(run[j]);
      }
      for (int64_t width = kSumLanes / 2; width > 0; width /= 2)
        for (int64_t l = 0; l < width; ++l)
          lanes[l] += lanes[l + width];
      return lanes[0] + tail;
    }
    Acc acc = Fold::init();
    for (int64_t offset : p_.reducedOffsets)
      for (int64_t j = 0; j < p_.inner; ++j)
        acc = Fold::apply(acc, Acc(base[offset + j]));
    return acc;
  }

  /// The input offset of kept position `o` (row-major over keptSizes).
  int64_t keptOffset(int64_t o) const {
    int64_t offset = 0;
    for (size_t d = p_.keptSizes.size(); d-- > 0;) {
      offset += o % p_.keptSizes[d] * p_.keptStrides[d];
      o /= p_.keptSizes[d];
    }
    return offset;
  }

  T finish(Acc acc) const {
    if constexpr (std::is_floating_point_v<Acc>)
      if (p_.mean)
        return T(acc / Acc(p_.count)); // 0/0 is NaN for an empty mean, as wanted
    return T(acc);
  }

  ReducePlan p_;
};

/// Simplifies the dims and precomputes the loops (see the file comment).
ReducePlan planReduce(const Shape &x, const std::vector<bool> &reduced) {
  // (size, input stride, reduced) with size-1 dims dropped, neighbours merged.
  struct Dim {
    int64_t size, stride;
    bool reduced;
  };
  std::vector<Dim> dims;
  ReducePlan loops;
  int64_t stride = 1;
  for (size_t d = x.size(); d-- > 0;) {
    if (reduced[d])
      loops.count *= x[d];
    if (x[d] != 1) {
      if (!dims.empty() && dims.back().reduced == reduced[d] &&
          dims.back().stride * dims.back().size == stride)
        dims.back().size *= x[d];
      else
        dims.push_back({x[d], stride, reduced[d]});
    }
    stride *= x[d];
  }
  // dims is innermost first. With no dim left, reduce one element.
  if (dims.empty())
    dims.push_back({1, 1, true});
  loops.innerReduced = dims[0].reduced;
  loops.inner = dims[0].size;
  Shape reducedSizes, reducedStrides;
  for (size_t i = dims.size(); i-- > 1;) {
    (dims[i].reduced ? reducedSizes : loops.keptSizes).push_back(dims[i].size);
    (dims[i].reduced ? reducedStrides : loops.keptStrides).push_back(dims[i].stride);
  }
  int64_t runs = product(reducedSizes);
  loops.reducedOffsets.reserve(size_t(runs));
  for (int64_t r = 0; r < runs; ++r) {
    int64_t offset = 0;
    for (size_t d = reducedSizes.size(), rest = size_t(r); d-- > 0;) {
      offset += int64_t(rest % reducedSizes[d]) * reducedStrides[d];
      rest /= reducedSizes[d];
    }
    loops.reducedOffsets.push_back(offset);
  }
  return loops;
}

template <class T, class Acc>
std::unique_ptr<Kernel> reduceKernel(plan::ReduceKind kind, ReducePlan loops) {
  switch (kind) {
  case plan::REDUCE_SUM:
  case plan::REDUCE_MEAN:
    return std::make_unique<ReduceKernel<T, Acc, SumFold<Acc>>>(std::move(loops));
  case plan::REDUCE_MAX:
    return std::make_unique<ReduceKernel<T, Acc, MaxFold<Acc>>>(std::move(loops));
  default:
    return std::make_unique<ReduceKernel<T, Acc, MinFold<Acc>>>(std::move(loops));
  }
}

} // namespace

std::unique_ptr<Kernel> makeReduceKernel(const plan::Instruction &inst,
                                         const KernelTypes &types, std::string &error) {
  const plan::Reduce &op = inst.reduce();
  plan::ReduceKind kind = op.kind();
  if (kind < plan::REDUCE_SUM || kind > plan::REDUCE_MIN)
    return fail(error, "unknown kind " + std::to_string(int(kind)));
  plan::DType dtype = types.output.dtype();
  if (kind == plan::REDUCE_MEAN ? !checkDType(dtype, {plan::F32, plan::F64}, error)
                                : !checkDType(dtype, {plan::F32, plan::F64, plan::I64}, error))
    return nullptr;
  if (!checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]);
  std::vector<bool> reduced(x.size(), false);
  for (int i = 0; i < op.axes_size(); ++i) {
    int64_t axis = op.axes(i);
    if (axis < 0 || axis >= int64_t(x.size()) || (i > 0 && axis <= op.axes(i - 1)))
      return fail(error, "axes must be sorted, distinct and within rank " +
                             std::to_string(x.size()) + ", got " +
                             shapeString(Shape(op.axes().begin(), op.axes().end())));
    reduced[size_t(axis)] = true;
  }
  if (op.axes_size() == 0)
    return fail(error, "no axes to reduce");
  Shape expected = x;
  for (size_t d = 0; d < x.size(); ++d)
    if (reduced[d])
      expected[d] = 1;
  if (shapeOf(types.output) != expected)
    return fail(error, "output shape " + shapeString(types.output) + " should be " +
                           shapeString(expected) + " (reduced dims kept as 1)");
  ReducePlan loops = planReduce(x, reduced);
  loops.mean = kind == plan::REDUCE_MEAN;
  if (dtype == plan::I64)
    return reduceKernel<int64_t, int64_t>(kind, std::move(loops));
  if (dtype == plan::F64)
    return reduceKernel<double, double>(kind, std::move(loops));
  return reduceKernel<float, double>(kind, std::move(loops));
}

} // namespace dtc::runtime::cpu
