//===- FuseMatmulBias.cpp - a linear layer's bias into its GEMM's epilogue -===//
//
// A linear layer is a matmul and then its bias added to every row (and,
// in inference, often an activation). As written, the add is a pass of its
// own over the product, or a term of the elementwise kernel after it.
// GEMM libraries add a bias and apply ReLU or tanh-GELU as the product is
// written (cuBLASLt's epilogues, oneDNN's bias and post-ops), so the
// product and the bias become one graph.matmul_bias. The activation joins
// when the biased value is read by it alone. In training a tanh GELU's
// input is also its gradient's: the GELU joins all the same, and the op
// keeps the biased value as a second result for the gradient
// (`keep_preactivation`: cuBLASLt's GELU_AUX_BIAS writes both). A ReLU's
// stays apart there (cuBLASLt's RELU_AUX keeps a bit mask, not the value).
//
// Then a residual connection: a biased product without an activation, read
// only by an add of another value of its type, takes that value as its
// `addend` (cuBLASLt's C with beta 1), so the sum is written as the product
// is: the add's pass over three tensors is gone (GPT-2's two per layer).
// Likewise in the backward, where the residual stream's gradient meets a
// layer norm's input gradient: the layer norm's row kernel adds it as it
// writes (`residual`).
//
// And a bias's gradient, the sum of the output gradient's rows, is written
// by the GEMM that reads those rows for the weight's gradient (x^T dy):
// graph.matmul_grad, cuBLASLt's BGRAD epilogue. A tanh GELU's gradient
// multiplies in the product that makes its output gradient:
// graph.matmul_gelu_grad, cuBLASLt's DGELU epilogue. Last, a product added
// to another value of its type takes it as its C: graph.matmul_acc, the
// input gradient of a layer that several linear layers read (attention's
// query, key and value; an MLP's gate and up) summed as the GEMMs write.
//
//===----------------------------------------------------------------------===//
#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/ConstantValues.h"
#include "compiler/FusionMatches.h"
#include "compiler/Interior.h"
#include "compiler/Passes.h"
#include "compiler/Placement.h"

#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>

