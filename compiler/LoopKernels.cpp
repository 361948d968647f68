//===- LoopKernels.cpp - kernels for reductions, rows and data movement ---===//
//
// One scf.parallel over the kernel's threads; each thread's body indexes
// the flat buffers itself. bf16 and f16 values are computed in f32, sums
// of floats are taken in blocks of kSumBlock terms (a block's sum added to
// the running one) so long rows keep their digits. Why one thread per
// output or row, and what that costs: docs/gpu-kernels.md.
//
//===----------------------------------------------------------------------===//
#include "compiler/LoopKernels.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <array>
#include <limits>

namespace dtc {

using namespace mlir;

namespace {

/// Float terms summed per block before the block's sum joins the total.
constexpr int64_t kSumBlock = 64;

/// A reduction with fewer outputs than this many threads splits its
/// folds (float sums), each part at least kMinChunk terms.
constexpr int64_t kBusyThreads = 65536;
constexpr int64_t kMinChunk = 256;

/// Rows at least this long (softmax, layer norm) are a block's work each,
/// its threads (lanes) taking every lanes-th element: a thread per row
/// would read a row of 1024 alone, uncoalesced.
constexpr int64_t kMinLaneRow = 64;
constexpr int64_t kMaxLanes = 256;

/// The lanes a row of `n` takes: a power of two of whole warps, at most
/// kMaxLanes; 0 for a row short enough to be one thread's. A power of two
/// because gpu.all_reduce's lowering (MLIR 19) reduces the warps' partial
/// results with a butterfly over the lanes of the first warp, each lane
/// storing its own: with 3, 5, 6 or 7 warps some lanes miss terms, and
/// which store lands is undefined.
int64_t lanesFor(int64_t n) {
  if (n < kMinLaneRow)
    return 0;
  return std::min(kMaxLanes, 32 * int64_t(llvm::PowerOf2Ceil(uint64_t((n + 31) / 32))));
}

bool supportedElement(Type t) {
  return t.isF32() || t.isF64() || t.isBF16() || t.isF16() || t.isInteger(1) ||
         t.isInteger(32) || t.isInteger(64);
}

RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The kernel's buffers: the op's operands, then its results.
SmallVector<Value> buffersOf(Operation *op) {
  SmallVector<Value> buffers(op->getOperands());
  buffers.append(op->result_begin(), op->result_end());
  return buffers;
}

SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[size_t(d)] = strides[size_t(d) + 1] * shape[size_t(d) + 1];
  return strides;
}

int64_t product(ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

/// A thread's body: index arithmetic, loads widened to the compute type,
/// stores narrowed back, loops.
class Body {
public:
  Body(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  OpBuilder &b;
  Location loc;

  Value index(int64_t v) { return b.create<arith::ConstantIndexOp>(loc, v); }
  Value add(Value x, Value y) { return b.create<arith::AddIOp>(loc, x, y); }
  Value mul(Value x, int64_t y) { return y == 1 ? x : b.create<arith::MulIOp>(loc, x, index(y)).getResult(); }
  Value div(Value x, int64_t y) { return y == 1 ? x : b.create<arith::DivUIOp>(loc, x, index(y)).getResult(); }
  Value rem(Value x, int64_t y) { return b.create<arith::RemUIOp>(loc, x, index(y)); }

  /// Coordinate k of flat index `flat` over `sizes` (row-major).
  SmallVector<Value> coordinates(Value flat, ArrayRef<int64_t> sizes) {
    SmallVector<int64_t> strides = stridesOf(sizes);
    SmallVector<Value> coords;
    for (size_t k = 0; k < sizes.size(); ++k) {
      Value c = div(flat, strides[k]);
      coords.push_back(k == 0 ? c : rem(c, sizes[k]));
    }
    return coords;
  }

  /// Sum of coords[k] * strides[k] (+ `base`).
  Value linear(ArrayRef<Value> coords, ArrayRef<int64_t> strides, Value base = {}) {
    Value at = base;
    for (auto [c, s] : llvm::zip(coords, strides))
      at = at ? add(at, mul(c, s)) : mul(c, s);
    return at ? at : index(0);
  }

  static Type computeType(Type element) {
    return element.isBF16() || element.isF16() ? Float32Type::get(element.getContext())
                                               : element;
  }
  Value load(Value memref, Value at) {
    Value v = b.create<memref::LoadOp>(loc, memref, ValueRange{at});
    Type t = computeType(v.getType());
    return t == v.getType() ? v : b.create<arith::ExtFOp>(loc, t, v).getResult();
  }
  void store(Value v, Value memref, Value at) {
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    if (v.getType() != element)
      v = b.create<arith::TruncFOp>(loc, element, v);
    b.create<memref::StoreOp>(loc, v, memref, ValueRange{at});
  }
  /// A move: the element as it is, whatever its type.
  void copy(Value from, Value fromAt, Value to, Value toAt) {
    Value v = b.create<memref::LoadOp>(loc, from, ValueRange{fromAt});
    b.create<memref::StoreOp>(loc, v, to, ValueRange{toAt});
  }

  Value constant(Type t, double v) {
    if (isa<FloatType>(t))
      return b.create<arith::ConstantOp>(loc, b.getFloatAttr(t, v));
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, int64_t(v)));
  }
  Value infinity(Type t, bool negative) {
    if (auto f = dyn_cast<FloatType>(t))
      return b.create<arith::ConstantOp>(
          loc, b.getFloatAttr(t, APFloat::getInf(f.getFloatSemantics(), negative)));
    unsigned width = t.getIntOrFloatBitWidth();
    return b.create<arith::ConstantOp>(
        loc, b.getIntegerAttr(t, negative ? APInt::getSignedMinValue(width)
                                          : APInt::getSignedMaxValue(width)));
  }

  using Fold = function_ref<Value(Body &, Value acc, Value k)>;
  /// fold(acc, k) over k in [begin, end), from `init`.
  Value loop(Value begin, Value end, Value init, Fold fold) {
    auto forOp = b.create<scf::ForOp>(
        loc, begin, end, index(1), ValueRange{init},
        [&](OpBuilder &nested, Location l, Value k, ValueRange acc) {
          Body inner(nested, l);
          nested.create<scf::YieldOp>(l, fold(inner, acc[0], k));
        });
    return forOp.getResult(0);
  }
  Value loop(int64_t n, Value init, Fold fold) { return loop(index(0), index(n), init, fold); }

  using Combine = function_ref<Value(Body &, Value, Value)>;
  /// A row kernel's fold (dtc.lanes): each of `lanes` threads folds the
  /// k in [0, n) from its own lane, lanes apart, from `identity`; their
  /// parts are combined by `combine` (associative, `identity` its
  /// identity). A parallel loop over the lanes with a reduction: on a GPU
  /// the block's threads and a block-wide reduction (compiler/RowsToGpu.cpp).
  Value laneFold(int64_t n, int64_t lanes, Value identity, Fold fold, Combine combine) {
    auto lanesLoop = b.create<scf::ParallelOp>(
        loc, ValueRange{index(0)}, ValueRange{index(lanes)}, ValueRange{index(1)},
        ValueRange{identity}, [&](OpBuilder &nested, Location l, ValueRange lane, ValueRange) {
          Body in(nested, l);
          auto forOp = nested.create<scf::ForOp>(
              l, lane[0], in.index(n), in.index(lanes), ValueRange{identity},
              [&](OpBuilder &inner, Location il, Value k, ValueRange acc) {
                Body each(inner, il);
                inner.create<scf::YieldOp>(il, fold(each, acc[0], k));
              });
          auto reduce = nested.create<scf::ReduceOp>(l, forOp.getResults());
          Block &combineBlock = reduce.getReductions()[0].front();
          OpBuilder::InsertionGuard guard(nested);
          nested.setInsertionPointToEnd(&combineBlock);
          Body c(nested, l);
          nested.create<scf::ReduceReturnOp>(
              l, combine(c, combineBlock.getArgument(0), combineBlock.getArgument(1)));
        });
    return lanesLoop.getResult(0);
  }

  /// A row kernel's pass over k in [0, n), each lane taking every
  /// lanes-th k from its own.
  void laneEach(int64_t n, int64_t lanes, function_ref<void(Body &, Value k)> each) {
    b.create<scf::ParallelOp>(
        loc, ValueRange{index(0)}, ValueRange{index(lanes)}, ValueRange{index(1)},
        [&](OpBuilder &nested, Location l, ValueRange lane) {
          Body in(nested, l);
          auto forOp = nested.create<scf::ForOp>(l, lane[0], in.index(n), in.index(lanes));
          OpBuilder::InsertionGuard guard(nested);
          nested.setInsertionPointToStart(forOp.getBody());
          Body inner(nested, l);
          each(inner, forOp.getInductionVar());
        });
  }

  /// A row's sum of term(k), k in [0, n): the lanes' parts where the row
  /// is a block's (lanes > 0), else the thread's in blocks (sum).
  Value rowSum(int64_t n, int64_t lanes, Type t, function_ref<Value(Body &, Value k)> term) {
    if (!lanes)
      return sum(n, t, term);
    return laneFold(
        n, lanes, constant(t, 0),
        [&](Body &in, Value acc, Value k) { return in.addf(acc, term(in, k)); },
        [](Body &c, Value l, Value r) { return c.addf(l, r); });
  }

  /// each(k) for k in [0, n) of a row: over the lanes where the row is a
  /// block's, else in the thread's loop.
  void rowEach(int64_t n, int64_t lanes, function_ref<void(Body &, Value k)> each) {
    if (lanes) {
      laneEach(n, lanes, each);
      return;
    }
    auto forOp = b.create<scf::ForOp>(loc, index(0), index(n), index(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(forOp.getBody());
    Body in(b, loc);
    each(in, forOp.getInductionVar());
  }

  Value addf(Value x, Value y) { return b.create<arith::AddFOp>(loc, x, y); }
  Value maxf(Value x, Value y) { return b.create<arith::MaximumFOp>(loc, x, y); }

  /// Sum of term(k) for k in [0, n) in type `t`: a float sum in blocks of
  /// kSumBlock terms.
  Value sum(int64_t n, Type t, function_ref<Value(Body &, Value k)> term) {
    auto addTerm = [&](Body &inner, Value acc, Value k) -> Value {
      Value v = term(inner, k);
      return isa<FloatType>(t) ? inner.b.create<arith::AddFOp>(inner.loc, acc, v).getResult()
                               : inner.b.create<arith::AddIOp>(inner.loc, acc, v).getResult();
    };
    Value zero = constant(t, 0);
    if (!isa<FloatType>(t) || n <= kSumBlock)
      return loop(n, zero, addTerm);
    auto blocks = b.create<scf::ForOp>(
        loc, index(0), index(n), index(kSumBlock), ValueRange{zero},
        [&](OpBuilder &nested, Location l, Value start, ValueRange total) {
          Body outer(nested, l);
          Value end = nested.create<arith::MinUIOp>(l, outer.add(start, outer.index(kSumBlock)),
                                                    outer.index(n));
          Value block = outer.loop(start, end, outer.constant(t, 0), addTerm);
          nested.create<scf::YieldOp>(
              l, ValueRange{nested.create<arith::AddFOp>(l, total[0], block).getResult()});
        });
    return blocks.getResult(0);
  }
};

/// The kernel function: `buffers` as flat memrefs, one parallel loop over
/// `threads`, `body` building each thread's work.
using ThreadBody = function_ref<void(Body &, Value thread, ArrayRef<Value> buffers)>;

/// `status`: a last argument, a status word (memref<1xi32>) the kernel
/// sets to 1 when its data is out of range (`dtc.status`).
func::FuncOp makeKernel(OpBuilder &b, Location loc, ArrayRef<Value> values, StringRef name,
                        int64_t threads, ThreadBody body, bool status = false) {
  SmallVector<Type> args;
  for (Value v : values) {
    auto t = tensorOf(v);
    args.push_back(MemRefType::get({t.getNumElements()}, t.getElementType()));
  }
  if (status)
    args.push_back(MemRefType::get({1}, b.getI32Type()));
  auto func = b.create<func::FuncOp>(loc, name, b.getFunctionType(args, {}));
  func->setAttr(attr::kThreads, b.getI64IntegerAttr(threads));
  if (status)
    func->setAttr(attr::kStatus, b.getUnitAttr());
  Block *entry = func.addEntryBlock();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(entry);
  SmallVector<Value> buffers(entry->getArguments());
  b.create<scf::ParallelOp>(loc, ValueRange{b.create<arith::ConstantIndexOp>(loc, 0)},
                            ValueRange{b.create<arith::ConstantIndexOp>(loc, threads)},
                            ValueRange{b.create<arith::ConstantIndexOp>(loc, 1)},
                            [&](OpBuilder &nested, Location l, ValueRange ivs) {
                              Body thread(nested, l);
                              body(thread, ivs[0], buffers);
                            });
  b.create<func::ReturnOp>(loc);
  return func;
}

/// `op`'s kernel: its operands' and results' buffers (and a status word).
func::FuncOp makeKernel(OpBuilder &b, Operation *op, StringRef name, int64_t threads,
                        ThreadBody body, bool status = false) {
  return makeKernel(b, op->getLoc(), buffersOf(op), name, threads, body, status);
}

/// A row kernel: `rows` rows, each spread over `lanes` threads (dtc.lanes),
/// `body` building a row's work from Body::laneFold and Body::laneEach.
func::FuncOp makeRowKernel(OpBuilder &b, Operation *op, StringRef name, int64_t rows,
                           int64_t lanes, ThreadBody body) {
  func::FuncOp func = makeKernel(b, op, name, rows, body);
  func->setAttr(attr::kLanes, b.getI64IntegerAttr(lanes));
  return func;
}

/// Reductions: a thread per output element (or per part of its fold). The
/// input's dims are simplified as the CPU backend's (size-1 dims dropped,
/// neighbours of the same kind merged); the output's flat index gives the
/// kept coordinates, the loop's the reduced ones.
func::FuncOp reduceKernel(OpBuilder &b, Operation *op, StringRef name) {
  auto input = tensorOf(op->getOperand(0));
  auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
  SmallVector<int64_t> strides = stridesOf(input.getShape());
  SmallVector<int64_t> keptSizes, keptStrides, reducedSizes, reducedStrides;
  std::optional<bool> lastReduced;
  for (int64_t d = 0; d < input.getRank(); ++d) {
    int64_t size = input.getDimSize(d);
    if (size == 1)
      continue;
    bool reduced = llvm::is_contained(axes, d);
    auto &sizes = reduced ? reducedSizes : keptSizes;
    auto &dimStrides = reduced ? reducedStrides : keptStrides;
    if (lastReduced == reduced) { // merged with its neighbour
      sizes.back() *= size;
      dimStrides.back() = strides[size_t(d)];
    } else {
      sizes.push_back(size);
      dimStrides.push_back(strides[size_t(d)]);
    }
    lastReduced = reduced;
  }
  int64_t outputs = product(keptSizes), count = product(reducedSizes);
  bool sum = isa<graph::ReduceSumOp, graph::ReduceMeanOp>(op);
  bool mean = isa<graph::ReduceMeanOp>(op), max = isa<graph::ReduceMaxOp>(op);
  Type element = input.getElementType();
  // Few outputs over long folds (a bias's gradient: a few hundred sums of
  // thousands of rows) would leave most of a GPU idle: a float sum into
  // f32 or f64 (also of a bf16 input: mixed precision's gradient sums) is
  // then split into chunks of at least kMinChunk terms, a thread each,
  // whose partial sums are added atomically into zeroed outputs.
  Type result = tensorOf(op->getResult(0)).getElementType();
  int64_t chunks = std::min(count / kMinChunk, std::max<int64_t>(1, kBusyThreads / outputs));
  if (sum && chunks > 1 && (result.isF32() || result.isF64())) {
    int64_t chunk = (count + chunks - 1) / chunks;
    chunks = (count + chunk - 1) / chunk;
    auto func = makeKernel(b, op, name, outputs * chunks, [&](Body &t, Value thread,
                                                               ArrayRef<Value> buf) {
      // Adjacent threads take adjacent outputs: their reads are adjacent
      // when the kept dims are the inner ones.
      Value o = t.rem(thread, outputs), part = t.div(thread, outputs);
      Value base = t.linear(t.coordinates(o, keptSizes), keptStrides);
      Value begin = t.mul(part, chunk);
      Value end = t.b.create<arith::MinUIOp>(t.loc, t.add(begin, t.index(chunk)), t.index(count));
      Value partial = t.loop(begin, end, t.constant(result, 0),
                             [&](Body &in, Value acc, Value r) -> Value {
                               Value at = in.linear(in.coordinates(r, reducedSizes),
                                                    reducedStrides, base);
                               return in.b.create<arith::AddFOp>(in.loc, acc,
                                                                 in.load(buf[0], at));
                             });
      if (mean)
        partial = t.b.create<arith::DivFOp>(t.loc, partial, t.constant(result, double(count)));
      t.b.create<memref::AtomicRMWOp>(t.loc, arith::AtomicRMWKind::addf, partial, buf[1],
                                      ValueRange{o});
    });
    func->setAttr(attr::kZeroOutputs, b.getUnitAttr());
    return func;
  }
  Type type = Body::computeType(element);
  bool fl = isa<FloatType>(type);
  // Long float folds (a row's sum over a vocabulary) are a block's work
  // each, its lanes taking every lanes-th term.
  if (int64_t lanes = fl ? lanesFor(count) : 0)
    return makeRowKernel(b, op, name, outputs, lanes, [&](Body &t, Value o, ArrayRef<Value> buf) {
      Value base = t.linear(t.coordinates(o, keptSizes), keptStrides);
      auto at = [&](Body &in, Value r) {
        return in.load(buf[0], in.linear(in.coordinates(r, reducedSizes), reducedStrides, base));
      };
      auto combine = [&](Body &c, Value l, Value r) -> Value {
        if (sum)
          return c.addf(l, r);
        return max ? c.maxf(l, r) : c.b.create<arith::MinimumFOp>(c.loc, l, r).getResult();
      };
      Value result = t.laneFold(
          count, lanes, sum ? t.constant(type, 0) : t.infinity(type, max),
          [&](Body &in, Value acc, Value r) { return combine(in, acc, at(in, r)); }, combine);
      if (mean)
        result = t.b.create<arith::DivFOp>(t.loc, result, t.constant(type, double(count)));
      t.store(result, buf[1], o);
    });
  return makeKernel(b, op, name, outputs, [&](Body &t, Value o, ArrayRef<Value> buf) {
    Value base = t.linear(t.coordinates(o, keptSizes), keptStrides);
    auto at = [&](Body &in, Value r) {
      return in.load(buf[0], in.linear(in.coordinates(r, reducedSizes), reducedStrides, base));
    };
    Value result;
    if (sum) {
      result = t.sum(count, type, at);
      if (mean)
        result = fl ? t.b.create<arith::DivFOp>(t.loc, result, t.constant(type, double(count)))
                          .getResult()
                    : t.b.create<arith::DivSIOp>(t.loc, result, t.constant(type, double(count)))
                          .getResult();
    } else {
      result = t.loop(count, t.infinity(type, max), [&](Body &in, Value acc, Value r) -> Value {
        Value v = at(in, r);
        if (fl)
          return max ? in.b.create<arith::MaximumFOp>(in.loc, acc, v).getResult()
                     : in.b.create<arith::MinimumFOp>(in.loc, acc, v).getResult();
        return max ? in.b.create<arith::MaxSIOp>(in.loc, acc, v).getResult()
                   : in.b.create<arith::MinSIOp>(in.loc, acc, v).getResult();
      });
    }
    t.store(result, buf[1], o);
  });
}

/// Softmax and log-softmax: a thread per row (the axis's elements, `inner`
/// apart); three passes: the max, the sum of exps, the outputs.
func::FuncOp softmaxKernel(OpBuilder &b, Operation *op, StringRef name, int64_t axis, bool log) {
  auto input = tensorOf(op->getOperand(0));
  ArrayRef<int64_t> shape = input.getShape();
  int64_t n = shape[size_t(axis)], inner = product(shape.drop_front(axis + 1));
  int64_t rows = product(shape.take_front(axis)) * inner;
  Type type = Body::computeType(input.getElementType());
  // (x - max) - log(sum), or exp(x - max) / sum as a multiply by 1 / sum, as
  // the CPU backend.
  auto output = [&](Body &in, Value x, Value max, Value post) -> Value {
    Value centred = in.b.create<arith::SubFOp>(in.loc, x, max);
    return log ? in.b.create<arith::SubFOp>(in.loc, centred, post).getResult()
               : in.b.create<arith::MulFOp>(in.loc, in.b.create<math::ExpOp>(in.loc, centred),
                                            post)
                     .getResult();
  };
  auto postOf = [&](Body &t, Value sum) -> Value {
    return log ? t.b.create<math::LogOp>(t.loc, sum).getResult()
               : t.b.create<arith::DivFOp>(t.loc, t.constant(type, 1), sum).getResult();
  };
  if (int64_t lanes = lanesFor(n))
    return makeRowKernel(b, op, name, rows, lanes, [&](Body &t, Value row, ArrayRef<Value> buf) {
      Value base = t.add(t.mul(t.div(row, inner), n * inner), t.rem(row, inner));
      auto x = [&](Body &in, Value k) { return in.load(buf[0], in.add(base, in.mul(k, inner))); };
      Value max = t.laneFold(
          n, lanes, t.infinity(type, true),
          [&](Body &in, Value acc, Value k) { return in.maxf(acc, x(in, k)); },
          [](Body &c, Value l, Value r) { return c.maxf(l, r); });
      Value sum = t.laneFold(
          n, lanes, t.constant(type, 0),
          [&](Body &in, Value acc, Value k) {
            Value e = in.b.create<math::ExpOp>(
                in.loc, in.b.create<arith::SubFOp>(in.loc, x(in, k), max));
            return in.addf(acc, e);
          },
          [](Body &c, Value l, Value r) { return c.addf(l, r); });
      Value post = postOf(t, sum);
      t.laneEach(n, lanes, [&](Body &in, Value k) {
        in.store(output(in, x(in, k), max, post), buf[1], in.add(base, in.mul(k, inner)));
      });
    });
  return makeKernel(b, op, name, rows, [&](Body &t, Value row, ArrayRef<Value> buf) {
    Value base = t.add(t.mul(t.div(row, inner), n * inner), t.rem(row, inner));
    auto at = [&](Body &in, Value k) { return in.add(base, in.mul(k, inner)); };
    Value max = t.loop(n, t.infinity(type, true), [&](Body &in, Value acc, Value k) -> Value {
      return in.b.create<arith::MaximumFOp>(in.loc, acc, in.load(buf[0], at(in, k)));
    });
    Value sum = t.sum(n, type, [&](Body &in, Value k) -> Value {
      Value x = in.b.create<arith::SubFOp>(in.loc, in.load(buf[0], at(in, k)), max);
      return in.b.create<math::ExpOp>(in.loc, x);
    });
    Value post = postOf(t, sum);
    auto forOp = t.b.create<scf::ForOp>(t.loc, t.index(0), t.index(n), t.index(1));
    OpBuilder::InsertionGuard guard(t.b);
    t.b.setInsertionPointToStart(forOp.getBody());
    Body in(t.b, t.loc);
    Value k = forOp.getInductionVar();
    in.store(output(in, in.load(buf[0], at(in, k)), max, post), buf[1], at(in, k));
  });
}

/// Layer norm: a row of the normalized dims each (a thread's, or a
/// block's lanes' where rows are long); the mean, then the centred
/// squares, then (x - mean) / sqrt(variance + eps) * scale + bias.
/// RMSNorm (rms): no mean, the squares of x, x / sqrt(mean(x^2) + eps) *
/// scale.
func::FuncOp layerNormKernel(OpBuilder &b, graph::LayerNormOp op, StringRef name) {
  auto input = tensorOf(op.getInput());
  int64_t axis = op.getAxis() < 0 ? op.getAxis() + input.getRank() : op.getAxis();
  int64_t n = product(input.getShape().drop_front(axis));
  int64_t rows = input.getNumElements() / n;
  int64_t lanes = lanesFor(n);
  bool bias = bool(op.getBias()), rms = op.getRms();
  double epsilon = op.getEpsilon().convertToDouble();
  Type type = Body::computeType(input.getElementType());
  auto body = [&](Body &t, Value row, ArrayRef<Value> buf) {
    Value base = t.mul(row, n);
    auto x = [&](Body &in, Value k) { return in.load(buf[0], in.add(base, k)); };
    auto sum = [&](function_ref<Value(Body &, Value k)> term) {
      return t.rowSum(n, lanes, type, term);
    };
    Value count = t.constant(type, double(n));
    Value mean = rms ? Value() : t.b.create<arith::DivFOp>(t.loc, sum(x), count).getResult();
    auto centred = [&](Body &in, Value k) -> Value {
      return rms ? x(in, k) : in.b.create<arith::SubFOp>(in.loc, x(in, k), mean).getResult();
    };
    Value squares = sum([&](Body &in, Value k) -> Value {
      Value d = centred(in, k);
      return in.b.create<arith::MulFOp>(in.loc, d, d);
    });
    Value variance = t.b.create<arith::DivFOp>(t.loc, squares, count);
    Value inverse = t.b.create<arith::DivFOp>(
        t.loc, t.constant(type, 1),
        t.b.create<math::SqrtOp>(
            t.loc, t.b.create<arith::AddFOp>(t.loc, variance, t.constant(type, epsilon))));
    auto write = [&](Body &in, Value k) {
      Value y = in.b.create<arith::MulFOp>(
          in.loc, in.b.create<arith::MulFOp>(in.loc, centred(in, k), inverse),
          in.load(buf[1], k));
      if (bias)
        y = in.b.create<arith::AddFOp>(in.loc, y, in.load(buf[2], k));
      in.store(y, buf[bias ? 3 : 2], in.add(base, k));
    };
    t.rowEach(n, lanes, write);
  };
  return lanes ? makeRowKernel(b, op, name, rows, lanes, body)
               : makeKernel(b, op, name, rows, body);
}

/// Layer norm's gradient: a row (or a block per long row), as the forward:
/// the row's mean and rstd from two sums, then the sums of h = dy * scale
/// and of h * xhat, then dx = rstd * (h - mean(h) - xhat * mean(h * xhat)),
/// all in f32 (16-bit inputs widened, dx rounded once), plus the residual
/// when there is one. The row's mean and rstd are stored too (by its first
/// lane), for the scale's gradient. RMSNorm's (rms): the mean and mean(h)
/// are 0 and not summed. With partial sums of the weights' gradients, a
/// thread (or block) takes a group of rows in turn, each lane adding its
/// elements' dy * xhat (and dy) to the group's row of sums as it writes
/// dx: the same lane always holds the same elements, so the sums need no
/// synchronisation and are added in the rows' order.
func::FuncOp layerNormBackwardKernel(OpBuilder &b, graph::LayerNormBackwardOp op,
                                     StringRef name) {
  auto input = tensorOf(op.getInput());
  int64_t axis = int64_t(op.getAxis());
  int64_t n = product(input.getShape().drop_front(axis));
  int64_t rows = input.getNumElements() / n;
  int64_t lanes = lanesFor(n);
  double epsilon = op.getEpsilon().convertToDouble();
  bool rms = op.getRms();
  Type type = Body::computeType(input.getElementType());
  // Buffers: input, scale, grad_output, (residual,) grad_input, mean, rstd,
  // (the scale's and the bias's partial sums).
  const bool residual = !op.getResidual().empty();
  const size_t out = residual ? 4 : 3;
  const size_t sums = op.getPartials().size();
  const int64_t groups = sums ? tensorOf(op.getPartials()[0]).getDimSize(0) : rows;
  const int64_t perGroup = (rows + groups - 1) / groups;
  Value group; // the thread's (block's) group of rows, when summing
  auto body = [&](Body &t, Value row, ArrayRef<Value> buf) {
    Value base = t.mul(row, n);
    auto x = [&](Body &in, Value k) { return in.load(buf[0], in.add(base, k)); };
    auto h = [&](Body &in, Value k) {
      return in.b.create<arith::MulFOp>(in.loc, in.load(buf[2], in.add(base, k)),
                                        in.load(buf[1], k))
          .getResult();
    };
    auto sum = [&](function_ref<Value(Body &, Value k)> term) {
      return t.rowSum(n, lanes, type, term);
    };
    Value count = t.constant(type, double(n));
    auto meanOf = [&](Value total) {
      return t.b.create<arith::DivFOp>(t.loc, total, count).getResult();
    };
    Value mean = rms ? t.constant(type, 0) : meanOf(sum(x));
    auto centred = [&](Body &in, Value k) -> Value {
      return rms ? x(in, k) : in.b.create<arith::SubFOp>(in.loc, x(in, k), mean).getResult();
    };
    Value variance = meanOf(sum([&](Body &in, Value k) -> Value {
      Value d = centred(in, k);
      return in.b.create<arith::MulFOp>(in.loc, d, d);
    }));
    Value rstd = t.b.create<arith::DivFOp>(
        t.loc, t.constant(type, 1),
        t.b.create<math::SqrtOp>(
            t.loc, t.b.create<arith::AddFOp>(t.loc, variance, t.constant(type, epsilon))));
    auto xhat = [&](Body &in, Value k) {
      return in.b.create<arith::MulFOp>(in.loc, centred(in, k), rstd).getResult();
    };
    Value meanH = rms ? Value() : meanOf(sum(h));
    Value meanHX = meanOf(sum([&](Body &in, Value k) -> Value {
      return in.b.create<arith::MulFOp>(in.loc, h(in, k), xhat(in, k));
    }));
    auto write = [&](Body &in, Value k) {
      Value shifted =
          rms ? h(in, k) : in.b.create<arith::SubFOp>(in.loc, h(in, k), meanH).getResult();
      Value d = in.b.create<arith::SubFOp>(
          in.loc, shifted, in.b.create<arith::MulFOp>(in.loc, xhat(in, k), meanHX));
      Value dx = in.b.create<arith::MulFOp>(in.loc, rstd, d);
      if (residual)
        dx = in.b.create<arith::AddFOp>(in.loc, dx, in.load(buf[3], in.add(base, k)));
      in.store(dx, buf[out], in.add(base, k));
      for (size_t s = 0; s < sums; ++s) { // dy * xhat, then dy
        Value dy = in.load(buf[2], in.add(base, k));
        Value term = s ? dy : in.b.create<arith::MulFOp>(in.loc, dy, xhat(in, k)).getResult();
        Value at = in.add(in.mul(group, n), k);
        in.store(in.addf(in.load(buf[out + 3 + s], at), term), buf[out + 3 + s], at);
      }
    };
    auto statistics = [&](Body &in, Value) {
      in.store(mean, buf[out + 1], row);
      in.store(rstd, buf[out + 2], row);
    };
    t.rowEach(n, lanes, write);
    t.rowEach(1, lanes, statistics); // by the row's first lane
  };
  if (!sums)
    return lanes ? makeRowKernel(b, op, name, rows, lanes, body)
                 : makeKernel(b, op, name, rows, body);
  // A group's sums start at 0, then take its rows in order.
  auto grouped = [&](Body &t, Value g, ArrayRef<Value> buf) {
    group = g;
    t.rowEach(n, lanes, [&](Body &in, Value k) {
      for (size_t s = 0; s < sums; ++s)
        in.store(in.constant(in.b.getF32Type(), 0), buf[out + 3 + s],
                 in.add(in.mul(g, n), k));
    });
    Value first = t.mul(g, perGroup);
    Value last = t.b.create<arith::MinUIOp>(t.loc, t.add(first, t.index(perGroup)),
                                            t.index(rows));
    auto forOp = t.b.create<scf::ForOp>(t.loc, first, last, t.index(1));
    OpBuilder::InsertionGuard guard(t.b);
    t.b.setInsertionPointToStart(forOp.getBody());
    Body each(t.b, t.loc);
    body(each, forOp.getInductionVar(), buf);
  };
  return lanes ? makeRowKernel(b, op, name, groups, lanes, grouped)
               : makeKernel(b, op, name, groups, grouped);
}

/// Cross-entropy: a row of classes each (a thread's, or a block's lanes'
/// where rows are long); the max, the sum of exps, lse = max + log(sum),
/// then the loss, lse - logits[label], 0 for a label that is no class
/// (the logit read at class 0 meanwhile). The first lane stores both.
/// With a gradient factor, a last pass writes the logits' gradient,
/// (exp(x - lse) - onehot(label)) * factor, computed in f32.
func::FuncOp crossEntropyKernel(OpBuilder &b, graph::CrossEntropyOp op, StringRef name) {
  auto logits = tensorOf(op.getLogits());
  int64_t n = logits.getShape().back(), rows = logits.getNumElements() / std::max<int64_t>(n, 1);
  int64_t lanes = lanesFor(n);
  Type type = Body::computeType(logits.getElementType());
  // Buffers: logits, labels, (the gradient's factors,) loss, lse, (the gradient).
  const bool gradient = bool(op.getGradScale());
  const size_t out = gradient ? 3 : 2;
  auto body = [&](Body &t, Value row, ArrayRef<Value> buf) {
    Value base = t.mul(row, n);
    auto x = [&](Body &in, Value k) { return in.load(buf[0], in.add(base, k)); };
    Value max = lanes ? t.laneFold(
                            n, lanes, t.infinity(type, true),
                            [&](Body &in, Value acc, Value k) { return in.maxf(acc, x(in, k)); },
                            [](Body &c, Value l, Value r) { return c.maxf(l, r); })
                      : t.loop(n, t.infinity(type, true), [&](Body &in, Value acc, Value k) {
                          return in.maxf(acc, x(in, k));
                        });
    Value sum = t.rowSum(n, lanes, type, [&](Body &in, Value k) -> Value {
      return in.b.create<math::ExpOp>(in.loc, in.b.create<arith::SubFOp>(in.loc, x(in, k), max));
    });
    Value lse = t.addf(max, t.b.create<math::LogOp>(t.loc, sum));
    Value label = t.b.create<arith::IndexCastOp>(
        t.loc, t.b.getIndexType(), t.b.create<memref::LoadOp>(t.loc, buf[1], ValueRange{row}));
    Value isClass = t.b.create<arith::AndIOp>(
        t.loc, t.b.create<arith::CmpIOp>(t.loc, arith::CmpIPredicate::sge, label, t.index(0)),
        t.b.create<arith::CmpIOp>(t.loc, arith::CmpIPredicate::slt, label, t.index(n)));
    Value picked = x(t, t.b.create<arith::SelectOp>(t.loc, isClass, label, t.index(0)));
    Value loss = t.b.create<arith::SelectOp>(
        t.loc, isClass, t.b.create<arith::SubFOp>(t.loc, lse, picked), t.constant(type, 0));
    t.rowEach(1, lanes, [&](Body &in, Value) { // by the row's first lane
      in.store(loss, buf[out], row);
      in.store(lse, buf[out + 1], row);
    });
    if (!gradient)
      return;
    Value factor = t.load(buf[2], row);
    t.rowEach(n, lanes, [&](Body &in, Value k) {
      Value p = in.b.create<math::ExpOp>(in.loc, in.b.create<arith::SubFOp>(in.loc, x(in, k), lse));
      Value hit = in.b.create<arith::CmpIOp>(in.loc, arith::CmpIPredicate::eq, k, label);
      Value d = in.b.create<arith::SubFOp>(
          in.loc, p,
          in.b.create<arith::SelectOp>(in.loc, hit, in.constant(type, 1), in.constant(type, 0)));
      in.store(in.b.create<arith::MulFOp>(in.loc, d, factor), buf[out + 2], in.add(base, k));
    });
  };
  return lanes ? makeRowKernel(b, op, name, rows, lanes, body)
               : makeKernel(b, op, name, rows, body);
}

/// Moves: a thread per output element, reading the input element whose
/// flat index is an affine function of the output's coordinates
/// (transpose, strided slice, copy).
func::FuncOp moveKernel(OpBuilder &b, Location loc, Value input, Value output, StringRef name,
                        function_ref<Value(Body &, Value output)> source) {
  return makeKernel(b, loc, {input, output}, name, tensorOf(output).getNumElements(),
                    [&](Body &t, Value o, ArrayRef<Value> buf) {
                      t.copy(buf[0], source(t, o), buf[1], o);
                    });
}

/// A strided slice of `input` into `output` (a graph.slice, a piece of a
/// graph.split).
func::FuncOp sliceKernel(OpBuilder &b, Location loc, Value input, Value output, StringRef name,
                         ArrayRef<int64_t> offsets, ArrayRef<int64_t> steps) {
  SmallVector<int64_t> in = stridesOf(tensorOf(input).getShape()), strides;
  int64_t offset = 0;
  for (auto [d, stride] : llvm::enumerate(in)) {
    offset += offsets[d] * stride;
    strides.push_back(steps[d] * stride);
  }
  auto shape = tensorOf(output).getShape();
  return moveKernel(b, loc, input, output, name, [&](Body &body, Value o) {
    return body.linear(body.coordinates(o, shape), strides, body.index(offset));
  });
}

/// Concatenation: a thread per output element; its coordinate along the
/// axis picks the input (a chain of scf.if yielding the element).
func::FuncOp concatKernel(OpBuilder &b, graph::ConcatOp op, StringRef name) {
  auto output = tensorOf(op.getResult());
  int64_t axis = op.getAxis() < 0 ? op.getAxis() + output.getRank() : op.getAxis();
  int64_t size = output.getDimSize(axis), inner = product(output.getShape().drop_front(axis + 1));
  SmallVector<int64_t> sizes, starts;
  int64_t start = 0;
  for (Value in : op.getInputs()) {
    starts.push_back(start);
    sizes.push_back(tensorOf(in).getDimSize(axis));
    start += sizes.back();
  }
  size_t inputs = sizes.size();
  return makeKernel(b, op, name, output.getNumElements(),
                    [&](Body &t, Value o, ArrayRef<Value> buf) {
    Value outer = t.div(o, size * inner), c = t.rem(t.div(o, inner), size), i = t.rem(o, inner);
    // The element of input k (at its own coordinate c - start_k).
    auto elementOf = [&](Body &in, size_t k) -> Value {
      Value local = in.b.create<arith::SubIOp>(in.loc, c, in.index(starts[k]));
      Value at = in.add(in.add(in.mul(outer, sizes[k] * inner), in.mul(local, inner)), i);
      return in.b.create<memref::LoadOp>(in.loc, buf[k], ValueRange{at});
    };
    std::function<Value(Body &, size_t)> pick = [&](Body &in, size_t k) -> Value {
      if (k + 1 == inputs)
        return elementOf(in, k);
      Value before = in.b.create<arith::CmpIOp>(in.loc, arith::CmpIPredicate::ult, c,
                                                in.index(starts[k + 1]));
      auto ifOp = in.b.create<scf::IfOp>(
          in.loc, before,
          [&](OpBuilder &nested, Location l) {
            Body branch(nested, l);
            nested.create<scf::YieldOp>(l, elementOf(branch, k));
          },
          [&](OpBuilder &nested, Location l) {
            Body branch(nested, l);
            nested.create<scf::YieldOp>(l, pick(branch, k + 1));
          });
      return ifOp.getResult(0);
    };
    Value v = pick(t, 0);
    t.b.create<memref::StoreOp>(t.loc, v, buf[inputs], ValueRange{o});
  });
}

/// Row `index` of an axis of `dim` rows: negative indices count from the
/// end; an out-of-range one sets the status word `status` to 1 (the
/// runtime stops the run with a message, as the CPU backend does) and
/// reads a row in range meanwhile. With `inside` (skip_outside: a block of
/// a split table), no wrap and no status: *inside says whether `index` is
/// in [0, dim), the row returned clamped in range either way.
Value rowOf(Body &t, Value index, int64_t dim, Value status, Value *inside = nullptr) {
  Value i = t.b.create<arith::IndexCastOp>(t.loc, t.b.getIndexType(), index);
  if (inside) {
    *inside = t.b.create<arith::AndIOp>(
        t.loc, t.b.create<arith::CmpIOp>(t.loc, arith::CmpIPredicate::sge, i, t.index(0)),
        t.b.create<arith::CmpIOp>(t.loc, arith::CmpIPredicate::slt, i, t.index(dim)));
  } else {
    Value negative = t.b.create<arith::CmpIOp>(t.loc, arith::CmpIPredicate::slt, i, t.index(0));
    i = t.b.create<arith::SelectOp>(t.loc, negative, t.add(i, t.index(dim)), i);
    Value outside = t.b.create<arith::OrIOp>(
        t.loc, t.b.create<arith::CmpIOp>(t.loc, arith::CmpIPredicate::slt, i, t.index(0)),
        t.b.create<arith::CmpIOp>(t.loc, arith::CmpIPredicate::sge, i, t.index(dim)));
    t.b.create<scf::IfOp>(t.loc, outside, [&](OpBuilder &nested, Location l) {
      Value one = nested.create<arith::ConstantOp>(l, nested.getI32IntegerAttr(1));
      nested.create<memref::StoreOp>(l, one, status,
                                     ValueRange{nested.create<arith::ConstantIndexOp>(l, 0)});
      nested.create<scf::YieldOp>(l);
    });
  }
  i = t.b.create<arith::MaxSIOp>(t.loc, i, t.index(0));
  return t.b.create<arith::MinSIOp>(t.loc, i, t.index(dim - 1));
}

/// Gather: a thread per output element ([outer, count, inner]), reading
/// its index and then its element of data ([outer, dim, inner]).
func::FuncOp gatherKernel(OpBuilder &b, graph::GatherOp op, StringRef name) {
  auto data = tensorOf(op.getData());
  int64_t axis = op.getAxis() < 0 ? op.getAxis() + data.getRank() : op.getAxis();
  int64_t dim = data.getDimSize(axis), inner = product(data.getShape().drop_front(axis + 1));
  int64_t count = tensorOf(op.getIndices()).getNumElements();
  bool skip = op.getSkipOutside(); // no status word: nothing is an error
  return makeKernel(b, op, name, tensorOf(op.getResult()).getNumElements(),
                    [&](Body &t, Value o, ArrayRef<Value> buf) {
    Value outer = t.div(o, count * inner), j = t.rem(t.div(o, inner), count), i = t.rem(o, inner);
    Value index = t.b.create<memref::LoadOp>(t.loc, buf[1], ValueRange{j}), inside;
    Value row = rowOf(t, index, dim, skip ? Value() : buf[3], skip ? &inside : nullptr);
    Value at = t.add(t.add(t.mul(outer, dim * inner), t.mul(row, inner)), i);
    if (!skip) {
      t.copy(buf[0], at, buf[2], o);
      return;
    }
    // Another block's row: a zero (its rank gathers it), read at the clamped row meanwhile.
    Value v = t.b.create<memref::LoadOp>(t.loc, buf[0], ValueRange{at});
    v = t.b.create<arith::SelectOp>(t.loc, inside, v, t.constant(v.getType(), 0));
    t.b.create<memref::StoreOp>(t.loc, v, buf[2], ValueRange{o});
  }, /*status=*/!skip);
}

/// A 16-bit scatter-add's indices at most this many: a thread per output
/// element reads them all (no atomics: 16-bit atomic adds would round
/// every add).
constexpr int64_t kMaxGatheredIndices = 64;

/// Scatter-add (gather's gradient): a thread per update element, added
/// atomically into the output, which the runtime zeroes first
/// (`dtc.zero_outputs`). Into f32 and f64 (atomic adds of those; mixed
/// precision's bf16 updates of a weight add into f32: docs/training.md);
/// into a 16-bit float only from a few indices (an activation's gradient
/// through a picked position), a thread per output element summing the
/// updates whose index is its row, in the indices' order as the CPU
/// backend adds them.
func::FuncOp scatterAddKernel(OpBuilder &b, graph::ScatterAddOp op, StringRef name,
                              std::string &missing) {
  auto output = tensorOf(op.getOutput());
  int64_t axis = op.getAxis() < 0 ? op.getAxis() + output.getRank() : op.getAxis();
  int64_t dim = output.getDimSize(axis), inner = product(output.getShape().drop_front(axis + 1));
  int64_t count = tensorOf(op.getIndices()).getNumElements();
  bool skip = op.getSkipOutside(); // no status word: nothing is an error
  // The row of update `j`; with skip_outside, `inside` says whether it is added.
  auto rowAt = [&](Body &in, ArrayRef<Value> buf, Value j, Value &inside) {
    Value index = in.b.create<memref::LoadOp>(in.loc, buf[1], ValueRange{j});
    return rowOf(in, index, dim, skip ? Value() : buf[3], skip ? &inside : nullptr);
  };
  if (!output.getElementType().isF32() && !output.getElementType().isF64()) {
    if (count > kMaxGatheredIndices) {
      missing = "scatter_add of " + std::string(output.getElementType().isBF16() ? "bf16" : "f16") +
                " from more than " + std::to_string(kMaxGatheredIndices) + " indices";
      return {};
    }
    return makeKernel(b, op, name, output.getNumElements(),
                      [&](Body &t, Value o, ArrayRef<Value> buf) {
      Value outer = t.div(o, dim * inner), r = t.rem(t.div(o, inner), dim), i = t.rem(o, inner);
      Type f32 = t.b.getF32Type();
      Value sum = t.loop(count, t.constant(f32, 0), [&](Body &in, Value acc, Value j) -> Value {
        Value inside;
        Value row = rowAt(in, buf, j, inside);
        Value hit = in.b.create<arith::CmpIOp>(in.loc, arith::CmpIPredicate::eq, row, r);
        if (skip)
          hit = in.b.create<arith::AndIOp>(in.loc, hit, inside);
        Value v = in.load(buf[0], in.add(in.add(in.mul(outer, count * inner), in.mul(j, inner)), i));
        return in.b.create<arith::SelectOp>(in.loc, hit, in.addf(acc, v), acc);
      });
      t.store(sum, buf[2], o);
    }, /*status=*/!skip);
  }
  auto func = makeKernel(b, op, name, tensorOf(op.getUpdates()).getNumElements(),
                         [&](Body &t, Value u, ArrayRef<Value> buf) {
    Value outer = t.div(u, count * inner), j = t.rem(t.div(u, inner), count), i = t.rem(u, inner);
    Value inside;
    Value row = rowAt(t, buf, j, inside);
    Value at = t.add(t.add(t.mul(outer, dim * inner), t.mul(row, inner)), i);
    Value v = t.load(buf[0], u); // 16-bit updates widened: they add into f32
    auto add = [&](OpBuilder &nested, Location l) {
      nested.create<memref::AtomicRMWOp>(l, arith::AtomicRMWKind::addf, v, buf[2],
                                         ValueRange{at});
    };
    if (!skip) {
      add(t.b, t.loc);
      return;
    }
    t.b.create<scf::IfOp>(t.loc, inside, [&](OpBuilder &nested, Location l) {
      add(nested, l); // another block's update: dropped (its rank adds it)
      nested.create<scf::YieldOp>(l);
    });
  }, /*status=*/!skip);
  func->setAttr(attr::kZeroOutputs, b.getUnitAttr());
  return func;
}

/// A 2-D pooling window's geometry, and its taps walked in the CPU
/// backend's order (row-major over the window).
struct PoolWindow {
  int64_t H, W, kH, kW, strideH, strideW, dilationH, dilationW;
  int64_t padTop, padLeft, padBottom, padRight;
  bool channelsLast;

  PoolWindow(ArrayRef<int64_t> input, ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
             ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations, bool channelsLast)
      : H(channelsLast ? input[1] : input[2]), W(channelsLast ? input[2] : input[3]),
        kH(kernel[0]), kW(kernel[1]), strideH(strides[0]), strideW(strides[1]),
        dilationH(dilations[0]), dilationW(dilations[1]), padTop(pads[0]), padLeft(pads[1]),
        padBottom(pads[2]), padRight(pads[3]), channelsLast(channelsLast) {}

  /// The output's flat index `o` over `outShape` as (n, c, oh, ow).
  std::array<Value, 4> outputAt(Body &t, Value o, ArrayRef<int64_t> outShape) const {
    SmallVector<Value> k = t.coordinates(o, outShape);
    return channelsLast ? std::array<Value, 4>{k[0], k[3], k[1], k[2]}
                        : std::array<Value, 4>{k[0], k[1], k[2], k[3]};
  }
  /// The input's flat index of (n, c, h, w), `channels` channels.
  Value inputAt(Body &t, Value n, Value c, Value h, Value w, int64_t channels) const {
    if (channelsLast)
      return t.add(t.mul(t.add(t.mul(t.add(t.mul(n, H), h), W), w), channels), c);
    return t.add(t.mul(t.add(t.mul(t.add(t.mul(n, channels), c), H), h), W), w);
  }

  using Tap = function_ref<SmallVector<Value>(Body &, Value h, Value w, Value inside,
                                               Value padded, ValueRange acc)>;
  /// Folds `tap` over the window of output (oh, ow), from `init`: h and w
  /// the tap's input coordinates (maybe outside), `inside` whether it is
  /// in the input, `padded` whether in the input and its pads.
  SmallVector<Value> fold(Body &t, Value oh, Value ow, ValueRange init, Tap tap) const {
    auto cmp = [](Body &in, arith::CmpIPredicate p, Value a, Value b) {
      return in.b.create<arith::CmpIOp>(in.loc, p, a, b).getResult();
    };
    auto both = [](Body &in, Value a, Value b) {
      return in.b.create<arith::AndIOp>(in.loc, a, b).getResult();
    };
    auto sub = [](Body &in, Value a, int64_t v) {
      return in.b.create<arith::SubIOp>(in.loc, a, in.index(v)).getResult();
    };
    Value top = sub(t, t.mul(oh, strideH), padTop), left = sub(t, t.mul(ow, strideW), padLeft);
    auto rows = t.b.create<scf::ForOp>(
        t.loc, t.index(0), t.index(kH), t.index(1), init,
        [&](OpBuilder &rb, Location rl, Value i, ValueRange racc) {
          Body r(rb, rl);
          Value h = r.add(top, r.mul(i, dilationH));
          auto cols = rb.create<scf::ForOp>(
              rl, r.index(0), r.index(kW), r.index(1), racc,
              [&](OpBuilder &cb, Location cl, Value j, ValueRange cacc) {
                Body c(cb, cl);
                Value w = c.add(left, c.mul(j, dilationW));
                using P = arith::CmpIPredicate;
                Value inside = both(c, both(c, cmp(c, P::sge, h, c.index(0)),
                                            cmp(c, P::slt, h, c.index(H))),
                                    both(c, cmp(c, P::sge, w, c.index(0)),
                                         cmp(c, P::slt, w, c.index(W))));
                Value padded = both(c, both(c, cmp(c, P::sge, h, c.index(-padTop)),
                                            cmp(c, P::slt, h, c.index(H + padBottom))),
                                    both(c, cmp(c, P::sge, w, c.index(-padLeft)),
                                         cmp(c, P::slt, w, c.index(W + padRight))));
                cb.create<scf::YieldOp>(cl, tap(c, h, w, inside, padded, cacc));
              });
          rb.create<scf::YieldOp>(rl, cols.getResults());
        });
    return rows.getResults();
  }
};

/// The element at (n, c, h, w) of `input`, or at 0 where the tap is
/// outside (its value then unused).
Value loadTap(Body &t, const PoolWindow &g, Value input, std::array<Value, 4> at, Value h,
              Value w, Value inside, int64_t channels) {
  Value zero = t.index(0);
  h = t.b.create<arith::SelectOp>(t.loc, inside, h, zero);
  w = t.b.create<arith::SelectOp>(t.loc, inside, w, zero);
  return t.load(input, g.inputAt(t, at[0], at[1], h, w, channels));
}

/// How many taps an average divides by: those inside the input, or with
/// count_include_pad those inside input and pads (the CPU backend's rule).
Value countTap(Body &t, Value count, Value inside, Value padded, bool includePad) {
  Value one = t.b.create<arith::ExtUIOp>(t.loc, t.b.getI64Type(), includePad ? padded : inside);
  return t.b.create<arith::AddIOp>(t.loc, count, one);
}

/// Max and average pooling: a thread per output, its window's taps in the
/// CPU backend's order; padding never wins a max (nor does NaN: a tap
/// replaces the running max only when greater), an average divides by the
/// count countTap gives. In f32 (16-bit inputs widened), as the CPU backend.
func::FuncOp poolKernel(OpBuilder &b, Operation *op, StringRef name, bool max,
                        bool countIncludePad) {
  auto input = tensorOf(op->getOperand(0)), output = tensorOf(op->getResult(0));
  auto attr = [&](StringRef n) { return op->getAttrOfType<DenseI64ArrayAttr>(n).asArrayRef(); };
  bool channelsLast = op->hasAttr("channels_last");
  PoolWindow g(input.getShape(), attr("kernel"), attr("strides"), attr("pads"),
               attr("dilations"), channelsLast);
  int64_t channels = channelsLast ? input.getDimSize(3) : input.getDimSize(1);
  ArrayRef<int64_t> outShape = output.getShape();
  return makeKernel(b, op, name, output.getNumElements(),
                    [&](Body &t, Value o, ArrayRef<Value> buf) {
    std::array<Value, 4> at = g.outputAt(t, o, outShape);
    Type f32 = t.b.getF32Type();
    Value lowest = t.constant(f32, -double(std::numeric_limits<float>::max()));
    SmallVector<Value> init{max ? lowest : t.constant(f32, 0),
                            t.b.create<arith::ConstantOp>(t.loc, t.b.getI64IntegerAttr(0))};
    SmallVector<Value> result = g.fold(
        t, at[2], at[3], init,
        [&](Body &in, Value h, Value w, Value inside, Value padded, ValueRange acc) {
          Value v = loadTap(in, g, buf[0], at, h, w, inside, channels);
          Value take = inside;
          if (max)
            take = in.b.create<arith::AndIOp>(
                in.loc, inside,
                in.b.create<arith::CmpFOp>(in.loc, arith::CmpFPredicate::OLT, acc[0], v));
          Value next = max ? v : in.addf(acc[0], v);
          return SmallVector<Value>{in.b.create<arith::SelectOp>(in.loc, take, next, acc[0]),
                                    countTap(in, acc[1], inside, padded, countIncludePad)};
        });
    Value y = result[0];
    if (!max) {
      Value count = result[1];
      Value some = t.b.create<arith::CmpIOp>(
          t.loc, arith::CmpIPredicate::sgt, count,
          t.b.create<arith::ConstantOp>(t.loc, t.b.getI64IntegerAttr(0)));
      Value mean = t.b.create<arith::DivFOp>(
          t.loc, y, t.b.create<arith::SIToFPOp>(t.loc, f32, count));
      y = t.b.create<arith::SelectOp>(t.loc, some, mean, t.constant(f32, 0));
    }
    t.store(y, buf[1], o);
  });
}

/// The first of the window (oh, ow)'s maxima in plane (n, c) of `input`
/// (NaN never one), as a flat i64 index; -1 where the window holds none.
Value windowArgmax(Body &t, const PoolWindow &g, Value input, Value n, Value c, Value oh,
                   Value ow, int64_t channels) {
  Type i64 = t.b.getI64Type(), f32 = t.b.getF32Type();
  auto i64Constant = [&](Body &in, int64_t v) {
    return in.b.create<arith::ConstantOp>(in.loc, in.b.getI64IntegerAttr(v)).getResult();
  };
  std::array<Value, 4> at{n, c, oh, ow};
  return g.fold(t, oh, ow, {i64Constant(t, -1), t.constant(f32, 0)},
                [&](Body &in, Value h, Value w, Value inside, Value, ValueRange acc) {
                  Value v = loadTap(in, g, input, at, h, w, inside, channels);
                  Value none = in.b.create<arith::CmpIOp>(in.loc, arith::CmpIPredicate::slt,
                                                          acc[0], i64Constant(in, 0));
                  Value greater = in.b.create<arith::CmpFOp>(
                      in.loc, arith::CmpFPredicate::OGT, v, acc[1]);
                  Value number =
                      in.b.create<arith::CmpFOp>(in.loc, arith::CmpFPredicate::ORD, v, v);
                  Value take = in.b.create<arith::AndIOp>(
                      in.loc, in.b.create<arith::AndIOp>(in.loc, inside, number),
                      in.b.create<arith::OrIOp>(in.loc, none, greater));
                  Value flat = in.b.create<arith::IndexCastOp>(
                      in.loc, i64, g.inputAt(in, n, c, h, w, channels));
                  return SmallVector<Value>{
                      in.b.create<arith::SelectOp>(in.loc, take, flat, acc[0]),
                      in.b.create<arith::SelectOp>(in.loc, take, v, acc[1])};
                })[0];
}

/// A pooling's gradient: a thread per input element, gathering from the
/// windows that hold it. A max pool's window gives its gradient to the
/// first of its maxima (NaN never one), so the thread finds each holding
/// window's; an average's gives its share to every tap inside the input.
/// The windows are taken by output row, then column: the order in which
/// the CPU backend adds them, so the sum is the CPU's to the bit, with no
/// atomics, no zeroed outputs, and 16-bit gradients summed in f32 and
/// rounded once (as the CPU backend's). NCHW, as the CPU backend's.
func::FuncOp poolBackwardKernel(OpBuilder &b, Operation *op, StringRef name, bool max,
                                bool countIncludePad) {
  Value gradOutput = op->getOperand(max ? 1 : 0);
  auto dx = tensorOf(op->getResult(0)), dy = tensorOf(gradOutput);
  auto attr = [&](StringRef n) { return op->getAttrOfType<DenseI64ArrayAttr>(n).asArrayRef(); };
  PoolWindow g(dx.getShape(), attr("kernel"), attr("strides"), attr("pads"), attr("dilations"),
               false);
  int64_t channels = dx.getDimSize(1), OH = dy.getDimSize(2), OW = dy.getDimSize(3);
  return makeKernel(b, op, name, dx.getNumElements(), [&](Body &t, Value x,
                                                          ArrayRef<Value> buf) {
    SmallVector<Value> at = t.coordinates(x, dx.getShape()); // n, c, h, w
    Value plane = t.mul(t.add(t.mul(at[0], channels), at[1]), OH * OW);
    Value dyBuffer = buf[max ? 1 : 0];
    Type f32 = t.b.getF32Type();
    using P = arith::CmpIPredicate;
    // The output coordinate whose window holds coordinate `at` by tap
    // `tap` (from the last, so outputs ascend), and whether there is one.
    auto outputOf = [](Body &in, Value at, Value tap, int64_t taps, int64_t pad,
                       int64_t dilation, int64_t stride, int64_t outputs) {
      Value last = in.index(taps - 1);
      Value i = in.b.create<arith::SubIOp>(in.loc, last, tap);
      Value start = in.b.create<arith::SubIOp>(in.loc, in.add(at, in.index(pad)),
                                               in.mul(i, dilation));
      Value o = in.b.create<arith::DivSIOp>(in.loc, start, in.index(stride));
      auto cmp = [&](P p, Value a, Value b) {
        return in.b.create<arith::CmpIOp>(in.loc, p, a, b).getResult();
      };
      Value onStride = cmp(P::eq, in.b.create<arith::RemSIOp>(in.loc, start, in.index(stride)),
                           in.index(0));
      Value ok = in.b.create<arith::AndIOp>(
          in.loc, in.b.create<arith::AndIOp>(in.loc, cmp(P::sge, start, in.index(0)), onStride),
          cmp(P::slt, o, in.index(outputs)));
      return std::pair<Value, Value>{o, ok};
    };
    Value sum = t.loop(g.kH, t.constant(f32, 0), [&](Body &r, Value acc, Value ti) -> Value {
      auto [oh, rowOk] = outputOf(r, at[2], ti, g.kH, g.padTop, g.dilationH, g.strideH, OH);
      return r.loop(g.kW, acc, [&](Body &c, Value acc, Value tj) -> Value {
        auto [ow, colOk] = outputOf(c, at[3], tj, g.kW, g.padLeft, g.dilationW, g.strideW, OW);
        Value holds = c.b.create<arith::AndIOp>(c.loc, rowOk, colOk);
        auto window = c.b.create<scf::IfOp>(
            c.loc, holds,
            [&](OpBuilder &wb, Location wl) {
              Body in(wb, wl);
              Value grad = in.load(dyBuffer, in.add(plane, in.add(in.mul(oh, OW), ow)));
              Value added;
              if (max) {
                Value best = windowArgmax(in, g, buf[0], at[0], at[1], oh, ow, channels);
                Value mine = wb.create<arith::CmpIOp>(
                    wl, P::eq, best, wb.create<arith::IndexCastOp>(wl, wb.getI64Type(), x));
                added = wb.create<arith::SelectOp>(wl, mine, in.addf(acc, grad), acc);
              } else {
                // The window holds this input element, so its count is positive.
                Value count = g.fold(in, oh, ow,
                                     {wb.create<arith::ConstantOp>(wl, wb.getI64IntegerAttr(0))
                                          .getResult()},
                                     [&](Body &tap, Value, Value, Value inside, Value padded,
                                         ValueRange n) {
                                       return SmallVector<Value>{countTap(
                                           tap, n[0], inside, padded, countIncludePad)};
                                     })[0];
                Value share =
                    wb.create<arith::DivFOp>(wl, grad, wb.create<arith::SIToFPOp>(wl, f32, count));
                added = in.addf(acc, share);
              }
              wb.create<scf::YieldOp>(wl, added);
            },
            [&](OpBuilder &eb, Location el) { eb.create<scf::YieldOp>(el, acc); });
        return window.getResult(0);
      });
    });
    t.store(sum, buf[max ? 2 : 1], x);
  });
}

/// Inference batch norm over dim 1: a thread per element, (x - mean) *
/// (scale / sqrt(var + eps)) + bias, the factor in f64 as the CPU backend's.
func::FuncOp batchNormKernel(OpBuilder &b, graph::BatchNormOp op, StringRef name) {
  auto input = tensorOf(op.getInput());
  int64_t channels = input.getDimSize(1), plane = product(input.getShape().drop_front(2));
  double epsilon = op.getEpsilon().convertToDouble();
  return makeKernel(b, op, name, input.getNumElements(),
                    [&](Body &t, Value i, ArrayRef<Value> buf) {
    Value c = t.rem(t.div(i, plane), channels);
    Type f64 = t.b.getF64Type();
    auto wide = [&](Value v) { return t.b.create<arith::ExtFOp>(t.loc, f64, v).getResult(); };
    Value factor = t.b.create<arith::DivFOp>(
        t.loc, wide(t.load(buf[1], c)),
        t.b.create<math::SqrtOp>(
            t.loc, t.b.create<arith::AddFOp>(t.loc, wide(t.load(buf[4], c)),
                                             t.constant(f64, epsilon))));
    Type type = Body::computeType(input.getElementType());
    Value f = t.b.create<arith::TruncFOp>(t.loc, type, factor);
    Value centred = t.b.create<arith::SubFOp>(t.loc, t.load(buf[0], i), t.load(buf[3], c));
    t.store(t.addf(t.b.create<arith::MulFOp>(t.loc, centred, f), t.load(buf[2], c)), buf[5], i);
  });
}

/// Rotary embedding: a thread per element i of a row of D (h = D / 2),
/// reading its partner j = i +- h: x[i] cos[i] + r sin, r = -x[j] for i < h
/// and x[j] after (`backward`: x[i] cos[i] - r' with r' the same of x sin,
/// sin read at j), in f32, the tables read where they broadcast.
func::FuncOp rotaryKernel(OpBuilder &b, graph::RotaryOp op, StringRef name) {
  auto input = tensorOf(op.getInput());
  ArrayRef<int64_t> shape = input.getShape();
  int64_t d = shape.back(), h = d / 2;
  bool backward = op.getBackward();
  // A table's step per dim of x: its own row-major stride, 0 where it
  // broadcasts (a dim of 1, or one it lacks).
  auto tableStrides = [&](Value table) {
    ArrayRef<int64_t> dims = tensorOf(table).getShape();
    SmallVector<int64_t> own = stridesOf(dims), steps(shape.size(), 0);
    size_t lead = shape.size() - dims.size();
    for (size_t k = lead; k < shape.size(); ++k)
      steps[k] = dims[k - lead] == 1 ? 0 : own[k - lead];
    return steps;
  };
  SmallVector<int64_t> cosSteps = tableStrides(op.getCos()), sinSteps = tableStrides(op.getSin());
  return makeKernel(b, op, name, input.getNumElements(),
                    [&](Body &t, Value e, ArrayRef<Value> buf) {
    SmallVector<Value> coords = t.coordinates(e, shape);
    Value i = coords.back();
    Value low = t.b.create<arith::CmpIOp>(t.loc, arith::CmpIPredicate::ult, i, t.index(h));
    // The partner's coordinates: the last one i + h or i - h.
    Value j = t.b.create<arith::SelectOp>(t.loc, low, t.add(i, t.index(h)),
                                          t.b.create<arith::SubIOp>(t.loc, i, t.index(h)));
    SmallVector<Value> partner(coords);
    partner.back() = j;
    Value jFlat = t.b.create<arith::SubIOp>(t.loc, t.add(e, j), i);
    Value x = t.load(buf[0], e), xj = t.load(buf[0], jFlat);
    Value c = t.load(buf[1], t.linear(coords, cosSteps));
    Value s = t.load(buf[2], t.linear(backward ? partner : coords, sinSteps));
    Type f = x.getType();
    if (c.getType() != f)
      c = t.b.create<arith::TruncFOp>(t.loc, f, c);
    if (s.getType() != f)
      s = t.b.create<arith::TruncFOp>(t.loc, f, s);
    // r = sign * xj * s: sign -1 below h; backward subtracts it.
    Value term = t.b.create<arith::MulFOp>(t.loc, xj, s);
    Value minus = t.b.create<arith::NegFOp>(t.loc, term);
    Value r = backward ? t.b.create<arith::SelectOp>(t.loc, low, term, minus)
                       : t.b.create<arith::SelectOp>(t.loc, low, minus, term);
    t.store(t.addf(t.b.create<arith::MulFOp>(t.loc, x, c), r), buf[3], e);
  });
}

/// Trilu: a thread per element, kept where its column j and row i (of the
/// last two dims) have j - i >= k (upper) or <= k (lower), else zero.
func::FuncOp triluKernel(OpBuilder &b, graph::TriluOp op, StringRef name) {
  auto input = tensorOf(op.getInput());
  ArrayRef<int64_t> shape = input.getShape();
  int64_t cols = shape.back(), rows = shape[shape.size() - 2], k = op.getK();
  bool upper = op.getUpper();
  return makeKernel(b, op, name, input.getNumElements(),
                    [&](Body &t, Value e, ArrayRef<Value> buf) {
    Value i = t.rem(t.div(e, cols), rows), j = t.rem(e, cols);
    Value diff = t.b.create<arith::SubIOp>(t.loc, j, i);
    Value keep = t.b.create<arith::CmpIOp>(
        t.loc, upper ? arith::CmpIPredicate::sge : arith::CmpIPredicate::sle, diff, t.index(k));
    Value v = t.b.create<memref::LoadOp>(t.loc, buf[0], ValueRange{e});
    Type element = v.getType();
    Value zero = isa<FloatType>(element)
                     ? t.b.create<arith::ConstantOp>(t.loc, t.b.getFloatAttr(element, 0))
                           .getResult()
                     : t.b.create<arith::ConstantOp>(t.loc, t.b.getIntegerAttr(element, 0))
                           .getResult();
    t.b.create<memref::StoreOp>(t.loc, t.b.create<arith::SelectOp>(t.loc, keep, v, zero), buf[1],
                                ValueRange{e});
  });
}

/// TopK: a thread per line along the axis, k passes over it, each taking
/// the element that comes first among those after the last one taken, in
/// the CPU backend's order: the extreme first (NaN above every number),
/// equal values by the lower index. O(k n) a line: for the few k TopK is
/// used with (a generation step's choice).
func::FuncOp topKKernel(OpBuilder &b, graph::TopKOp op, StringRef name) {
  auto input = tensorOf(op.getInput());
  ArrayRef<int64_t> shape = input.getShape();
  int64_t axis = op.getAxis() < 0 ? op.getAxis() + input.getRank() : op.getAxis();
  int64_t n = shape[size_t(axis)], inner = product(shape.drop_front(axis + 1));
  int64_t lines = product(shape.take_front(axis)) * inner, k = op.getK();
  bool largest = op.getLargest();
  Type element = input.getElementType();
  bool fl = isa<FloatType>(element);
  return makeKernel(b, op, name, lines, [&](Body &t, Value line, ArrayRef<Value> buf) {
    Value outer = t.div(line, inner), i = t.rem(line, inner);
    Value base = t.add(t.mul(outer, n * inner), i), outBase = t.add(t.mul(outer, k * inner), i);
    Type i64 = t.b.getI64Type();
    auto constant = [](Body &in, int64_t v) {
      return in.b.create<arith::ConstantOp>(in.loc, in.b.getI64IntegerAttr(v)).getResult();
    };
    auto valueAt = [&](Body &in, Value p) { // p: an i64 index along the axis
      Value at = in.b.create<arith::IndexCastOp>(in.loc, in.b.getIndexType(), p);
      Value flat = in.add(base, in.mul(at, inner));
      return in.b.create<memref::LoadOp>(in.loc, buf[0], ValueRange{flat}).getResult();
    };
    // a above c: NaN above every number.
    auto above = [&](Body &in, Value a, Value c) -> Value {
      if (!fl)
        return in.b.create<arith::CmpIOp>(in.loc, arith::CmpIPredicate::sgt, a, c);
      Value aNan = in.b.create<arith::CmpFOp>(in.loc, arith::CmpFPredicate::UNO, a, a);
      Value cNan = in.b.create<arith::CmpFOp>(in.loc, arith::CmpFPredicate::UNO, c, c);
      Value greater = in.b.create<arith::CmpFOp>(in.loc, arith::CmpFPredicate::OGT, a, c);
      Value cNumber = in.b.create<arith::XOrIOp>(
          in.loc, cNan, in.b.create<arith::ConstantOp>(in.loc, in.b.getBoolAttr(true)));
      return in.b.create<arith::SelectOp>(in.loc, aNan, cNumber, greater);
    };
    // Whether element p (value a) comes before q (value c).
    auto first = [&](Body &in, Value p, Value a, Value q, Value c) -> Value {
      Value ahead = largest ? above(in, a, c) : above(in, c, a);
      Value behind = largest ? above(in, c, a) : above(in, a, c);
      Value tie = in.b.create<arith::AndIOp>(
          in.loc,
          in.b.create<arith::XOrIOp>(
              in.loc, behind, in.b.create<arith::ConstantOp>(in.loc, in.b.getBoolAttr(true))),
          in.b.create<arith::CmpIOp>(in.loc, arith::CmpIPredicate::slt, p, q));
      return in.b.create<arith::OrIOp>(in.loc, ahead, tie);
    };
    t.loop(k, constant(t, -1), [&](Body &pass, Value last, Value j) -> Value {
      Value none = constant(pass, -1);
      Value lastValue = valueAt(pass, pass.b.create<arith::MaxSIOp>(pass.loc, last,
                                                                    constant(pass, 0)));
      Value taken = pass.b.create<arith::CmpIOp>(pass.loc, arith::CmpIPredicate::sge, last,
                                                 constant(pass, 0));
      Value best = pass.loop(n, none, [&](Body &in, Value acc, Value q) -> Value {
        Value qi = in.b.create<arith::IndexCastOp>(in.loc, i64, q);
        Value c = valueAt(in, qi);
        // After the last taken (or none taken yet) ...
        Value after = in.b.create<arith::OrIOp>(
            in.loc,
            in.b.create<arith::XOrIOp>(
                in.loc, taken, in.b.create<arith::ConstantOp>(in.loc, in.b.getBoolAttr(true))),
            first(in, last, lastValue, qi, c));
        // ... and before the best so far (or the first such).
        Value some = in.b.create<arith::CmpIOp>(in.loc, arith::CmpIPredicate::sge, acc,
                                                constant(in, 0));
        Value accValue = valueAt(in, in.b.create<arith::MaxSIOp>(in.loc, acc, constant(in, 0)));
        Value better = in.b.create<arith::OrIOp>(
            in.loc,
            in.b.create<arith::XOrIOp>(
                in.loc, some, in.b.create<arith::ConstantOp>(in.loc, in.b.getBoolAttr(true))),
            first(in, qi, c, acc, accValue));
        return in.b.create<arith::SelectOp>(
            in.loc, in.b.create<arith::AndIOp>(in.loc, after, better), qi, acc);
      });
      pass.b.create<memref::StoreOp>(pass.loc, best, buf[1],
                                     ValueRange{pass.add(outBase, pass.mul(j, inner))});
      return best;
    });
  });
}

} // namespace

bool hasLoopKernel(Operation *op) {
  return isa<graph::ReduceSumOp, graph::ReduceMeanOp, graph::ReduceMaxOp, graph::ReduceMinOp,
             graph::SoftmaxOp, graph::LogSoftmaxOp, graph::LayerNormOp,
             graph::LayerNormBackwardOp, graph::CrossEntropyOp, graph::TransposeOp,
             graph::SliceOp, graph::SplitOp, graph::CopyOp, graph::ConcatOp, graph::GatherOp,
             graph::ScatterAddOp, graph::MaxPool2DOp, graph::AvgPool2DOp,
             graph::MaxPool2DBackwardOp, graph::AvgPool2DBackwardOp, graph::BatchNormOp,
             graph::TriluOp, graph::TopKOp, graph::RotaryOp>(op);
}

namespace {

func::FuncOp buildOne(OpBuilder &b, Operation *op, StringRef name, std::string &missing) {
  for (Value v : buffersOf(op)) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t || !supportedElement(t.getElementType())) {
      llvm::raw_string_ostream os(missing);
      os << op->getName().stripDialect() << " of " << v.getType();
      return {};
    }
  }
  return llvm::TypeSwitch<Operation *, func::FuncOp>(op)
      .Case<graph::ReduceSumOp, graph::ReduceMeanOp, graph::ReduceMaxOp, graph::ReduceMinOp>(
          [&](Operation *r) { return reduceKernel(b, r, name); })
      .Case([&](graph::SoftmaxOp s) {
        int64_t rank = tensorOf(s.getInput()).getRank();
        return softmaxKernel(b, s, name, s.getAxis() < 0 ? s.getAxis() + rank : s.getAxis(),
                             false);
      })
      .Case([&](graph::LogSoftmaxOp s) {
        int64_t rank = tensorOf(s.getInput()).getRank();
        return softmaxKernel(b, s, name, s.getAxis() < 0 ? s.getAxis() + rank : s.getAxis(),
                             true);
      })
      .Case([&](graph::LayerNormOp l) { return layerNormKernel(b, l, name); })
      .Case([&](graph::LayerNormBackwardOp l) { return layerNormBackwardKernel(b, l, name); })
      .Case([&](graph::CrossEntropyOp c) { return crossEntropyKernel(b, c, name); })
      .Case([&](graph::TransposeOp t) {
        SmallVector<int64_t> in = stridesOf(tensorOf(t.getInput()).getShape()), strides;
        for (int64_t p : t.getPerm())
          strides.push_back(in[size_t(p)]);
        auto shape = tensorOf(t.getResult()).getShape();
        return moveKernel(b, t.getLoc(), t.getInput(), t.getResult(), name,
                          [&](Body &body, Value o) {
                            return body.linear(body.coordinates(o, shape), strides);
                          });
      })
      .Case([&](graph::SliceOp s) {
        return sliceKernel(b, s.getLoc(), s.getInput(), s.getResult(), name, s.getOffsets(),
                           s.getStrides());
      })
      .Case([&](graph::CopyOp c) {
        return moveKernel(b, c.getLoc(), c.getInput(), c.getResult(), name,
                          [](Body &, Value o) { return o; });
      })
      .Case([&](graph::ConcatOp c) { return concatKernel(b, c, name); })
      .Case([&](graph::GatherOp g) { return gatherKernel(b, g, name); })
      .Case([&](graph::ScatterAddOp s) { return scatterAddKernel(b, s, name, missing); })
      .Case<graph::MaxPool2DOp, graph::AvgPool2DOp, graph::MaxPool2DBackwardOp,
            graph::AvgPool2DBackwardOp>([&](Operation *p) -> func::FuncOp {
        // Computed in f32, as the CPU backend's (which has no f64 pools).
        if (!Body::computeType(tensorOf(p->getResult(0)).getElementType()).isF32()) {
          missing = p->getName().stripDialect().str() + " other than f32, bf16 or f16";
          return {};
        }
        bool includePad = false;
        if (auto avg = dyn_cast<graph::AvgPool2DOp>(p))
          includePad = avg.getCountIncludePad();
        if (auto avg = dyn_cast<graph::AvgPool2DBackwardOp>(p))
          includePad = avg.getCountIncludePad();
        bool max = isa<graph::MaxPool2DOp, graph::MaxPool2DBackwardOp>(p);
        return isa<graph::MaxPool2DOp, graph::AvgPool2DOp>(p)
                   ? poolKernel(b, p, name, max, includePad)
                   : poolBackwardKernel(b, p, name, max, includePad);
      })
      .Case([&](graph::BatchNormOp n) { return batchNormKernel(b, n, name); })
      .Case([&](graph::TriluOp t) { return triluKernel(b, t, name); })
      .Case([&](graph::RotaryOp r) { return rotaryKernel(b, r, name); })
      .Case([&](graph::TopKOp t) -> func::FuncOp {
        Type e = tensorOf(t.getInput()).getElementType();
        if (!e.isF32() && !e.isF64() && !e.isInteger(32) && !e.isInteger(64)) {
          missing = "top_k of a type the CPU backend does not order";
          return {};
        }
        return topKKernel(b, t, name);
      })
      .Default([&](Operation *o) {
        missing = o->getName().getStringRef().str();
        return func::FuncOp();
      });
}

} // namespace

SmallVector<func::FuncOp> buildLoopKernels(OpBuilder &b, Operation *op,
                                           function_ref<std::string()> nextName,
                                           std::string &missing) {
  auto split = dyn_cast<graph::SplitOp>(op);
  if (!split) {
    func::FuncOp func = buildOne(b, op, nextName(), missing);
    return func ? SmallVector<func::FuncOp>{func} : SmallVector<func::FuncOp>{};
  }
  // A split is a slice per piece, as the plan states it.
  auto input = tensorOf(split.getInput());
  if (!supportedElement(input.getElementType())) {
    llvm::raw_string_ostream os(missing);
    os << "split of " << input.getElementType();
    return {};
  }
  int64_t axis = split.getAxis() < 0 ? split.getAxis() + input.getRank() : split.getAxis();
  SmallVector<int64_t> offsets(size_t(input.getRank()), 0), steps(size_t(input.getRank()), 1);
  SmallVector<func::FuncOp> pieces;
  for (Value piece : split.getResults()) {
    pieces.push_back(sliceKernel(b, split.getLoc(), split.getInput(), piece, nextName(),
                                 offsets, steps));
    offsets[size_t(axis)] += tensorOf(piece).getDimSize(axis);
  }
  return pieces;
}

} // namespace dtc
