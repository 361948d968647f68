//===- PadClasses.cpp - a classifier's classes padded to a round count ----===//
#include "compiler/PadClasses.h"
#include "compiler/WrapIds.h"

#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/APFloat.h"

namespace dtc {
using namespace mlir;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

RankedTensorType withDim(RankedTensorType t, int64_t dim, int64_t size) {
  SmallVector<int64_t> shape(t.getShape());
  shape[size_t(dim)] = size;
  return RankedTensorType::get(shape, t.getElementType());
}

/// What the logits of a padded class get added: exp(-1e9 - max) is 0 in
/// f32, and -1e9 stays finite in bf16 (no inf - inf anywhere).
constexpr double kMasked = -1e9;

/// A weight of the model read through casts and transposes: the parameter,
/// the ops from it to the value read (in order), and each one's dim that
/// holds the classes (the parameter's first).
struct WeightPath {
  graph::ParameterOp param;
  SmallVector<Operation *> ops;
  SmallVector<int64_t> dims; // dims[0]: the parameter's; dims[i + 1]: ops[i]'s
};

std::optional<WeightPath> weightPath(Value v, int64_t dim) {
  WeightPath path;
  SmallVector<int64_t> dims = {dim};
  while (Operation *def = v.getDefiningOp()) {
    if (auto param = dyn_cast<graph::ParameterOp>(def)) {
      // A weight loaded as the model has it: not a copy or a row block, not
      // state, not one already padded.
      if (param.getFrozen() || param.getCopyOf() || param.getCastOf() ||
          param->hasAttr(attr::kZeros) || param->hasAttr(attr::kRows) ||
          param->hasAttr(attr::kModelShape))
        return std::nullopt;
      path.param = param;
      std::reverse(path.ops.begin(), path.ops.end());
      std::reverse(dims.begin(), dims.end());
      path.dims = std::move(dims);
      return path;
    }
    if (auto cast = dyn_cast<graph::CastOp>(def)) {
      v = cast.getInput();
    } else if (auto t = dyn_cast<graph::TransposeOp>(def)) {
      dim = t.getPerm()[size_t(dim)]; // output dim i is input dim perm[i]
      v = t.getInput();
    } else {
      return std::nullopt;
    }
    path.ops.push_back(def);
    dims.push_back(dim);
  }
  return std::nullopt;
}

class Padder {
public:
  Padder(int64_t classes, int64_t padded) : classes_(classes), padded_(padded) {}

  /// Readers of `old` other than `keep` read `fresh`'s model part: a slice
  /// (an embedding's gather along the padded dim reads `fresh` itself: its
  /// indices never reach the padding).
  void moveReaders(Value old, Value fresh, Operation *keep, int64_t dim) {
    Value part;
    for (OpOperand &use : llvm::make_early_inc_range(old.getUses())) {
      Operation *reader = use.getOwner();
      if (reader == keep)
        continue;
      if (auto gather = dyn_cast<graph::GatherOp>(reader);
          gather && use.getOperandNumber() == 0 && gather.getAxis() == dim) {
        readPadded(gather, fresh, typeOf(old).getShape()[size_t(dim)]);
        continue;
      }
      if (!part) {
        OpBuilder b(fresh.getContext());
        b.setInsertionPointAfterValue(fresh);
        auto type = typeOf(old);
        SmallVector<int64_t> zeros(size_t(type.getRank()), 0), ones(size_t(type.getRank()), 1);
        part = b.create<graph::SliceOp>(old.getLoc(), type, fresh, zeros, type.getShape(), ones);
      }
      use.set(part);
    }
  }

  /// `gather` reads the padded `table` of the model's `rows`: its ids
  /// never reach the padding, but a negative id counts from the model's
  /// last row, not the padding's (ONNX's Gather), so those are wrapped
  /// first: where(ids < 0, ids + rows, ids), a pass over the ids alone.
  static void readPadded(graph::GatherOp gather, Value table, int64_t rows) {
    OpBuilder b(gather);
    Value wrapped = wrapNegativeIds(b, gather.getLoc(), gather.getIndices(), rows);
    gather->setOperand(0, table);
    gather->setOperand(1, wrapped);
  }