namespace dtc {
#define GEN_PASS_DEF_FUSEMATMULBIAS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// `bias` as the [N] vector a product `out` of N columns takes: itself,
/// or reshaped from leading 1s; null when it is not such a bias.
Value biasVector(OpBuilder &b, Location loc, Value bias, RankedTensorType out) {
  auto type = typeOf(bias);
  int64_t n = out.getShape().back();
  if (type.getElementType() != out.getElementType() || type.getRank() == 0 ||
      type.getShape().back() != n || type.getNumElements() != n)
    return {};
  if (type.getRank() == 1)
    return bias;
  return b.create<graph::ReshapeOp>(loc, RankedTensorType::get({n}, out.getElementType()), bias);
}

/// A term of an add that a product of `OpTy` (read by the add alone, also
/// through a reshape that keeps rows of N, read alone too) makes, with the
/// add's other term of its type: the product, the reshape (or null), the
/// other term.
template <typename OpTy> struct SumTerm {
  OpTy product;
  graph::ReshapeOp through;
  Value other;
};
template <typename OpTy> std::optional<SumTerm<OpTy>> sumTerm(graph::AddOp add, bool lhs) {
  Value term = lhs ? add.getLhs() : add.getRhs();
  Value other = lhs ? add.getRhs() : add.getLhs();
  auto through = term.getDefiningOp<graph::ReshapeOp>();
  auto m = (through ? through.getInput() : term).template getDefiningOp<OpTy>();
  if (!m || !m->hasOneUse() || (through && !through->hasOneUse()) || other == term ||
      typeOf(other) != typeOf(term) || typeOf(add.getOutput()) != typeOf(term) ||
      !samePart(m, add) ||
      (through && typeOf(term).getShape().back() != typeOf(m.getOutput()).getShape().back()))
    return std::nullopt;
  return SumTerm<OpTy>{m, through, other};
}

/// Replaces `add` by the op `join` builds at `b` from the other term (as
/// the product's rows), which takes over the product's attributes; the
/// add, the reshape and the product go.
template <typename OpTy>
void replaceSum(graph::AddOp add, SumTerm<OpTy> t, OpBuilder &b,
                function_ref<Operation *(Value addend)> join) {
  Value addend = t.other;
  if (t.through) // as the product's rows
    addend = b.create<graph::ReshapeOp>(add.getLoc(), typeOf(t.product.getOutput()), t.other);
  Operation *joined = join(addend);
  for (NamedAttribute a : t.product->getDiscardableAttrs())
    joined->setAttr(a.getName(), a.getValue());
  Value sum = joined->getResult(0);
  if (t.through)
    sum = b.create<graph::ReshapeOp>(add.getLoc(), typeOf(add.getOutput()), sum);
  add.getOutput().replaceAllUsesWith(sum);
  add.erase();
  if (t.through)
    t.through.erase();
  t.product.erase();
}

/// The add of a biased product (no activation, read by the add alone,
/// also through a reshape that keeps rows of N) and another value as one
/// matmul_bias with that value its addend; whether it was.
bool joinAddend(graph::AddOp add) {
  for (bool lhs : {true, false}) {
    auto t = sumTerm<graph::MatmulBiasOp>(add, lhs);
    if (!t)
      continue;
    graph::MatmulBiasOp m = t->product;
    if (m.getActivation() != "none" || m.getKeepPreactivation() || !m.getAddend().empty())
      continue;
    OpBuilder b(add);
    replaceSum(add, *t, b, [&](Value addend) {
      return b.create<graph::MatmulBiasOp>(m.getLoc(), m.getLhs(), m.getRhs(), m.getBias(),
                                           ValueRange{addend}, m.getTransposeLhsAttr(),
                                           m.getTransposeRhsAttr(), m.getActivationAttr(),
                                           UnitAttr())
          .getOperation();
    });
    return true;
  }
  return false;
}

/// The add of a layer norm's input gradient (read by the add alone) and
/// another value of its type as the gradient op's `residual`; whether it
/// was. The joined op stands where the gradient op stood when the other
/// term is made before it (its statistics' readers may precede the add),
/// else at the add when nothing reads the statistics before it.
bool joinResidual(graph::AddOp add) {
  for (bool first : {true, false}) {
    Value grad = first ? add.getLhs() : add.getRhs();
    Value other = first ? add.getRhs() : add.getLhs();
    auto g = grad.getDefiningOp<graph::LayerNormBackwardOp>();
    if (!g || grad != g.getGradInput() || !grad.hasOneUse() || !g.getResidual().empty() ||
        typeOf(other) != typeOf(grad) || typeOf(add.getOutput()) != typeOf(grad) ||
        !samePart(g, add))
      continue;
    Operation *def = other.getDefiningOp();
    Operation *at = g;
    if (def && !def->isBeforeInBlock(g)) {
      auto early = [&](Operation *user) { return user->isBeforeInBlock(add); };
      if (llvm::any_of(g.getMean().getUsers(), early) ||
          llvm::any_of(g.getRstd().getUsers(), early))
        continue;
      at = add;
    }
    OpBuilder b(at);
    auto joined = b.create<graph::LayerNormBackwardOp>(
        g.getLoc(), g->getResultTypes(), g.getInput(), g.getScale(), g.getGradOutput(),
        ValueRange{other}, g.getAxisAttr(), g.getEpsilonAttr(), g.getRmsAttr());
    for (NamedAttribute a : g->getDiscardableAttrs())
      joined->setAttr(a.getName(), a.getValue());
    add.getOutput().replaceAllUsesWith(joined.getGradInput());
    g.getMean().replaceAllUsesWith(joined.getMean());
    g.getRstd().replaceAllUsesWith(joined.getRstd());
    add.erase();
    g.erase();
    return true;
  }
  return false;
}

/// A sum of `dy` over all its dims but the last (its rows: a linear
/// layer's bias gradient) that a product x^T dy also reads (its weight
/// gradient; dy as [rows, N], through a reshape when it has more dims) as
/// that product's second result (graph.matmul_grad); whether it was. The
/// joined op stands where the product did (its large result made no
/// earlier), else where the sum did.
bool joinBiasGradient(graph::ReduceSumOp reduce) {
  Value dy = reduce.getInput();
  int64_t rank = typeOf(dy).getRank();
  SmallVector<int64_t> axes;
  for (int64_t a : reduce.getAxes())
    axes.push_back(a < 0 ? a + rank : a);
  llvm::sort(axes);
  if (rank < 2 || axes != llvm::to_vector(llvm::seq<int64_t>(0, rank - 1)))
    return false;
  auto madeBefore = [](Value v, Operation *op) {
    Operation *def = v.getDefiningOp();
    return !def || def->isBeforeInBlock(op);
  };
  // dy as the product's [rows, N] operand: itself, its reshapes to that,
  // or what it is a reshape of (and that value's other such views).
  int64_t n = typeOf(dy).getShape().back();
  auto isRows = [&](Value v) {
    return typeOf(v).getRank() == 2 && typeOf(v).getShape().back() == n;
  };
  SmallVector<Value> rows, viewed{dy};
  if (isRows(dy))
    rows.push_back(dy);
  if (auto r = dy.getDefiningOp<graph::ReshapeOp>())
    viewed.push_back(r.getInput());
  for (Value v : viewed) {
    if (isRows(v) && !llvm::is_contained(rows, v))
      rows.push_back(v);
    for (Operation *user : v.getUsers())
      if (auto r = dyn_cast<graph::ReshapeOp>(user); r && isRows(r.getOutput()) &&
                                                     !llvm::is_contained(rows, r.getOutput()))
        rows.push_back(r.getOutput());
  }
  for (Value rhs : rows)
    for (Operation *user : rhs.getUsers()) {
      auto m = dyn_cast<graph::MatmulOp>(user);
      if (!m || m.getRhs() != rhs || m.getLhs() == rhs || !m.getTransposeLhs() ||
          m.getTransposeRhs() || typeOf(m.getLhs()).getRank() != 2 || !samePart(m, reduce))
        continue;
      // At the product (the large result made no earlier than it was):
      // what reads the sum before it (a view of it, its reduction over the
      // data-parallel ranks) moves down after it, in order.
      Operation *at = sinkReadersBelow(reduce.getOutput(), m) ? m.getOperation() : nullptr;
      // Else at the sum, the product's operands made before it (views of
      // values that are move up with them).
      if (!at) {
        for (Value v : {Value(m.getLhs()), rhs})
          if (auto view = v.getDefiningOp<graph::ReshapeOp>();
              view && !madeBefore(v, reduce) && madeBefore(view.getInput(), reduce))
            view->moveBefore(reduce);
        if (!madeBefore(m.getLhs(), reduce) || !madeBefore(rhs, reduce))
          continue;
        at = reduce;
      }
      OpBuilder b(at);
      auto joined = b.create<graph::MatmulGradOp>(
          m.getLoc(), TypeRange{m.getOutput().getType(), reduce.getOutput().getType()},
          m.getLhs(), rhs);
      for (NamedAttribute a : m->getDiscardableAttrs())
        joined->setAttr(a.getName(), a.getValue());
      m.getOutput().replaceAllUsesWith(joined.getOutput());
      reduce.getOutput().replaceAllUsesWith(joined.getBiasGrad());
      m.erase();
      reduce.erase();
      return true;
    }
  return false;
}

/// Matching tanh GELU's gradient as autodiff writes it out
/// (dialects/graph/Gradients.cpp), operands of adds and products in either
/// order, constants to 1e-4 relative; `matched` collects its ops.
class GeluGradientMatch {
public:
  explicit GeluGradientMatch(SmallVectorImpl<Operation *> &matched) : matched_(matched) {}

