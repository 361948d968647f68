//===- ConstantValues.cpp - a value computed from constants, evaluated ----===//
#include "compiler/ConstantValues.h"

#include "dialects/graph/ConstantFolding.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <functional>
#include <limits>

using namespace mlir;

namespace dtc {
namespace {

using Values = std::optional<ConstantValues>;

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[size_t(d)] = strides[size_t(d + 1)] * shape[size_t(d + 1)];
  return strides;
}

class Evaluator {
public:
  explicit Evaluator(int64_t maxElements) : max_(maxElements) {}

  /// A value read by several ops (a mask's shared parts) is evaluated
  /// once.
  Values evaluate(Value v, int depth = 0) {
    if (v.hasOneUse() || v.use_empty())
      return evaluateOnce(v, depth);
    auto [it, fresh] = known_.try_emplace(v);
    if (fresh)
      it->second = evaluateOnce(v, depth);
    return it->second;
  }

private:
  Values evaluateOnce(Value v, int depth) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    Operation *op = v.getDefiningOp();
    if (!type || !type.hasStaticShape() || type.getNumElements() > max_ || !op || depth > 64)
      return std::nullopt;
    ConstantValues out{SmallVector<int64_t>(type.getShape()), {}};
    auto operand = [&](unsigned i) { return evaluate(op->getOperand(i), depth + 1); };
    // Each result element from the operands' broadcast elements.
    auto elementwise = [&](auto f) -> Values {
      SmallVector<ConstantValues> in;
      for (unsigned i = 0; i < op->getNumOperands(); ++i) {
        Values x = operand(i);
        if (!x)
          return std::nullopt;
        in.push_back(std::move(*x));
      }
      if (in.size() > 3)
        return std::nullopt;
      // Each operand's step in each dim of the result (0 where it is
      // broadcast); the last dim runs in the inner loop, the others count
      // rows.
      size_t rank = out.shape.size();
      SmallVector<SmallVector<int64_t>> steps;
      for (const ConstantValues &x : in) {
        SmallVector<int64_t> own = stridesOf(x.shape), step(rank, 0);
        size_t lead = rank - x.shape.size();
        for (size_t d = 0; d < x.shape.size(); ++d)
          if (x.shape[d] != 1)
            step[lead + d] = own[d];
        steps.push_back(std::move(step));
      }
      int64_t count = type.getNumElements(), inner = rank ? out.shape.back() : 1;
      out.values.resize(size_t(count));
      SmallVector<int64_t> row(rank, 0);
      float args[3];
      for (int64_t base = 0; base < count; base += inner) {
        int64_t at[3] = {0, 0, 0}, last[3] = {0, 0, 0};
        for (size_t i = 0; i < in.size(); ++i) {
          for (size_t d = 0; d + 1 < rank; ++d)
            at[i] += row[d] * steps[i][d];
          last[i] = rank ? steps[i][rank - 1] : 0;
        }
        for (int64_t j = 0; j < inner; ++j) {
          for (size_t i = 0; i < in.size(); ++i)
            args[i] = in[i].values[size_t(at[i] + j * last[i])];
          out.values[size_t(base + j)] = f(ArrayRef<float>(args, in.size()));
        }
        for (size_t d = rank > 0 ? rank - 1 : 0; d-- > 0;) { // the next row
          if (++row[d] < out.shape[d])
            break;
          row[d] = 0;
        }
      }
      return out;
    };
    auto binary = [&](auto f) {
      return elementwise([&](ArrayRef<float> a) { return float(f(a[0], a[1])); });
    };
    bool toBool = type.getElementType().isInteger(1);
    return llvm::TypeSwitch<Operation *, Values>(op)
        .Case([&](graph::ConstantOp c) { return constant(c, out); })
        .Case([&](graph::AddOp) { return binary(std::plus<float>()); })
        .Case([&](graph::SubOp) { return binary(std::minus<float>()); })
        .Case([&](graph::MulOp) { return binary(std::multiplies<float>()); })
        .Case([&](graph::EqualOp) { return binary(std::equal_to<float>()); })
        .Case([&](graph::LessOp) { return binary(std::less<float>()); })
        .Case([&](graph::LessEqualOp) { return binary(std::less_equal<float>()); })
        .Case([&](graph::GreaterOp) { return binary(std::greater<float>()); })
        .Case([&](graph::GreaterEqualOp) { return binary(std::greater_equal<float>()); })
        .Case([&](graph::AndOp) { return binary([](float a, float b) { return a && b; }); })
        .Case([&](graph::OrOp) { return binary([](float a, float b) { return a || b; }); })
        .Case([&](graph::WhereOp) {
          return elementwise([](ArrayRef<float> a) { return a[0] != 0 ? a[1] : a[2]; });
        })
        .Case([&](graph::NotOp) {
          return elementwise([](ArrayRef<float> a) { return float(a[0] == 0); });
        })
        .Case([&](graph::CastOp) {
          return elementwise([&](ArrayRef<float> a) { return toBool ? float(a[0] != 0) : a[0]; });
        })
        .Case([&](graph::BroadcastOp) {
          return elementwise([](ArrayRef<float> a) { return a[0]; });
        })
        .Case([&](graph::ReshapeOp) -> Values {
          Values x = operand(0);
          if (x)
            x->shape = out.shape;
          return x;
        })
        .Case([&](graph::TransposeOp t) { return transpose(operand(0), t.getPerm(), out); })
        .Case([&](graph::TriluOp t) {
          return trilu(operand(0), t.getUpper(), int64_t(t.getK())); // I64Attr reads unsigned
        })
        .Case([&](graph::GatherOp g) {
          return gather(operand(0), operand(1), int64_t(g.getAxis()), g.getSkipOutside(), out);
        })
        .Case([&](graph::ReduceSumOp r) {
          return reduce(operand(0), r.getAxes(), out, 0.0f, std::plus<float>());
        })
        .Case([&](graph::ReduceMaxOp r) {
          return reduce(operand(0), r.getAxes(), out, -std::numeric_limits<float>::infinity(),
                        [](float a, float b) { return std::max(a, b); });
        })
        .Case([&](graph::ReduceMinOp r) {
          return reduce(operand(0), r.getAxes(), out, std::numeric_limits<float>::infinity(),
                        [](float a, float b) { return std::min(a, b); });
        })
        .Default([](Operation *) { return std::nullopt; });
  }