  /// `path`'s parameter padded, and its ops again on it: the padded value
  /// read where the old one was read by `reader`.
  Value pad(const WeightPath &path, Operation *reader) {
    graph::ParameterOp old = path.param;
    OpBuilder b(old);
    b.setInsertionPointAfter(old);
    auto fresh = cast<graph::ParameterOp>(b.clone(*old.getOperation()));
    auto oldType = typeOf(old.getResult());
    fresh.getResult().setType(withDim(oldType, path.dims[0], padded_));
    fresh->setAttr(attr::kModelShape, b.getDenseI64ArrayAttr(oldType.getShape()));
    params_.push_back(old.getName().str());
    Value v = fresh.getResult();
    Operation *before = old;
    for (auto [i, op] : llvm::enumerate(path.ops)) {
      moveReaders(before->getResult(0), v, op, path.dims[i]);
      b.setInsertionPointAfter(op);
      Operation *again = b.clone(*op);
      again->setOperand(0, v);
      again->getResult(0).setType(
          withDim(typeOf(op->getResult(0)), path.dims[i + 1], padded_));
      v = again->getResult(0);
      before = op;
    }
    moveReaders(before->getResult(0), v, reader, path.dims.back());
    retire(old.getOperation());
    retire(path.ops);
    return v;
  }

  /// The [padded] vector added to the padded logits: 0, then kMasked.
  Value mask(OpBuilder &b, Location loc, Type element) {
    auto type = RankedTensorType::get({padded_}, element);
    const llvm::fltSemantics &semantics = cast<FloatType>(element).getFloatSemantics();
    auto value = [&](double d) {
      bool lost;
      llvm::APFloat f(d);
      f.convert(semantics, llvm::APFloat::rmNearestTiesToEven, &lost);
      return f;
    };
    SmallVector<llvm::APFloat> values(size_t(classes_), value(0.0));
    values.append(size_t(padded_ - classes_), value(kMasked));
    return b.create<graph::ConstantOp>(loc, DenseElementsAttr::get(type, values));
  }

  /// `ops` erased once nothing reads them (after the padded ops replace them).
  template <typename Range> void retire(Range ops) { dead_.append(ops.begin(), ops.end()); }
  void retire(Operation *op) { dead_.push_back(op); }

  /// The old ops, readers first, once nothing reads them.
  void eraseDead() {
    for (Operation *op : llvm::reverse(dead_))
      if (op->use_empty())
        op->erase();
  }

  /// The parameters padded, by name: 'head', 'head.bias' and 'wte'.
  std::string names() const {
    std::string text;
    for (auto [i, name] : llvm::enumerate(params_))
      text += std::string(i == 0 ? "'" : i + 1 == params_.size() ? " and '" : ", '") + name + "'";
    return text;
  }
  size_t count() const { return params_.size(); }

private:
  int64_t classes_, padded_;
  std::vector<std::string> params_;
  SmallVector<Operation *> dead_;
};

} // namespace

