//===- MixedPrecision.cpp - a model computing in bf16 ---------------------===//
//
// castModelToBf16, which a bf16 training step's builder runs on the model
// before the loss (Training.cpp), and dtc-mixed-precision, which runs it
// on an inference function: the model's outputs then leave bf16 through a
// cast to the types they were declared with; and bf16CastsOf, the casts
// such a model reads a weight through (dtc-keep-bf16-weights and the
// search's pricing of a weight's bf16 copy).
//
//===----------------------------------------------------------------------===//
#include "compiler/MixedPrecision.h"

#include "compiler/CompileNotes.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace dtc {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {
RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }
} // namespace

SmallVector<graph::CastOp> bf16CastsOf(graph::ParameterOp weight) {
  SmallVector<graph::CastOp> casts;
  if (!weight.getType().getElementType().isF32() || weight->hasAttr(attr::kZeros) ||
      weight->hasAttr(attr::kAccumulator) || weight.getCastOf())
    return casts;
  for (Operation *user : weight->getUsers())
    if (auto cast = dyn_cast<graph::CastOp>(user);
        cast && cast.getType().getElementType().isBF16())
      casts.push_back(cast);
  return casts;
}

int castModelToBf16(func::FuncOp func) {
  int tables = 0;
  Block &block = func.getBody().front();
  Operation *terminator = block.getTerminator();
  // The model: what its outputs depend on.
  llvm::DenseSet<Operation *> model;
  SmallVector<Value> work(terminator->getOperands());
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (op && model.insert(op).second)
      llvm::append_range(work, op->getOperands());
  }
  Type bf16 = Builder(func.getContext()).getBF16Type();
  auto isF32 = [](Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    return type && type.getElementType().isF32();
  };
  // Tables: what the model computes from constants, frozen parameters
  // and integer inputs alone, reading no trained weight and no float
  // input (positions, rotary angles and their cosines and sines, masks).
  // They stay f32, as PyTorch's models keep them (Llama's rotary
  // embedding runs with autocast off): a position past 256 is not exact
  // in bf16, so its angle would be another position's. Activations read
  // them through a cast.
  llvm::DenseSet<Operation *> activations;
  auto trained = [](Operation &op) {
    auto p = dyn_cast<graph::ParameterOp>(op);
    return p && !p.getFrozen();
  };
  for (Operation &op : block.without_terminator())
    if (trained(op) || llvm::any_of(op.getOperands(), [&](Value v) {
          return isa<BlockArgument>(v) ? isa<FloatType>(typeOf(v).getElementType())
                                       : activations.contains(v.getDefiningOp());
        }))
      activations.insert(&op);
  auto readsAsBf16 = [&](Operation *user) {
    return model.contains(user) && activations.contains(user);
  };
  // A value the model reads as bf16: those uses move to a cast.
  auto castInModel = [&](Value v, OpBuilder &b) {
    if (llvm::none_of(v.getUsers(), readsAsBf16))
      return false;
    auto cast = b.create<graph::CastOp>(v.getLoc(), typeOf(v).clone(bf16), v);
    v.replaceUsesWithIf(cast, [&](OpOperand &use) {
      return use.getOwner() != cast && readsAsBf16(use.getOwner());
    });
    return true;
  };
  OpBuilder b(func.getContext());
  b.setInsertionPointToStart(&block);
  for (BlockArgument arg : block.getArguments())
    if (isF32(arg))
      castInModel(arg, b);
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    if (model.contains(&op))
      ops.push_back(&op);
  for (Operation *op : ops) {
    b.setInsertionPointAfter(op);
    if (isa<graph::ParameterOp, graph::ConstantOp>(op) || !activations.contains(op)) {
      bool table = !isa<graph::ParameterOp, graph::ConstantOp>(op);
      for (Value result : op->getResults())
        if (isF32(result) && castInModel(result, b) && table)
          ++tables;
      continue;
    }
    for (Value result : op->getResults()) {
      // Attention's log-sum-exp stays f32: the backward's probabilities
      // are exp(s - lse), which bf16's 8 bits of mantissa would skew.
      if (!isF32(result) ||
          (isa<graph::AttentionOp>(op) && cast<OpResult>(result).getResultNumber() == 1))
        continue;
      auto type = typeOf(result);
      result.setType(type.clone(bf16));
      // Readers outside the model get f32 back.
      auto outside = [&](Operation *user) { return !model.contains(user); };
      if (llvm::any_of(result.getUsers(), outside)) {
        auto back = b.create<graph::CastOp>(op->getLoc(), type, result);
        result.replaceUsesWithIf(back, [&](OpOperand &use) {
          return use.getOwner() != back && !model.contains(use.getOwner());
        });
      }
    }
  }
  // A rotary embedding reads its tables in f32, as they were made (the
  // kernel computes in f32): a position's angle keeps its digits.
  func.walk([&](graph::RotaryOp rotary) {
    for (OpOperand *table : {&rotary.getCosMutable(), &rotary.getSinMutable()})
      if (auto narrowed = table->get().getDefiningOp<graph::CastOp>();
          narrowed && isF32(narrowed.getInput()))
        table->set(narrowed.getInput());
  });
  // Attention's bias stays f32 (its large negatives are -inf in bf16,
  // which the kernels take too; its finite values keep their digits).
  func.walk([&](Operation *op) {
    auto attention = dyn_cast<graph::AttentionOp>(op);
    auto backward = dyn_cast<graph::AttentionBackwardOp>(op);
    OpOperand *bias = nullptr;
    if (attention && attention.getBias())
      bias = &attention.getBiasMutable()[0];
    else if (backward && backward.getBias())
      bias = &backward.getBiasMutable()[0];
    if (!bias || isF32(bias->get()))
      return;
    b.setInsertionPoint(op);
    Value from = bias->get();
    if (auto narrowed = from.getDefiningOp<graph::CastOp>(); narrowed && isF32(narrowed.getInput()))
      bias->set(narrowed.getInput()); // the f32 value the model cast
    else
      bias->set(b.create<graph::CastOp>(op->getLoc(), typeOf(from).clone(b.getF32Type()), from));
  });
  return tables;
}