  /// Whether `d` is the derivative at `x`: (1 + t) / 2 + x / 2 (1 - t^2)
  /// (c + 3ac x^2), t = tanh(x (c + ac x^2)), c = sqrt(2/pi), a = 0.044715.
  bool derivative(Value d, Value x) {
    x_ = x;
    return binary<graph::AddOp>(d, [&](Value left, Value right) {
      return half(left) && slope(right);
    });
  }

private:
  static constexpr double kA = 0.044715;
  double c() const { return std::sqrt(2.0 / M_PI); }

  /// v = Op(p, q) with f(p, q), or with f(q, p) for a commutative Op.
  template <class Op> bool binary(Value v, llvm::function_ref<bool(Value, Value)> f) {
    auto op = v.getDefiningOp<Op>();
    if (!op)
      return false;
    size_t mark = matched_.size();
    Value t = t_; // a failed try forgets the tanh it found with its ops
    for (bool swap : {false, true}) {
      if (swap && isa<graph::SubOp>(op))
        break;
      if (swap ? f(op.getRhs(), op.getLhs()) : f(op.getLhs(), op.getRhs())) {
        matched_.push_back(op);
        return true;
      }
      matched_.resize(mark);
      t_ = t;
    }
    return false;
  }
  bool is(Value v, double want) { return near(scalarConstant(v), want); }
  bool square(Value v) {
    return binary<graph::MulOp>(v, [&](Value p, Value q) { return p == x_ && q == x_; });
  }
  /// b + x^2 k: the tanh's argument's and the slope's factor.
  bool quadratic(Value v, double b, double k) {
    return binary<graph::AddOp>(v, [&](Value p, Value q) {
      return is(p, b) && binary<graph::MulOp>(q, [&](Value r, Value s) {
               return square(r) && is(s, k);
             });
    });
  }
  /// t = tanh(x (c + ac x^2)), remembered.
  bool tanh(Value v) {
    auto t = v.getDefiningOp<graph::TanhOp>();
    if (!t || (t_ && v != t_))
      return false;
    if (t_)
      return true;
    if (!binary<graph::MulOp>(t.getInput(), [&](Value p, Value q) {
          return p == x_ && quadratic(q, c(), c() * kA);
        }))
      return false;
    matched_.push_back(t);
    t_ = v;
    return true;
  }
  /// (1 + t) / 2
  bool half(Value v) {
    return binary<graph::MulOp>(v, [&](Value p, Value q) {
      return is(p, 0.5) && binary<graph::AddOp>(q, [&](Value r, Value s) {
               return is(r, 1.0) && tanh(s);
             });
    });
  }
  /// x / 2 (1 - t^2) (c + 3ac x^2)
  bool slope(Value v) {
    return binary<graph::MulOp>(v, [&](Value p, Value q) {
      return binary<graph::MulOp>(p, [&](Value r, Value s) { return r == x_ && is(s, 0.5); }) &&
             binary<graph::MulOp>(q, [&](Value r, Value s) {
               return binary<graph::SubOp>(r, [&](Value one, Value tt) {
                        return is(one, 1.0) && binary<graph::MulOp>(tt, [&](Value a, Value b) {
                                 return tanh(a) && a == b;
                               });
                      }) &&
                      quadratic(s, c(), 3 * kA * c());
             });
    });
  }