Value padClasses(Value logits, int64_t multiple, std::string &note) {
  auto type = typeOf(logits);
  int64_t classes = type.getShape().back();
  if (multiple <= 0 || ShapedType::isDynamic(classes) || classes < 32 * multiple ||
      classes % multiple == 0)
    return logits;
  int64_t padded = (classes + multiple - 1) / multiple * multiple;

  // From the logits down to the product: casts, reshapes that keep the
  // classes last, and one add of a bias of the model's.
  SmallVector<Operation *> above; // logits' maker first
  std::optional<WeightPath> bias;
  Value v = logits;
  graph::MatmulOp product;
  while (!product) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return logits;
    if ((product = dyn_cast<graph::MatmulOp>(def)))
      break;
    if (auto cast = dyn_cast<graph::CastOp>(def)) {
      v = cast.getInput();
    } else if (auto reshape = dyn_cast<graph::ReshapeOp>(def)) {
      if (typeOf(reshape.getInput()).getShape().back() != classes ||
          typeOf(reshape.getOutput()).getShape().back() != classes)
        return logits;
      v = reshape.getInput();
    } else if (auto add = dyn_cast<graph::AddOp>(def); add && !bias) {
      for (bool productFirst : {true, false}) {
        Value other = productFirst ? add.getRhs() : add.getLhs();
        auto otherType = typeOf(other);
        if (typeOf(productFirst ? add.getLhs() : add.getRhs()) != typeOf(add.getOutput()) ||
            otherType.getRank() != 1 || otherType.getShape()[0] != classes)
          continue;
        if ((bias = weightPath(other, 0))) {
          v = productFirst ? add.getLhs() : add.getRhs();
          break;
        }
      }
      if (!bias)
        return logits;
    } else {
      return logits;
    }
    above.push_back(def);
  }
  Value rhs = product.getRhs();
  if (typeOf(rhs).getRank() != 2 || typeOf(product.getOutput()).getShape().back() != classes)
    return logits;
  std::optional<WeightPath> weight = weightPath(rhs, product.getTransposeRhs() ? 0 : 1);
  if (!weight)
    return logits;

  Padder padder(classes, padded);
  Value paddedRhs = padder.pad(*weight, product);
  OpBuilder b(product);
  b.setInsertionPointAfter(product);
  auto out = typeOf(product.getOutput());
  Value v2 = b.create<graph::MatmulOp>(product.getLoc(), withDim(out, out.getRank() - 1, padded),
                                       product.getLhs(), paddedRhs, product.getTransposeLhsAttr(),
                                       product.getTransposeRhsAttr());
  Operation *last = product;
  // The mask joins the bias where there is one (a vector on weights, not
  // a pass over the logits), else it is the product's bias.
  if (!bias)
    v2 = b.create<graph::AddOp>(product.getLoc(), v2, padder.mask(b, product.getLoc(),
                                                                  out.getElementType()));
  for (Operation *op : llvm::reverse(above)) {
    padder.moveReaders(last->getResult(0), v2, op, typeOf(last->getResult(0)).getRank() - 1);
    b.setInsertionPointAfter(op);
    Operation *again = b.clone(*op);
    auto result = typeOf(op->getResult(0));
    again->getResult(0).setType(withDim(result, result.getRank() - 1, padded));
    if (auto add = dyn_cast<graph::AddOp>(op)) {
      bool productFirst = add.getLhs() == last->getResult(0);
      Value vector = padder.pad(*bias, op);
      OpBuilder vb(again);
      vector = vb.create<graph::AddOp>(
          op->getLoc(), vector, padder.mask(vb, op->getLoc(), typeOf(vector).getElementType()));
      again->setOperand(productFirst ? 1 : 0, vector);
      again->setOperand(productFirst ? 0 : 1, v2);
    } else {
      again->setOperand(0, v2);
    }
    v2 = again->getResult(0);
    last = op;
  }
  padder.moveReaders(last->getResult(0), v2, nullptr, type.getRank() - 1);
  // An embedding table of its own over the same vocabulary (untied: a
  // weight of `classes` rows a gather reads by row) is padded alike, so
  // that tensor parallelism can split its rows too; its gathers read the
  // padded table as a tied one's do. (A tied table is the head's weight,
  // padded above, which weightPath refuses.)
  SmallVector<graph::GatherOp> embeddings;
  product->getParentOfType<func::FuncOp>().walk([&](graph::GatherOp gather) {
    auto table = typeOf(gather.getData());
    if (gather.getAxis() == 0 && table.getRank() == 2 && table.getShape()[0] == classes)
      embeddings.push_back(gather);
  });
  for (graph::GatherOp gather : embeddings)
    if (std::optional<WeightPath> table = weightPath(gather.getData(), 0))
      Padder::readPadded(gather, padder.pad(*table, gather), classes);
  padder.retire(product.getOperation());
  padder.retire(llvm::reverse(above));
  padder.eraseDead();

  note = "classes: the loss's " + std::to_string(classes) + " classes padded to " +
         std::to_string(padded) + " (a multiple of " + std::to_string(multiple) + "): " +
         padder.names() + (padder.count() == 1 ? " holds " : " hold ") +
         std::to_string(padded - classes) +
         " more, zeros that stay zeros (their logits are masked out of the loss), so that "
         "tensor parallelism can split the classes and the GEMM's rows are aligned; the "
         "model's shapes are kept where it is read and exported (--pad-classes 0: none)";
  return v2;
}

} // namespace dtc
