//===- Autodiff.cpp - reverse-mode autodiff over the graph dialect --------===//
//
// The walk is generic: each op defines its own gradient (Gradients.cpp in
// the dialect). Gradients of a value used several times are summed. The
// dtc-autodiff pass differentiates a function's first result (a scalar
// loss) and returns each parameter's gradient after it (not a frozen
// parameter's: training leaves those alone).
//
//===----------------------------------------------------------------------===//
#include "compiler/Autodiff.h"
#include "dialects/graph/AttrNames.h"
#include "compiler/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace dtc {
#define GEN_PASS_DEF_AUTODIFF
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {

LogicalResult differentiate(func::FuncOp func, Value loss, DenseMap<Value, Value> &grads) {
  auto lossType = cast<RankedTensorType>(loss.getType());
  if (lossType.getRank() != 0 || !isa<FloatType>(lossType.getElementType()))
    return func.emitError("the loss must be a float scalar, got ") << lossType;
  Block &block = func.getBody().front();
  Operation *terminator = block.getTerminator();
  OpBuilder b(terminator);
  SmallVector<Operation *> forward;
  for (Operation &op : block.without_terminator())
    forward.push_back(&op);

  grads[loss] = b.create<graph::ConstantOp>(
      loss.getLoc(), DenseElementsAttr::get(lossType, b.getFloatAttr(lossType.getElementType(), 1.0)));
  for (Operation *op : llvm::reverse(forward)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      resultGrads.push_back(grads.lookup(r));
      any |= bool(resultGrads.back());
    }
    if (!any || op->getNumOperands() == 0)
      continue;
    auto differentiable = dyn_cast<graph::DifferentiableOp>(op);
    if (!differentiable)
      return op->emitError("no gradient for '") << op->getName() << "'";
    SmallVector<Value> operandGrads;
    if (failed(differentiable.buildGradients(b, resultGrads, operandGrads)))
      return failure();
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads)) {
      if (!grad)
        continue;
      Value &sum = grads[operand];
      sum = sum ? b.create<graph::AddOp>(op->getLoc(), sum, grad).getResult() : grad;
    }
  }
  return success();
}

namespace {

struct Autodiff : impl::AutodiffBase<Autodiff> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getNumResults() == 0) {
      func.emitError("dtc-autodiff needs a function whose first result is the loss");
      return signalPassFailure();
    }
    Block &block = func.getBody().front();
    Operation *terminator = block.getTerminator();
    DenseMap<Value, Value> grads;
    if (failed(differentiate(func, terminator->getOperand(0), grads)))
      return signalPassFailure();
    SmallVector<Value> results(terminator->getOperands());
    SmallVector<StringAttr> names;
    for (Operation &op : block)
      if (auto p = dyn_cast<graph::ParameterOp>(op)) {
        Value grad = grads.lookup(p.getResult());
        if (!grad || p.getFrozen())
          continue;
        results.push_back(grad);
        names.push_back(p.getNameAttr());
      }
    unsigned first = func.getNumResults();
    terminator->setOperands(results);
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    func.setType(FunctionType::get(&getContext(), func.getArgumentTypes(), types));
    SmallVector<DictionaryAttr> attrs;
    for (unsigned i = 0; i < first; ++i)
      attrs.push_back(func.getResultAttrDict(i));
    OpBuilder b(&getContext());
    for (StringAttr name : names)
      attrs.push_back(b.getDictionaryAttr({b.getNamedAttr(attr::kGradientOf, name)}));
    func.setAllResultAttrs(attrs); // at once: one by one is quadratic
  }
};

} // namespace
} // namespace dtc