namespace {
struct MixedPrecision : impl::MixedPrecisionBase<MixedPrecision> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    int tables = castModelToBf16(func);
    // An output a product makes (a language model's logits) is the
    // product's f32 accumulator, kept rather than rounded to bf16 and cast
    // back: no pass of its own over the model's largest tensor.
    int widened = 0;
    for (Value output : func.getBody().front().getTerminator()->getOperands()) {
      auto back = output.getDefiningOp<graph::CastOp>();
      auto product = back ? back.getInput().getDefiningOp<graph::MatmulOp>() : nullptr;
      if (!product || !product->hasOneUse() || !typeOf(back).getElementType().isF32() ||
          !typeOf(product.getLhs()).getElementType().isBF16())
        continue;
      product.getOutput().setType(typeOf(back));
      back.getOutput().replaceAllUsesWith(product.getOutput());
      back.erase();
      ++widened;
    }
    int products = 0;
    func.walk([&](Operation *op) {
      if (isa<graph::MatmulOp, graph::Conv2DOp>(op) &&
          typeOf(op->getOperand(0)).getElementType().isBF16())
        ++products;
    });
    addNote(func, "precision: the model computes in bf16 (" + std::to_string(products) +
                      " matmuls and convolutions; activations stored in bf16), its weights "
                      "cast once; its outputs are cast back to the types the model declares" +
                      (widened ? " (" + std::to_string(widened) +
                                     " written in f32 by the product that makes it)"
                               : std::string()) +
                      (tables ? "; " + std::to_string(tables) +
                                    (tables == 1 ? " table" : " tables") +
                                    " computed from positions and constants alone (rotary "
                                    "cos and sin, masks) " +
                                    (tables == 1 ? "stays fp32 until activations read it"
                                                 : "stay fp32 until activations read them")
                              : std::string()));
  }
};
} // namespace

} // namespace dtc
