//===- NodeContext.h - what an ONNX op converter sees -----------*- C++ -*-===//
//
// A converter turns one ONNX node into graph ops through a NodeContext: it
// reads inputs and attributes, builds ops (whose result types are inferred
// and checked before they exist), and sets the node's outputs. Every error
// goes through `fail`, which names the file, the node and its op type.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_FRONTENDS_ONNX_NODECONTEXT_H
#define DTC_FRONTENDS_ONNX_NODECONTEXT_H

#include "onnx.pb.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSet.h"

#include <optional>
#include <string>

namespace dtc::onnx {

class OnnxImporter;

class NodeContext {
public:
  NodeContext(OnnxImporter &importer, const ::onnx::NodeProto &node, int opset,
              mlir::Location loc);

  int opset() const { return opset_; }
  const ::onnx::NodeProto &node() const { return node_; }
  mlir::OpBuilder &builder();
  mlir::MLIRContext *context() { return builder().getContext(); }
  mlir::Location loc() const { return loc_; }
  /// The model's folder: external data (of initializers and of tensor
  /// attributes alike) is found relative to it.
  const std::string &modelDir() const;

  //===--- inputs --------------------------------------------------------===//
  int numInputs() const { return node_.input_size(); }
  /// Input i is given (present and not the empty name).
  bool hasInput(int i) const {
    return i < node_.input_size() && !node_.input(i).empty();
  }
  mlir::FailureOr<mlir::Value> input(int i);
  /// The static tensor type of input i (which must exist).
  mlir::FailureOr<mlir::RankedTensorType> inputType(int i);
  /// Input i's values when it is a constant; otherwise an error saying that
  /// `what` must be constant.
  mlir::FailureOr<mlir::DenseElementsAttr> constantInput(int i,
                                                         llvm::StringRef what);
  /// Input i's values when it is a constant, else null (no error).
  mlir::DenseElementsAttr constantOrNull(int i);
  /// A constant integer input as int64 values.
  mlir::FailureOr<llvm::SmallVector<int64_t>> constantInts(int i,
                                                           llvm::StringRef what);
  /// A constant scalar (one-element) input as a double.
  mlir::FailureOr<double> constantScalar(int i, llvm::StringRef what);

  //===--- attributes ----------------------------------------------------===//
  const ::onnx::AttributeProto *attribute(llvm::StringRef name) const;
  int64_t attrInt(llvm::StringRef name, int64_t fallback) const;
  /// A float attribute as the shortest double that rounds to the same float
  /// (1e-5f reads as 1e-5, not 9.99999974e-6).
  double attrFloat(llvm::StringRef name, float fallback) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef fallback) const;
  std::optional<llvm::SmallVector<int64_t>> attrInts(llvm::StringRef name) const;
  /// An axis attribute normalised to [0, rank), or an error naming it.
  mlir::FailureOr<int64_t> axisAttr(llvm::StringRef name, int64_t fallback,
                                    int64_t rank);

  //===--- outputs -------------------------------------------------------===//
  int numOutputs() const { return node_.output_size(); }
  /// Output i is consumed (present and not the empty name).
  bool wantsOutput(int i) const {
    return i < node_.output_size() && !node_.output(i).empty();
  }
  void setOutput(int i, mlir::Value value);
  /// Sets output `i` to `value` when it was built; passes failure on.
  mlir::LogicalResult result(mlir::FailureOr<mlir::Value> value, int i = 0) {
    if (mlir::failed(value))
      return mlir::failure();
    setOutput(i, *value);
    return mlir::success();
  }

