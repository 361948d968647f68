//===- OnnxImporter.cpp - ONNX model -> graph dialect ---------------------===//
#include "frontends/onnx/OnnxImporter.h"
#include "frontends/onnx/NodeContext.h"
#include "frontends/onnx/TensorData.h"

#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "dialects/graph/ShapeRules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Transforms/RegionUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>
#include <sys/stat.h>
#include <sstream>

using namespace mlir;

namespace dtc::onnx {

namespace {

const llvm::StringMap<const OpConverter *> &converterTable() {
  static const llvm::StringMap<const OpConverter *> table = [] {
    llvm::StringMap<const OpConverter *> t;
    for (auto group : {elementwiseConverters(), nnConverters(), tensorConverters(),
                       resizeConverters(), einsumConverters(),
                       attentionConverters(), rotaryConverters()})
      for (const OpConverter &c : group)
        t[c.opType] = &c;
    return t;
  }();
  return table;
}

std::string diagnosticText(Diagnostic &diag) {
  std::string text;
  llvm::raw_string_ostream os(text);
  diag.print(os);
  return text;
}

} // namespace

/// Walks one ONNX graph in node order, keeping a table from ONNX value names
/// to MLIR values. Initializers become values only when first used.
class OnnxImporter {
public:
  OnnxImporter(MLIRContext &context, std::string displayName,
               std::string baseDir, const ImportOptions &options)
      : context_(context), builder_(&context),
        displayName_(std::move(displayName)), baseDir_(std::move(baseDir)),
        options_(options) {}

  OwningOpRef<ModuleOp> run(const void *data, size_t size, std::string &error);

  // Used by NodeContext.
  OpBuilder &builder() { return builder_; }
  const std::string &baseDir() const { return baseDir_; }
  FailureOr<Value> lookup(const std::string &name, NodeContext &node);
  void define(const std::string &name, Value value) { values_[name] = value; }
  std::string takeDiagnostic() { return std::exchange(diagnostic_, ""); }
  LogicalResult fail(const Twine &message) {
    if (error_.empty())
      error_ = message.str();
    return failure();
  }
  std::string nodePrefix(const ::onnx::NodeProto &node, int opset) const {
    return displayName_ + ": node '" + nodeName(node) + "' (" + node.op_type() +
           ", opset " + std::to_string(opset) + "): ";
  }

private:
  LogicalResult importGraph(const ::onnx::GraphProto &graph, int opset);
  FailureOr<RankedTensorType> inputType(const ::onnx::ValueInfoProto &input,
                                        llvm::StringSet<> &usedShapes);
  FailureOr<DenseElementsAttr> frozenInput(const ::onnx::ValueInfoProto &input);
  LogicalResult toMicroBatch(const std::string &name, RankedTensorType &type, int64_t &batch);
  /// `--shape name` names nothing: the error lists what it could name.
  LogicalResult unknownShapeName(const ::onnx::GraphProto &graph, llvm::StringRef name);
  /// Records that symbolic dim `symbol` is `value` (as input `input` has
  /// it); a symbol must mean one size across all inputs.
  LogicalResult bindSymbol(const std::string &symbol, int64_t value,
                           const std::string &input) {
    auto [it, inserted] = symbols_.try_emplace(symbol, value, input);
    if (inserted || it->second.first == value)
      return success();
    return fileError("symbolic dim '" + symbol + "' is " +
                     std::to_string(it->second.first) + " for input '" +
                     it->second.second + "' but " + std::to_string(value) +
                     " for input '" + input + "'");
  }
  LogicalResult checkOutputType(const ::onnx::ValueInfoProto &output, Value value);
  std::string nodeName(const ::onnx::NodeProto &node) const {
    if (!node.name().empty())
      return node.name();
    return node.op_type() + "#" + std::to_string(nodeIndex_);
  }
  LogicalResult fileError(const Twine &message) {
    return fail(displayName_ + ": " + message);
  }