  SmallVectorImpl<Operation *> &matched_;
  Value x_, t_;
};

} // namespace

/// A matmul whose product is a tanh GELU's output gradient, read by that
/// gradient's expression alone (through a cast to f32 and back in bf16, and
/// a reshape): what graph.matmul_gelu_grad (cuBLASLt's DGELU) would take.
std::optional<GeluGradientJoin> matchGeluGradient(graph::MatmulOp m) {
  Value dy = m.getOutput();
  if (!dy.hasOneUse())
    return std::nullopt;
  SmallVector<Operation *> matched;
  Operation *user = *dy.getUsers().begin();
  // A view between (transformers' GPT-2 reshapes [B*T, N] to [B, T, N]).
  auto through = dyn_cast<graph::ReshapeOp>(user);
  if (through) {
    if (!through->hasOneUse())
      return std::nullopt;
    matched.push_back(through);
    dy = through.getOutput();
    user = *dy.getUsers().begin();
  }
  Value wide = dy; // the product as the expression reads it
  if (auto cast = dyn_cast<graph::CastOp>(user)) {
    if (!cast->hasOneUse())
      return std::nullopt;
    matched.push_back(cast);
    wide = cast.getOutput();
    user = *wide.getUsers().begin();
  }
  auto product = dyn_cast<graph::MulOp>(user);
  if (!product)
    return std::nullopt;
  matched.push_back(product);
  Value d = product.getLhs() == wide ? product.getRhs() : product.getLhs();
  Value root = product.getOutput();
  if (root.hasOneUse())
    if (auto back = dyn_cast<graph::CastOp>(*root.getUsers().begin());
        back && back.getType() == dy.getType() && wide != dy) {
      matched.push_back(back);
      root = back.getOutput();
    }
  if (root.getType() != dy.getType())
    return std::nullopt;
  // x, the GELU's input as the derivative reads it (itself, or cast to
  // f32), is a factor of one of the right term's products: each value
  // there is tried.
  auto tryX = [&](Value x) {
    SmallVector<Operation *> inner;
    GeluGradientMatch match(inner);
    if (!match.derivative(d, x))
      return false;
    matched.append(inner.begin(), inner.end());
    return true;
  };
  Value x;
  if (auto add = d.getDefiningOp<graph::AddOp>())
    for (Value term : {add.getLhs(), add.getRhs()})
      if (auto mul = term.getDefiningOp<graph::MulOp>())
        for (Value factor : {mul.getLhs(), mul.getRhs()})
          if (auto inner = factor.getDefiningOp<graph::MulOp>())
            for (Value v : {inner.getLhs(), inner.getRhs()})
              if (!x && !scalarConstant(v) && tryX(v))
                x = v;
  if (!x)
    return std::nullopt;
  // Every matched op read by the expression alone.
  llvm::SmallPtrSet<Operation *, 32> inside(matched.begin(), matched.end());
  for (Operation *op : matched)
    for (Value r : op->getResults())
      for (Operation *u : r.getUsers())
        if (!inside.contains(u) && r != root)
          return std::nullopt;
  // The GELU's input the epilogue reads, of the output's type (the widening
  // cast goes too when nothing else reads it).
  Value input = x;
  if (auto widen = x.getDefiningOp<graph::CastOp>();
      widen && widen.getInput().getType() == root.getType()) {
    input = widen.getInput();
    if (llvm::all_of(widen->getUsers(), [&](Operation *u) { return inside.contains(u); }))
      inside.insert(widen);
  }
  if (input.getType() != root.getType() || !samePart(m, root.getDefiningOp()))
    return std::nullopt;
  GeluGradientJoin found;
  found.inside.assign(inside.begin(), inside.end());
  found.root = root;
  found.input = input;
  found.through = through;
  return found;
}