  //===--- building ------------------------------------------------------===//
  /// Builds `OpTy` with inferred result types, verifies it and folds it when
  /// its operands are constants. Errors are reported for this node.
  template <typename OpTy>
  mlir::FailureOr<llvm::SmallVector<mlir::Value, 1>>
  createMulti(mlir::ValueRange operands,
              llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    llvm::SmallVector<mlir::Type> types;
    // Default-valued attributes are filled in first, as Operation::create
    // would, so that the result-type rule sees them.
    mlir::NamedAttrList attrList(attrs);
    OpTy::populateDefaultAttrs(
        mlir::OperationName(OpTy::getOperationName(), context()), attrList);
    auto dict = attrList.getDictionary(context());
    // The attributes' own constraints (required, types) first, so that the
    // result-type rules can rely on them, as they do on a verified op.
    typename OpTy::Adaptor adaptor(operands, dict);
    if (mlir::failed(adaptor.verify(loc_)))
      return failWithDiagnostic();
    if (mlir::failed(OpTy::inferReturnTypes(
            context(), loc_, operands, dict, mlir::OpaqueProperties(nullptr),
            mlir::RegionRange(), types)))
      return failWithDiagnostic();
    return finish(builder().create<OpTy>(loc_, types, operands, attrList.getAttrs()));
  }

  template <typename OpTy>
  mlir::FailureOr<mlir::Value>
  create(mlir::ValueRange operands,
         llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    auto results = createMulti<OpTy>(operands, attrs);
    if (mlir::failed(results))
      return mlir::failure();
    return (*results)[0];
  }

  /// Builds an op whose result type is given (cast, reshape).
  template <typename OpTy>
  mlir::FailureOr<mlir::Value>
  createTyped(mlir::Type resultType, mlir::ValueRange operands,
              llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    auto results = finish(
        builder().create<OpTy>(loc_, mlir::TypeRange{resultType}, operands, attrs));
    if (mlir::failed(results))
      return mlir::failure();
    return (*results)[0];
  }

  mlir::Value constant(mlir::DenseElementsAttr value);
  /// A rank-0 constant of `elementType`.
  mlir::Value scalar(double value, mlir::Type elementType);

  mlir::NamedAttribute named(llvm::StringRef name, mlir::Attribute value) {
    return builder().getNamedAttr(name, value);
  }
  mlir::NamedAttribute namedI64(llvm::StringRef name, int64_t value) {
    return named(name, builder().getI64IntegerAttr(value));
  }
  mlir::NamedAttribute namedI64s(llvm::StringRef name,
                                 llvm::ArrayRef<int64_t> values) {
    return named(name, builder().getDenseI64ArrayAttr(values));
  }

  /// Reports `message` for this node and returns failure.
  mlir::LogicalResult fail(const llvm::Twine &message);

private:
  mlir::FailureOr<llvm::SmallVector<mlir::Value, 1>> finish(mlir::Operation *op);
  mlir::LogicalResult failWithDiagnostic();

  OnnxImporter &importer_;
  const ::onnx::NodeProto &node_;
  int opset_;
  mlir::Location loc_;
  /// Attributes the converter looked at; any other is an error, so that an
  /// attribute that moved to an input in this opset is never silently lost.
  mutable llvm::StringSet<> readAttributes_;

  friend class OnnxImporter;
};

using ConvertFn = mlir::LogicalResult (*)(NodeContext &);

/// One converter per ONNX op type. `minOpset` is the first default-domain
/// opset whose definition of the op the converter implements.
struct OpConverter {
  const char *opType;
  int minOpset;
  ConvertFn convert;
  /// Space-separated attributes that do not change the result and may be
  /// left unread (e.g. MaxPool's storage_order).
  const char *ignoredAttributes = "";
};

/// GatherElements along `axis` (indices of data's rank; negative ones
/// counted from the end) as one Gather on `data` flattened: each element's
/// flat position is its own coordinates with the axis's replaced by its
/// index. The gradient is Gather's. Shared by GatherElements and the
/// losses that pick each sample's class.
mlir::FailureOr<mlir::Value> gatherElements(NodeContext &ctx, mlir::Value data,
                                            mlir::Value indices, int64_t axis);

llvm::ArrayRef<OpConverter> elementwiseConverters();
llvm::ArrayRef<OpConverter> nnConverters();
llvm::ArrayRef<OpConverter> tensorConverters();
llvm::ArrayRef<OpConverter> resizeConverters();
llvm::ArrayRef<OpConverter> einsumConverters();
llvm::ArrayRef<OpConverter> attentionConverters();
llvm::ArrayRef<OpConverter> rotaryConverters();

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_NODECONTEXT_H