  static Values constant(graph::ConstantOp c, ConstantValues &out) {
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    if (!dense)
      return std::nullopt;
    Type e = dense.getElementType();
    auto one = [&](auto x) -> float {
      if constexpr (std::is_same_v<decltype(x), APFloat>)
        return float(x.convertToDouble());
      else if constexpr (std::is_same_v<decltype(x), bool>)
        return x;
      else
        return float(x.getSExtValue());
    };
    if (dense.isSplat()) {
      float x = isa<FloatType>(e)  ? one(dense.getSplatValue<APFloat>())
                : e.isInteger(1) ? one(dense.getSplatValue<bool>())
                                 : one(dense.getSplatValue<APInt>());
      out.values.assign(size_t(dense.getNumElements()), x);
    } else if (isa<FloatType>(e)) {
      for (const APFloat &x : dense.getValues<APFloat>())
        out.values.push_back(one(x));
    } else if (e.isInteger(1)) {
      for (bool x : dense.getValues<bool>())
        out.values.push_back(x);
    } else if (isa<IntegerType>(e)) {
      for (const APInt &x : dense.getValues<APInt>())
        out.values.push_back(one(x));
    } else {
      return std::nullopt;
    }
    return out;
  }

  static Values transpose(Values x, ArrayRef<int64_t> perm, ConstantValues &out) {
    if (!x)
      return std::nullopt;
    SmallVector<int64_t> in = stridesOf(x->shape), index(out.shape.size(), 0);
    out.values.resize(x->values.size());
    for (float &y : out.values) {
      int64_t from = 0;
      for (size_t d = 0; d < perm.size(); ++d)
        from += index[d] * in[size_t(perm[d])];
      y = x->values[size_t(from)];
      for (size_t d = index.size(); d-- > 0;) { // the next index, row-major
        if (++index[d] < out.shape[d])
          break;
        index[d] = 0;
      }
    }
    return out;
  }