  MLIRContext &context_;
  OpBuilder builder_;
  std::string displayName_, baseDir_;
  const ImportOptions &options_;
  std::string error_, diagnostic_;
  llvm::StringMap<Value> values_;
  llvm::StringMap<std::pair<int64_t, std::string>> symbols_;
  llvm::StringMap<const ::onnx::TensorProto *> initializers_;
  /// What training does with each weight (Trainable.h).
  WeightChoices weights_;
  /// An untied weight's parameters, by initializer and reading node.
  std::map<std::pair<std::string, const ::onnx::NodeProto *>, Value> copies_;
  /// How many parameters each untied weight has so far.
  std::map<std::string, int> copyCount_;
  int nodeIndex_ = 0;
};

FailureOr<Value> OnnxImporter::lookup(const std::string &name, NodeContext &node) {
  auto it = values_.find(name);
  if (it != values_.end())
    return it->second;
  // A tied weight the exporter folded into a transposed copy: the
  // transpose of the one it copies, so that both train as one.
  if (auto of = weights_.transposeOf.find(name); of != weights_.transposeOf.end()) {
    auto table = lookup(of->second, node);
    if (failed(table))
      return failure();
    Value value = builder_.create<graph::TransposeOp>(
        node.loc(), *table, builder_.getDenseI64ArrayAttr({1, 0}));
    values_[name] = value;
    return value;
  }
  // A weight the exporter merged: each reading node its own copy.
  bool untied = weights_.untied.count(name) > 0;
  if (untied)
    if (auto copy = copies_.find({name, &node.node()}); copy != copies_.end())
      return copy->second;
  auto init = initializers_.find(name);
  if (init == initializers_.end())
    return node.fail("input '" + name +
                     "' is not a graph input, an initializer or the output of "
                     "an earlier node");
  const ::onnx::TensorProto &tensor = *init->second;
  std::string error;
  auto type = tensorTypeOf(context_, tensor, error);
  if (failed(type))
    return node.fail(error);
  // Float initializers with more than one element are parameters; their
  // values stay in the model file. Everything else is a constant.
  Value value;
  if (isParameterTensor(tensor) && !weights_.constants.count(name)) {
    std::optional<formats::onnx::ExternalData> external;
    if (failed(checkTensorData(tensor, baseDir_, error, &external)))
      return node.fail(error);
    int copy = untied ? ++copyCount_[name] : 1;
    auto parameter = builder_.create<graph::ParameterOp>(
        node.loc(), *type,
        builder_.getStringAttr(copy == 1 ? name : name + "@" + std::to_string(copy)));
    if (copy > 1) {
      parameter.setCopyOfAttr(builder_.getStringAttr(name));
      if (node.node().output_size() > 0)
        parameter.setReaderAttr(builder_.getStringAttr(node.node().output(0)));
    }
    // Where its bytes are, for the plan: a rank reads its shard from there.
    if (external) {
      parameter.setFileAttr(builder_.getStringAttr(external->location));
      parameter.setOffsetAttr(builder_.getI64IntegerAttr(external->offset));
    }
    if (auto why = weights_.frozen.find(name); why != weights_.frozen.end())
      parameter.setFrozenAttr(builder_.getStringAttr(why->second));
    if (weights_.causalMasks.count(name))
      parameter->setAttr(attr::kCausalMask, builder_.getUnitAttr());
    value = parameter;
    if (untied) {
      copies_[{name, &node.node()}] = value;
      return value;
    }
  } else {
    auto dense = readTensor(context_, tensor, baseDir_, error);
    if (failed(dense))
      return node.fail(error);
    value = node.constant(*dense);
  }
  values_[name] = value;
  return value;
}

FailureOr<RankedTensorType>
OnnxImporter::inputType(const ::onnx::ValueInfoProto &input,
                        llvm::StringSet<> &usedShapes) {
  const std::string &name = input.name();
  if (!input.type().has_tensor_type())
    return fileError("graph input '" + name + "' is not a tensor");
  const auto &tensorType = input.type().tensor_type();
  Type element = elementTypeOf(context_, tensorType.elem_type());
  if (!element)
    return fileError("graph input '" + name + "' has unsupported element type " +
                     dataTypeName(tensorType.elem_type()));
  auto given = options_.shapes.find(name);
  if (given != options_.shapes.end()) {
    usedShapes.insert(name);
    const auto &dims = given->second;
    if (tensorType.has_shape() && tensorType.shape().dim_size() != (int)dims.size())
      return fileError("--shape " + name + "=" + graph::shapeToString(dims) +
                       " has rank " + std::to_string(dims.size()) +
                       " but input '" + name + "' has rank " +
                       std::to_string(tensorType.shape().dim_size()));
    for (int d = 0; tensorType.has_shape() && d < (int)dims.size(); ++d) {
      const auto &dim = tensorType.shape().dim(d);
      if (dim.has_dim_value() && dim.dim_value() != dims[d])
        return fileError("--shape " + name + "=" + graph::shapeToString(dims) +
                         ": dim " + std::to_string(d) + " of input '" + name +
                         "' is fixed at " + std::to_string(dim.dim_value()));
      if (dim.has_dim_param() && !dim.dim_param().empty() &&
          failed(bindSymbol(dim.dim_param(), dims[d], name)))
        return failure();
    }
    return RankedTensorType::get(dims, element);
  }
  if (!tensorType.has_shape())
    return fileError("graph input '" + name +
                     "' has no shape; give one with --shape " + name + "=2x128");
  llvm::SmallVector<int64_t> dims;
  for (int d = 0; d < tensorType.shape().dim_size(); ++d) {
    const auto &dim = tensorType.shape().dim(d);
    if (dim.has_dim_value() && dim.dim_value() >= 0) {
      dims.push_back(dim.dim_value());
      continue;
    }
    if (dim.has_dim_param() && !dim.dim_param().empty()) {
      auto symbol = options_.shapes.find(dim.dim_param());
      if (symbol != options_.shapes.end() && symbol->second.size() != 1)
        return fileError("--shape " + dim.dim_param() + "=...: '" + dim.dim_param() +
                         "' is a symbolic dim (of graph input '" + name +
                         "'): give it one size, like --shape " + dim.dim_param() + "=8");
      if (symbol != options_.shapes.end()) {
        usedShapes.insert(dim.dim_param());
        if (failed(bindSymbol(dim.dim_param(), symbol->second[0], name)))
          return failure();
        dims.push_back(symbol->second[0]);
        continue;
      }
      return fileError("graph input '" + name + "' dim " + std::to_string(d) +
                       " is the symbol '" + dim.dim_param() +
                       "'; bind it with --shape " + dim.dim_param() +
                       "=N (or give the whole shape with --shape " + name +
                       "=...)");
    }
    return fileError("graph input '" + name + "' dim " + std::to_string(d) +
                     " is unknown; give the shape with --shape " + name +
                     "=...");
  }
  if (!graph::elementCount(dims))
    return fileError("graph input '" + name + "' shape " +
                     graph::shapeToString(dims) + " is too large");
  return RankedTensorType::get(dims, element);
}

/// --micro-batches N: an input whose dim 0 is the batch (that of the first
/// input) gets 1/N of it, one micro-batch; shapes inside the graph follow.
LogicalResult OnnxImporter::unknownShapeName(const ::onnx::GraphProto &graph,
                                             llvm::StringRef name) {
  // What --shape could have named: the inputs and their symbolic dims.
  std::string inputs, symbols;
  llvm::StringSet<> seen;
  for (const auto &input : graph.input()) {
    if (initializers_.count(input.name()))
      continue;
    inputs += (inputs.empty() ? "" : ", ") + input.name();
    for (const auto &dim : input.type().tensor_type().shape().dim())
      if (dim.has_dim_param() && !dim.dim_param().empty() && seen.insert(dim.dim_param()).second)
        symbols += (symbols.empty() ? "" : ", ") + dim.dim_param();
  }
  return fileError("--shape " + name.str() + ": the model has no graph input or symbolic dim "
                   "named '" + name.str() + "' (its inputs: " +
                   (inputs.empty() ? std::string("none") : inputs) + "; its symbolic dims: " +
                   (symbols.empty() ? std::string("none") : symbols) + ")");
}

LogicalResult OnnxImporter::toMicroBatch(const std::string &name, RankedTensorType &type,
                                         int64_t &batch) {
  if (type.getRank() == 0)
    return success();
  int64_t rows = type.getDimSize(0), n = options_.microBatches;
  if (!batch)
    batch = rows;
  if (rows != batch)
    return success(); // not a batch dim
  if (rows % n != 0)
    return fileError("--micro-batches " + std::to_string(n) + " does not divide the batch of " +
                     std::to_string(rows) + " (dim 0 of input '" + name +
                     "'); give a batch that it divides (--shape) or another count");
  SmallVector<int64_t> dims(type.getShape());
  dims[0] = rows / n;
  type = RankedTensorType::get(dims, type.getElementType());
  return success();
}

FailureOr<DenseElementsAttr>
OnnxImporter::frozenInput(const ::onnx::ValueInfoProto &input) {
  const std::string &path = options_.frozenInputs.at(input.name());
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  ::onnx::TensorProto tensor;
  if (!in.good() && !in.eof())
    return fileError("--freeze " + input.name() + ": cannot read '" + path + "'");
  if (bytes.empty() || !tensor.ParseFromString(bytes))
    return fileError("--freeze " + input.name() + ": '" + path +
                     "' is not an ONNX TensorProto file");
  std::string error;
  size_t slash = path.rfind('/');
  auto value = readTensor(context_, tensor,
                          slash == std::string::npos ? "." : path.substr(0, slash),
                          error);
  if (failed(value))
    return fileError("--freeze " + input.name() + ": " + path + ": " + error);
  const auto &declared = input.type().tensor_type();
  if (declared.elem_type() &&
      elementTypeOf(context_, declared.elem_type()) != value->getElementType())
    return fileError("--freeze " + input.name() + ": '" + path + "' holds " +
                     dataTypeName(tensor.data_type()) + " but the input is " +
                     dataTypeName(declared.elem_type()));
  bool rankOk = !declared.has_shape() ||
                declared.shape().dim_size() == value->getType().getRank();
  for (int d = 0; rankOk && declared.has_shape() && d < declared.shape().dim_size(); ++d)
    if (declared.shape().dim(d).has_dim_value() &&
        declared.shape().dim(d).dim_value() != value->getType().getDimSize(d))
      rankOk = false;
  if (!rankOk)
    return fileError("--freeze " + input.name() + ": '" + path + "' has shape " +
                     graph::shapeToString(value->getType().getShape()) +
                     ", which the input's declared shape does not allow");
  return *value;
}

LogicalResult OnnxImporter::checkOutputType(const ::onnx::ValueInfoProto &output,
                                            Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  if (!output.type().has_tensor_type())
    return success();
  const auto &declared = output.type().tensor_type();
  if (declared.elem_type() != 0) {
    Type element = elementTypeOf(context_, declared.elem_type());
    if (element != type.getElementType()) {
      std::string computed;
      llvm::raw_string_ostream os(computed);
      os << type.getElementType();
      return fileError("graph output '" + output.name() + "' is declared " +
                       dataTypeName(declared.elem_type()) +
                       " but the graph computes " + computed);
    }
  }
  if (!declared.has_shape())
    return success();
  bool mismatch = declared.shape().dim_size() != type.getRank();
  for (int d = 0; !mismatch && d < type.getRank(); ++d) {
    const auto &dim = declared.shape().dim(d);
    mismatch = dim.has_dim_value() && dim.dim_value() != type.getDimSize(d);
  }
  if (!mismatch)
    return success();
  std::string declaredText;
  for (int d = 0; d < declared.shape().dim_size(); ++d) {
    const auto &dim = declared.shape().dim(d);
    declaredText += (d ? "x" : "") + (dim.has_dim_value()
                                          ? std::to_string(dim.dim_value())
                                          : (dim.dim_param().empty()
                                                 ? std::string("?")
                                                 : dim.dim_param()));
  }
  return fileError("graph output '" + output.name() + "' is declared " +
                   (declaredText.empty() ? "scalar" : declaredText) +
                   " but the graph computes " +
                   graph::shapeToString(type.getShape()));
}

LogicalResult OnnxImporter::importGraph(const ::onnx::GraphProto &graph,
                                        int opset) {
  for (const auto &init : graph.initializer()) {
    if (init.name().empty())
      return fileError("an initializer has no name");
    initializers_[init.name()] = &init;
  }
  std::string why;
  if (failed(chooseWeights(context_, graph, baseDir_, options_.trainable, weights_, why)))
    return fileError(why);
  for (const auto &sparse : graph.sparse_initializer())
    return fileError("sparse initializer '" + sparse.values().name() +
                     "' is not supported");

  // A --shape name that no input and no symbolic dim has (a misspelling)
  // is the error to report first: the symbol it meant is unbound too.
  for (const auto &[name, dims] : options_.shapes) {
    bool known = false;
    for (const auto &input : graph.input()) {
      known |= !initializers_.count(input.name()) && input.name() == name;
      for (const auto &dim : input.type().tensor_type().shape().dim())
        known |= dim.has_dim_param() && dim.dim_param() == name;
    }
    if (!known)
      return unknownShapeName(graph, name);
  }

  // Inputs that are not initializers become the function's arguments.
  llvm::StringSet<> usedShapes;
  llvm::SmallVector<Type> argTypes;
  llvm::SmallVector<std::string> argNames;
  llvm::StringMap<DenseElementsAttr> frozen;
  int64_t batch = 0; // dim 0 of the first input, with micro-batches
  for (const auto &input : graph.input()) {
    if (initializers_.count(input.name()))
      continue;
    if (options_.frozenInputs.count(input.name())) {
      auto value = frozenInput(input);
      if (failed(value))
        return failure();
      frozen[input.name()] = *value;
      continue;
    }
    auto type = inputType(input, usedShapes);
    if (failed(type))
      return failure();
    if (options_.microBatches > 1 && failed(toMicroBatch(input.name(), *type, batch)))
      return failure();
    argTypes.push_back(*type);
    argNames.push_back(input.name());
  }
  for (const auto &[name, path] : options_.frozenInputs)
    if (!frozen.count(name))
      return fileError("--freeze " + name + ": the model has no graph input named '" +
                       name + "'");
  for (const auto &[name, dims] : options_.shapes)
    if (!usedShapes.contains(name))
      return unknownShapeName(graph, name);

  auto func = builder_.create<func::FuncOp>(
      FileLineColLoc::get(&context_, displayName_, 0, 0), "main",
      builder_.getFunctionType(argTypes, {}));
  Block *body = func.addEntryBlock();
  for (auto [i, name] : llvm::enumerate(argNames)) {
    func.setArgAttr(i, attr::kName, builder_.getStringAttr(name));
    values_[name] = body->getArgument(i);
  }
  builder_.setInsertionPointToStart(body);
  for (auto &entry : frozen)
    values_[entry.getKey()] = builder_.create<graph::ConstantOp>(
        func.getLoc(), entry.getValue().getType(), entry.getValue());

  const auto &table = converterTable();
  // Every op type the model uses that dtc lacks, at once, with how many
  // nodes use it and the first of them: a user learns the whole gap from
  // one run.
  struct Missing {
    int nodes = 0;
    std::string first;
  };
  std::map<std::string, Missing> missing;
  for (const auto &node : graph.node()) {
    ++nodeIndex_;
    bool otherDomain = !node.domain().empty() && node.domain() != "ai.onnx";
    if (!otherDomain && table.count(node.op_type()))
      continue;
    Missing &m = missing[otherDomain ? node.domain() + "." + node.op_type() : node.op_type()];
    if (m.nodes++ == 0)
      m.first = nodeName(node);
  }
  nodeIndex_ = 0;
  if (!missing.empty()) {
    std::vector<std::pair<std::string, Missing>> byCount(missing.begin(), missing.end());
    std::sort(byCount.begin(), byCount.end(), [](const auto &a, const auto &b) {
      return a.second.nodes != b.second.nodes ? a.second.nodes > b.second.nodes
                                              : a.first < b.first;
    });
    std::string list;
    bool domains = false;
    for (const auto &[op, m] : byCount) {
      list += (list.empty() ? "" : ", ") + op + " (" + std::to_string(m.nodes) +
              (m.nodes == 1 ? " node, '" : " nodes, the first '") + m.first + "')";
      domains = domains || op.find('.') != std::string::npos;
    }
    return fileError(std::to_string(missing.size()) + " ONNX op type" +
                     (missing.size() == 1 ? "" : "s") + " this dtc does not support: " + list +
                     (domains ? "; ops of other domains than the default ONNX one are not "
                                "supported"
                              : "") +
                     " (`dtc import --list-ops` lists the supported ones)");
  }
  for (const auto &node : graph.node()) {
    ++nodeIndex_;
    std::string name = nodeName(node);
    Location loc = NameLoc::get(builder_.getStringAttr(name),
                                FileLineColLoc::get(&context_, displayName_, 0, 0));
    NodeContext ctx(*this, node, opset, loc);
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      return ctx.fail("ops of domain '" + node.domain() +
                      "' are not supported (only the default ONNX domain)");
    auto it = table.find(node.op_type());
    if (it == table.end())
      return ctx.fail("unsupported ONNX op '" + node.op_type() +
                      "' (`dtc import --list-ops` lists the supported ones)");
    const OpConverter &converter = *it->second;
    if (opset < converter.minOpset)
      return ctx.fail(node.op_type() + " needs opset " +
                      std::to_string(converter.minOpset) + " or later");
    for (const auto &attr : node.attribute())
      if (attr.has_g() || attr.graphs_size())
        return ctx.fail("subgraph attributes are not supported");
    if (failed(converter.convert(ctx)))
      return ctx.fail("conversion failed");
    llvm::SmallVector<StringRef> ignored;
    StringRef(converter.ignoredAttributes).split(ignored, ' ', -1, false);
    for (const auto &attr : node.attribute())
      if (!ctx.readAttributes_.contains(attr.name()) &&
          !llvm::is_contained(ignored, attr.name()))
        return ctx.fail("attribute '" + attr.name() + "' is not part of " +
                        node.op_type() + " at opset " + std::to_string(opset) +
                        " (in this opset it may be an input instead)");
    for (int i = 0; i < node.output_size(); ++i)
      if (!node.output(i).empty() && !values_.count(node.output(i)))
        return ctx.fail("output " + std::to_string(i) + " ('" + node.output(i) +
                        "') is not supported");
  }

  llvm::SmallVector<Value> results;
  for (const auto &output : graph.output()) {
    auto it = values_.find(output.name());
    Value value;
    if (it != values_.end()) {
      value = it->second;
    } else if (initializers_.count(output.name())) {
      ::onnx::NodeProto none;
      NodeContext ctx(*this, none, opset, func.getLoc());
      auto v = lookup(output.name(), ctx);
      if (failed(v))
        return failure();
      value = *v;
    } else {
      return fileError("graph output '" + output.name() +
                       "' is not produced by any node");
    }
    if (failed(checkOutputType(output, value)))
      return failure();
    results.push_back(value);
  }
  builder_.create<func::ReturnOp>(func.getLoc(), results);
  // Folding shape subgraphs leaves constants nobody reads; drop them.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*body)))
    if (isOpTriviallyDead(&op))
      op.erase();
  func.setType(builder_.getFunctionType(argTypes, ValueRange(results).getTypes()));
  for (auto [i, output] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, attr::kName, builder_.getStringAttr(output.name()));
  return success();
}

OwningOpRef<ModuleOp> OnnxImporter::run(const void *data, size_t size,
                                        std::string &error) {
  // This thread's only: compileToPlan may import on two threads at once.
  ScopedDiagnosticHandler handler(&context_, [&, owner = std::this_thread::get_id()](
                                                 Diagnostic &diag) -> LogicalResult {
    if (std::this_thread::get_id() != owner)
      return failure();
    if (diag.getSeverity() == DiagnosticSeverity::Error && diagnostic_.empty())
      diagnostic_ = diagnosticText(diag);
    return success();
  });
  auto finishWith = [&](OwningOpRef<ModuleOp> module) {
    error = error_;
    return error_.empty() ? std::move(module) : OwningOpRef<ModuleOp>();
  };

  ::onnx::ModelProto model;
  if (size > (size_t)INT32_MAX) {
    (void)fileError("model file is over 2 GiB; store the weights as external data");
    return finishWith(nullptr);
  }
  if (!model.ParseFromArray(data, (int)size) || !model.has_graph()) {
    (void)fileError(size == 0 ? "empty file, not an ONNX model"
                        : "not a valid ONNX model (protobuf parse failed or no "
                          "graph; is the file truncated?)");
    return finishWith(nullptr);
  }
  int opset = -1;
  for (const auto &import : model.opset_import())
    if (import.domain().empty() || import.domain() == "ai.onnx")
      opset = (int)import.version();
  if (opset < 0) {
    (void)fileError("the model imports no default-domain opset");
    return finishWith(nullptr);
  }
  if (opset < kMinOpset || opset > kMaxOpset) {
    (void)fileError("model uses opset " + std::to_string(opset) + "; dtc imports "
              "opsets " + std::to_string(kMinOpset) + " to " +
              std::to_string(kMaxOpset) +
              " (convert it with onnx.version_converter)");
    return finishWith(nullptr);
  }

  Location loc = FileLineColLoc::get(&context_, displayName_, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  module->getOperation()->setAttr(attr::kSource,
                                  builder_.getStringAttr(displayName_));
  module->getOperation()->setAttr(attr::kOpset, builder_.getI64IntegerAttr(opset));
  builder_.setInsertionPointToEnd(module->getBody());
  if (failed(importGraph(model.graph(), opset)))
    return finishWith(nullptr);
  if (!weights_.transposeOf.empty()) {
    SmallVector<NamedAttribute> tied;
    for (const auto &[copy, of] : weights_.transposeOf)
      tied.push_back(builder_.getNamedAttr(copy, builder_.getStringAttr(of)));
    module->getOperation()->setAttr(attr::kTransposedWeights,
                                    builder_.getDictionaryAttr(tied));
  }
  if (failed(verify(*module)))
    (void)fileError("internal error: the imported module does not verify: " +
              takeDiagnostic());
  return finishWith(std::move(module));
}

//===----------------------------------------------------------------------===//
// NodeContext
//===----------------------------------------------------------------------===//

NodeContext::NodeContext(OnnxImporter &importer, const ::onnx::NodeProto &node,
                         int opset, Location loc)
    : importer_(importer), node_(node), opset_(opset), loc_(loc) {}

OpBuilder &NodeContext::builder() { return importer_.builder(); }

const std::string &NodeContext::modelDir() const { return importer_.baseDir(); }

LogicalResult NodeContext::fail(const Twine &message) {
  return importer_.fail(importer_.nodePrefix(node_, opset_) + message);
}

LogicalResult NodeContext::failWithDiagnostic() {
  std::string text = importer_.takeDiagnostic();
  return fail(text.empty() ? std::string("invalid operands or attributes") : text);
}

FailureOr<Value> NodeContext::input(int i) {
  if (!hasInput(i))
    return fail("input " + std::to_string(i) + " is missing");
  return importer_.lookup(node_.input(i), *this);
}

FailureOr<RankedTensorType> NodeContext::inputType(int i) {
  auto v = input(i);
  if (failed(v))
    return failure();
  return cast<RankedTensorType>(v->getType());
}

FailureOr<DenseElementsAttr> NodeContext::constantInput(int i, StringRef what) {
  auto v = input(i);
  if (failed(v))
    return failure();
  DenseElementsAttr value;
  if (!matchPattern(*v, m_Constant(&value)))
    return fail(what + " (input " + std::to_string(i) + ", '" +
                node_.input(i) +
                "') must be a constant: dtc compiles static shapes");
  return value;
}

DenseElementsAttr NodeContext::constantOrNull(int i) {
  auto v = input(i);
  DenseElementsAttr value;
  if (succeeded(v))
    matchPattern(*v, m_Constant(&value));
  return value;
}

FailureOr<SmallVector<int64_t>> NodeContext::constantInts(int i, StringRef what) {
  auto value = constantInput(i, what);
  if (failed(value))
    return failure();
  if (!isa<IntegerType>(value->getElementType()))
    return fail(what + " must be an integer tensor");
  SmallVector<int64_t> ints;
  for (const APInt &v : value->getValues<APInt>())
    ints.push_back(v.getSExtValue());
  return ints;
}

FailureOr<double> NodeContext::constantScalar(int i, StringRef what) {
  auto value = constantInput(i, what);
  if (failed(value))
    return failure();
  if (value->getNumElements() != 1)
    return fail(what + " must have exactly one element");
  if (isa<FloatType>(value->getElementType()))
    return (*value->getValues<APFloat>().begin()).convertToDouble();
  auto intType = cast<IntegerType>(value->getElementType());
  APInt v = *value->getValues<APInt>().begin();
  return intType.isUnsigned() ? (double)v.getZExtValue() : (double)v.getSExtValue();
}

const ::onnx::AttributeProto *NodeContext::attribute(StringRef name) const {
  readAttributes_.insert(name);
  for (const auto &attr : node_.attribute())
    if (attr.name() == name)
      return &attr;
  return nullptr;
}

int64_t NodeContext::attrInt(StringRef name, int64_t fallback) const {
  const auto *a = attribute(name);
  return a ? a->i() : fallback;
}

double NodeContext::attrFloat(StringRef name, float fallback) const {
  const auto *a = attribute(name);
  float value = a ? a->f() : fallback;
  char text[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, (double)value);
    double d = std::strtod(text, nullptr);
    if ((float)d == value)
      return d;
  }
  return value;
}

std::string NodeContext::attrString(StringRef name, StringRef fallback) const {
  const auto *a = attribute(name);
  return a ? a->s() : fallback.str();
}

std::optional<SmallVector<int64_t>> NodeContext::attrInts(StringRef name) const {
  const auto *a = attribute(name);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

FailureOr<int64_t> NodeContext::axisAttr(StringRef name, int64_t fallback,
                                         int64_t rank) {
  int64_t axis = attrInt(name, fallback);
  if (auto a = graph::normalizeAxis(axis, rank))
    return *a;
  return fail("attribute " + name + "=" + std::to_string(axis) +
              " out of range for rank-" + std::to_string(rank) + " input");
}

void NodeContext::setOutput(int i, Value value) {
  if (wantsOutput(i))
    importer_.define(node_.output(i), value);
}

Value NodeContext::constant(DenseElementsAttr value) {
  return builder().create<graph::ConstantOp>(loc_, value.getType(), value);
}

Value NodeContext::scalar(double value, Type elementType) {
  auto type = RankedTensorType::get({}, elementType);
  if (isa<FloatType>(elementType))
    return constant(DenseElementsAttr::get(
        type, builder().getFloatAttr(elementType, value)));
  return constant(DenseElementsAttr::get(
      type, builder().getIntegerAttr(elementType, (int64_t)value)));
}

FailureOr<SmallVector<Value, 1>> NodeContext::finish(Operation *op) {
  if (failed(verify(op))) {
    op->erase();
    return failWithDiagnostic();
  }
  SmallVector<Value, 1> results(op->getResults());
  SmallVector<OpFoldResult> folded;
  if (succeeded(op->fold(folded)) && folded.size() == results.size()) {
    for (auto [i, f] : llvm::enumerate(folded)) {
      if (auto v = dyn_cast<Value>(f))
        results[i] = v;
      else if (auto dense = dyn_cast_or_null<DenseElementsAttr>(dyn_cast<Attribute>(f)))
        results[i] = constant(dense);
      else
        return SmallVector<Value, 1>(op->getResults());
    }
    op->erase();
  }
  return results;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

bool parseShapeOption(const std::string &text, ImportOptions &options,
                      std::string &error) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    error = "--shape expects NAME=DIMS such as input_ids=2x128 or batch=2, got '" +
            text + "'";
    return false;
  }
  std::string name = text.substr(0, eq);
  if (options.shapes.count(name)) {
    error = "--shape " + name + " is given twice";
    return false;
  }
  if (text.back() == 'x') {
    error = "--shape " + text + ": a trailing 'x' is not a dimension size";
    return false;
  }
  std::vector<int64_t> dims;
  std::stringstream ss(text.substr(eq + 1));
  std::string part;
  while (std::getline(ss, part, 'x')) {
    char *end = nullptr;
    long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end || v < 0 || v > (1LL << 40)) {
      error = "--shape " + text + ": '" + part + "' is not a dimension size";
      return false;
    }
    dims.push_back(v);
  }
  options.shapes[name] = dims;
  return true;
}

OwningOpRef<ModuleOp> importOnnxBytes(MLIRContext &context, const void *data,
                                      size_t size, const std::string &displayName,
                                      const std::string &baseDir,
                                      const ImportOptions &options,
                                      std::string &error) {
  context.loadDialect<graph::GraphDialect, func::FuncDialect>();
  OnnxImporter importer(context, displayName, baseDir, options);
  return importer.run(data, size, error);
}

OwningOpRef<ModuleOp> importOnnxFile(MLIRContext &context, const std::string &path,
                                     const ImportOptions &options,
                                     std::string &error) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    error = path + ": is a directory, not an ONNX file";
    return nullptr;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot open file";
    return nullptr;
  }
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  size_t slash = path.rfind('/');
  std::string baseDir = slash == std::string::npos ? "." : path.substr(0, slash);
  return importOnnxBytes(context, bytes.data(), bytes.size(), path, baseDir,
                         options, error);
}

std::vector<std::string> supportedOnnxOps() {
  std::vector<std::string> ops;
  for (const auto &entry : converterTable())
    ops.push_back(entry.getKey().str());
  std::sort(ops.begin(), ops.end());
  return ops;
}

} // namespace dtc::onnx