namespace {

/// `m` and the GELU gradient after it (matchGeluGradient) as one
/// graph.matmul_gelu_grad reading the GELU's input; whether it was.
bool joinGeluGradient(graph::MatmulOp m) {
  std::optional<GeluGradientJoin> match = matchGeluGradient(m);
  if (!match)
    return false;
  Value root = match->root, input = match->input;
  graph::ReshapeOp through = match->through;
  llvm::SmallPtrSet<Operation *, 32> inside(match->inside.begin(), match->inside.end());
  // In the product's shape (the GELU's input a view of it, as kept).
  OpBuilder b(root.getDefiningOp());
  Type rows = m.getOutput().getType();
  if (through) {
    auto view = input.getDefiningOp<graph::ReshapeOp>();
    input = view && view.getInput().getType() == rows
                ? view.getInput()
                : b.create<graph::ReshapeOp>(m.getLoc(), rows, input).getOutput();
  }
  auto joined = b.create<graph::MatmulGeluGradOp>(m.getLoc(), rows, m.getLhs(), m.getRhs(),
                                                  input, m.getTransposeLhsAttr(),
                                                  m.getTransposeRhsAttr());
  for (NamedAttribute a : m->getDiscardableAttrs())
    joined->setAttr(a.getName(), a.getValue());
  Value result = joined.getOutput();
  if (through)
    result = b.create<graph::ReshapeOp>(m.getLoc(), root.getType(), result);
  root.replaceAllUsesWith(result);
  inside.insert(m);
  SmallVector<Operation *> dead(inside.begin(), inside.end());
  llvm::sort(dead, [](Operation *a, Operation *b) { return b->isBeforeInBlock(a); });
  for (Operation *op : dead)
    op->erase();
  return true;
}

/// The add of a plain product (read by the add alone, also through a
/// reshape that keeps rows of N) and another value of its type as one
/// graph.matmul_acc with that value its addend (cuBLASLt's C with beta 1):
/// a layer's input gradient summed over the linear layers that read the
/// input; whether it was. A micro-batches' accumulator's sum stays an
/// add, written in place where the GEMM would write a buffer of its own.
bool joinProductSum(graph::AddOp add) {
  // The product made after the other term, where it is: the sum then
  // stands where the later product did, the operands' lives as they were.
  auto madeBefore = [](Value v, Operation *op) {
    Operation *def = v.getDefiningOp();
    return !def || (def->getBlock() == op->getBlock() && def->isBeforeInBlock(op));
  };
  auto t = sumTerm<graph::MatmulOp>(add, true), u = sumTerm<graph::MatmulOp>(add, false);
  if (u && (!t || madeBefore(u->other, u->product)))
    std::swap(t, u);
  for (auto &term : {t, u}) {
    if (!term)
      continue;
    auto accumulator = storageOf(term->other).getDefiningOp<graph::ParameterOp>();
    if (accumulator && accumulator->hasAttr(attr::kAccumulator))
      return false;
    graph::MatmulOp m = term->product;
    OpBuilder b(add);
    if (madeBefore(term->other, m))
      b.setInsertionPoint(m);
    replaceSum(add, *term, b, [&](Value addend) {
      return b.create<graph::MatmulAccOp>(m.getLoc(), m.getOutput().getType(), m.getLhs(),
                                          m.getRhs(), addend, m.getTransposeLhsAttr(),
                                          m.getTransposeRhsAttr())
          .getOperation();
    });
    return true;
  }
  return false;
}

struct FuseMatmulBias : impl::FuseMatmulBiasBase<FuseMatmulBias> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<graph::AddOp> adds;
    func.walk([&](graph::AddOp add) { adds.push_back(add); });
    int fused = 0, relu = 0, gelu = 0, kept = 0;
    for (graph::AddOp add : adds) {
      for (bool matmulFirst : {true, false}) {
        Value product = matmulFirst ? add.getLhs() : add.getRhs();
        Value bias = matmulFirst ? add.getRhs() : add.getLhs();
        auto matmul = product.getDefiningOp<graph::MatmulOp>();
        if (!matmul || !matmul->hasOneUse() || typeOf(add.getOutput()) != typeOf(product))
          continue;
        auto out = typeOf(product);
        if (!isa<FloatType>(out.getElementType()) || out.getRank() < 2)
          continue;
        OpBuilder b(add);
        Value vector = biasVector(b, add.getLoc(), bias, out);
        if (!vector)
          continue;
        // The activation, when the biased value is read by it alone (or a
        // tanh GELU beside other readers: the value is kept for them),
        // also through a reshape that keeps rows of N (transformers'
        // GPT-2 reshapes [B*T, N] to [B, T, N] between the two).
        Value biased = add.getOutput();
        graph::ReshapeOp through;
        if (add->hasOneUse())
          if (auto r = dyn_cast<graph::ReshapeOp>(*add->getUsers().begin());
              r && typeOf(r.getOutput()).getShape().back() == out.getShape().back())
            through = r, biased = r.getOutput();
        Operation *last = nullptr;
        StringRef activation = "none";
        bool keep = false;
        if (biased.hasOneUse()) {
          Operation *user = *biased.getUsers().begin();
          if (isa<graph::ReluOp>(user)) {
            last = user, activation = "relu";
          } else if (auto g = dyn_cast<graph::GeluOp>(user); g && g.getApproximate() == "tanh") {
            last = user, activation = "gelu_tanh";
          }
        } else {
          for (Operation *user : biased.getUsers())
            if (auto g = dyn_cast<graph::GeluOp>(user);
                g && g.getApproximate() == "tanh" && !keep) {
              last = user, activation = "gelu_tanh", keep = true;
            }
        }
        if (!last) // no activation: the product and bias alone, before any reshape
          through = {}, biased = add.getOutput(), last = add;
        // Before every reader (kept: the GELU's other readers may precede it).
        Operation *before = keep ? (through ? through.getOperation() : add.getOperation()) : last;
        b.setInsertionPoint(before);
        auto fusedOp = b.create<graph::MatmulBiasOp>(
            matmul.getLoc(), matmul.getLhs(), matmul.getRhs(), vector, ValueRange{},
            matmul.getTransposeLhsAttr(), matmul.getTransposeRhsAttr(),
            b.getStringAttr(activation), keep ? b.getUnitAttr() : UnitAttr());
        for (NamedAttribute a : matmul->getDiscardableAttrs()) // a stage, a recompute mark
          fusedOp->setAttr(a.getName(), a.getValue());
        // The results in the readers' shape.
        auto shaped = [&](Value v) -> Value {
          return through ? b.create<graph::ReshapeOp>(through.getLoc(), typeOf(biased), v)
                         : v;
        };
        last->getResult(0).replaceAllUsesWith(shaped(fusedOp.getOutput()));
        if (keep)
          biased.replaceAllUsesWith(shaped(fusedOp.getPreactivation()));
        if (last != add)
          last->erase();
        if (through)
          through.erase();
        add.erase();
        matmul.erase();
        ++fused;
        relu += activation == "relu";
        gelu += activation == "gelu_tanh";
        kept += keep;
        break;
      }
    }
    int summed = 0, residuals = 0;
    adds.clear();
    func.walk([&](graph::AddOp add) { adds.push_back(add); });
    for (graph::AddOp add : adds) {
      if (joinAddend(add))
        ++summed;
      else
        residuals += joinResidual(add);
    }
    if (fused)
      addNote(func, "fusion: " + std::to_string(fused) + " matmuls add their bias as they write (" +
                        std::to_string(relu) + " then ReLU, " + std::to_string(gelu) +
                        " then tanh GELU" +
                        (kept ? ", " + std::to_string(kept) +
                                    " of those keeping the GELU's input for its gradient"
                              : std::string()) +
                        (summed ? "; " + std::to_string(summed) +
                                      " adding a residual connection's other term too"
                                : std::string()) +
                        "): the GEMM's epilogue, no pass of their own");
    if (residuals)
      addNote(func, "fusion: " + std::to_string(residuals) +
                        " layer norm gradients add the residual stream's as they write it");
    SmallVector<graph::MatmulOp> products;
    func.walk([&](graph::MatmulOp m) { products.push_back(m); });
    int geluGradients = 0;
    for (graph::MatmulOp m : products)
      geluGradients += joinGeluGradient(m);
    if (geluGradients)
      addNote(func, "fusion: " + std::to_string(geluGradients) +
                        " GELU gradients computed by the GEMM that makes their output gradient: "
                        "its product times the derivative at the GELU's kept input, no pass of "
                        "their own");
    SmallVector<graph::ReduceSumOp> sums;
    func.walk([&](graph::ReduceSumOp r) { sums.push_back(r); });
    int biasGradients = 0;
    for (graph::ReduceSumOp r : sums)
      biasGradients += joinBiasGradient(r);
    if (biasGradients)
      addNote(func, "fusion: " + std::to_string(biasGradients) +
                        " weight gradients' GEMMs sum their output gradient's rows as they read "
                        "them: the bias gradients, no reductions of their own");
    // Last: the products the epilogues above did not take.
    adds.clear();
    func.walk([&](graph::AddOp add) { adds.push_back(add); });
    int productSums = 0;
    for (graph::AddOp add : adds)
      productSums += joinProductSum(add);
    if (productSums)
      addNote(func, "fusion: " + std::to_string(productSums) +
                        " sums of products (a layer's input gradient over the linear layers "
                        "that read the input) added by the GEMMs as they write (C, beta 1): "
                        "no pass of their own");
  }
};

} // namespace
} // namespace dtc
