//===- InterleaveQkv.cpp - a packed projection's columns by heads ---------===//
//
// Transformers' GPT-2 computes q, k and v with one GEMM whose columns are
// [q | k | v], each H heads of D: a packed graph.attention reads its
// product as [..., S, 3, H, D]. A rank of a tensor-parallel split needs
// its heads' columns of all three, which are three runs apart, so the
// sharding search could cut the GEMM only by its rows (partial products,
// an all-reduce of the whole [B, S, 3 H D] product each layer). Megatron-
// LM stores the weight [K, H, 3, D] instead. This pass makes that layout
// in the step: W' = W viewed [K, 3, H, D], transposed to [K, H, 3, D] (and
// the bias alike), the product x W' + b' read as [..., S, H, 3, D]
// (`interleaved`). Cut by heads, W' and the product are contiguous blocks;
// the permutation's gradient is the inverse permutation. The weights keep
// the model's layout, so checkpoints, export and resharding see nothing.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <numeric>

namespace dtc {
#define GEN_PASS_DEF_INTERLEAVEQKV
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// `v` with its dim `axis` (of 3 H D) reordered from [3, H, D] to [H, 3,
/// D]: a reshape, a transpose, a reshape.
Value interleaved(OpBuilder &b, Location loc, Value v, int64_t axis, int64_t heads,
                  int64_t dim) {
  RankedTensorType t = typeOf(v);
  SmallVector<int64_t> split(t.getShape().take_front(axis));
  split.append({3, heads, dim});
  split.append(t.getShape().begin() + axis + 1, t.getShape().end());
  Value pieces = b.create<graph::ReshapeOp>(loc, t.clone(split), v);
  SmallVector<int64_t> perm(split.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[size_t(axis)], perm[size_t(axis) + 1]);
  Value swapped = b.create<graph::TransposeOp>(loc, pieces, b.getDenseI64ArrayAttr(perm));
  return b.create<graph::ReshapeOp>(loc, t, swapped);
}

/// Whether `op` and all that reads it (collected in `dead`, readers first)
/// compute nothing anything else reads: what dtc-fuse-attention left of
/// the split q, k and v before cleanup removes it.
bool deadForward(Operation *op, SetVector<Operation *> &dead) {
  if (dead.contains(op))
    return true;
  if (!isMemoryEffectFree(op) || op->hasTrait<OpTrait::IsTerminator>())
    return false;
  for (Operation *user : op->getUsers())
    if (!deadForward(user, dead))
      return false;
  dead.insert(op);
  return true;
}

/// Erases what reads `v` but `keep` where nothing else reads that.
void eraseDeadReaders(Value v, Operation *keep) {
  SetVector<Operation *> dead;
  for (Operation *user : llvm::to_vector(v.getUsers()))
    if (user != keep && !deadForward(user, dead))
      return;
  for (Operation *op : dead) // readers before what they read
    op->erase();
}

/// The projection behind a packed attention's operand: the reshape of its
/// product, the product's matmul and the bias add (null when there is
/// none), each read by the next alone; nothing where it is not that.
struct Projection {
  graph::ReshapeOp view;
  graph::MatmulOp product;
  graph::AddOp bias;
  /// The chain from the view down to the matmul, readers first.
  SmallVector<Operation *> chain;
};

std::optional<Projection> projectionOf(Value qkv, int64_t width) {
  Projection p;
  p.view = qkv.getDefiningOp<graph::ReshapeOp>();
  if (!p.view)
    return std::nullopt;
  Value product = p.view.getInput();
  Operation *reader = p.view;
  p.chain.push_back(p.view);
  while (auto reshape = product.getDefiningOp<graph::ReshapeOp>()) { // before cleanup composes
    eraseDeadReaders(product, reader);
    if (!product.hasOneUse() || typeOf(product).getShape().back() != width)
      return std::nullopt;
    reader = reshape;
    p.chain.push_back(reshape);
    product = reshape.getInput();
  }
  eraseDeadReaders(product, reader);
  if ((p.bias = product.getDefiningOp<graph::AddOp>())) {
    Value b = p.bias.getRhs();
    if (!product.hasOneUse() || typeOf(b).getShape() != ArrayRef<int64_t>{width})
      return std::nullopt;
    p.chain.push_back(p.bias);
    product = p.bias.getLhs();
  }
  p.product = product.getDefiningOp<graph::MatmulOp>();
  if (!p.product || !product.hasOneUse() || p.product.getTransposeLhs() ||
      typeOf(product).getShape().back() != width)
    return std::nullopt;
  p.chain.push_back(p.product);
  return p;
}

struct InterleaveQkv : impl::InterleaveQkvBase<InterleaveQkv> {
  void runOnOperation() override {
    SmallVector<graph::AttentionOp> packed;
    getOperation().walk([&](graph::AttentionOp op) {
      if (op.getPacked() && !op.getInterleaved())
        packed.push_back(op);
    });
    int done = 0;
    for (graph::AttentionOp op : packed) {
      ArrayRef<int64_t> shape = typeOf(op.getQ()).getShape(); // [..., S, 3, H, D]
      int64_t heads = shape[shape.size() - 2], dim = shape.back();
      std::optional<Projection> p = projectionOf(op.getQ(), 3 * heads * dim);
      if (!p)
        continue;
      OpBuilder b(op);
      Location loc = op.getLoc();
      Value w = p->product.getRhs();
      int64_t wAxis = p->product.getTransposeRhs() ? typeOf(w).getRank() - 2
                                                   : typeOf(w).getRank() - 1;
      Value product = b.create<graph::MatmulOp>(
          p->product.getLoc(), typeOf(p->product.getOutput()), p->product.getLhs(),
          interleaved(b, loc, w, wAxis, heads, dim), p->product.getTransposeLhsAttr(),
          p->product.getTransposeRhsAttr());
      if (p->bias)
        product = b.create<graph::AddOp>(p->bias.getLoc(), typeOf(p->bias.getOutput()), product,
                                         interleaved(b, loc, p->bias.getRhs(), 0, heads, dim));
      SmallVector<int64_t> byHeads(shape);
      std::swap(byHeads[byHeads.size() - 3], byHeads[byHeads.size() - 2]);
      Value qkv = b.create<graph::ReshapeOp>(loc, typeOf(op.getQ()).clone(byHeads), product);
      auto replacement = b.create<graph::AttentionOp>(
          loc, qkv, qkv, qkv, op.getBias(), op.getScaleAttr(), op.getCausalAttr(),
          op.getBshdAttr(), op.getPackedAttr(), b.getUnitAttr());
      op.getOutput().replaceAllUsesWith(replacement.getOutput());
      op.getLse().replaceAllUsesWith(replacement.getLse());
      op.erase();
      // The old projection now computes what nothing reads: gone before the
      // training step (and its micro-batches) are built from this function.
      for (Operation *old : p->chain)
        if (old->use_empty())
          old->erase();
      ++done;
    }
    if (done)
      addNote(getOperation(),
              "layout: " + std::to_string(done) +
                  " packed q, k, v projections laid out by heads ([K, H, 3, D], as "
                  "Megatron-LM stores them) in the step, so that tensor parallelism can split "
                  "them by heads; the weights keep the model's layout");
  }
};

} // namespace
} // namespace dtc