  static Values trilu(Values x, bool upper, int64_t k) {
    if (!x || x->shape.size() < 2)
      return x;
    int64_t rows = x->shape[x->shape.size() - 2], cols = x->shape.back();
    for (size_t e = 0; e < x->values.size(); ++e) {
      int64_t i = int64_t(e) / cols % rows, j = int64_t(e) % cols;
      if (upper ? j - i < k : j - i > k)
        x->values[e] = 0;
    }
    return x;
  }

  /// skip_outside: an index outside [0, n) takes zeros (no wrap).
  static Values gather(Values data, Values indices, int64_t axis, bool skipOutside,
                       ConstantValues &out) {
    if (!data || !indices)
      return std::nullopt;
    int64_t n = data->shape[size_t(axis)], inner = 1, outer = 1;
    for (size_t d = size_t(axis) + 1; d < data->shape.size(); ++d)
      inner *= data->shape[d];
    for (size_t d = 0; d < size_t(axis); ++d)
      outer *= data->shape[d];
    int64_t count = int64_t(indices->values.size());
    out.values.resize(size_t(outer * count * inner));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < count; ++c) {
        int64_t at = int64_t(indices->values[size_t(c)]);
        if (skipOutside && (at < 0 || at >= n)) {
          std::fill_n(out.values.begin() + (o * count + c) * inner, inner, 0.0f);
          continue;
        }
        if (at < 0)
          at += n;
        if (at < 0 || at >= n)
          return std::nullopt;
        std::copy_n(data->values.begin() + (o * n + at) * inner, inner,
                    out.values.begin() + (o * count + c) * inner);
      }
    return out;
  }

  template <class F>
  static Values reduce(Values x, ArrayRef<int64_t> axes, ConstantValues &out, float init, F f) {
    if (!x)
      return std::nullopt;
    // The kept dims' strides in the output, 0 for the reduced.
    SmallVector<int64_t> keptShape;
    for (size_t d = 0; d < x->shape.size(); ++d)
      keptShape.push_back(llvm::is_contained(axes, int64_t(d)) ? 1 : x->shape[d]);
    SmallVector<int64_t> kept = stridesOf(keptShape), index(x->shape.size(), 0);
    int64_t size = 1;
    for (int64_t s : keptShape)
      size *= s;
    out.values.assign(size_t(size), init);
    for (float value : x->values) {
      int64_t to = 0;
      for (size_t d = 0; d < index.size(); ++d)
        if (keptShape[d] != 1)
          to += index[d] * kept[d];
      out.values[size_t(to)] = f(out.values[size_t(to)], value);
      for (size_t d = index.size(); d-- > 0;) { // the next index, row-major
        if (++index[d] < x->shape[d])
          break;
        index[d] = 0;
      }
    }
    return out;
  }

  int64_t max_;
  llvm::DenseMap<Value, Values> known_;
};

} // namespace

std::optional<double> scalarConstant(Value v) {
  auto constant = v.getDefiningOp<graph::ConstantOp>();
  auto dense = constant ? dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
  if (!dense || !dense.isSplat() || !isa<FloatType>(dense.getElementType()) ||
      dense.getType().getNumElements() != 1)
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

std::optional<ConstantValues> evaluateConstant(Value v, int64_t maxElements) {
  return Evaluator(maxElements).evaluate(v);
}

} // namespace dtc
