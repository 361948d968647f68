//===- Trainable.cpp - which of a model's weights training updates --------===//
#include "frontends/onnx/Trainable.h"
#include "frontends/onnx/TensorData.h"

#include "formats/onnx/ExternalData.h"
#include "formats/onnx/TensorProto.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/GlobPattern.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <set>

namespace dtc::onnx {
namespace {

/// Values are read for the mask and table checks up to this size; larger
/// buffers than this are not what exporters store.
constexpr int64_t kMaxInspected = int64_t(1) << 24;

/// Tied weights are compared up to this size (GPT-2's 50257 x 768
/// embedding is 39 M).
constexpr int64_t kMaxTied = int64_t(1) << 27;

/// How close sin^2 + cos^2 must be to 1.
constexpr double kUnitTolerance = 1e-4;

struct Use {
  const ::onnx::NodeProto *node;
  int input;
};

/// Ops that pass a tensor on reshaped, cast or reordered (operand 0): a
/// weight behind them is still the weight.
bool passesOn(const std::string &op, int input) {
  static const std::set<std::string> ops = {"Reshape", "Transpose", "Cast", "CastLike",
                                            "Squeeze", "Unsqueeze", "Identity", "Flatten",
                                            "Expand", "Slice"};
  return input == 0 && ops.count(op);
}

/// Uses that make a tensor a weight: what layers multiply activations by,
/// normalise with, or look rows up in.
bool isWeightUse(const std::string &op, int input) {
  if (op == "MatMul" || op == "Gemm" || op == "Einsum")
    return true;
  if (op == "Conv" || op == "ConvTranspose")
    return input >= 1;
  if (op == "LayerNormalization" || op == "BatchNormalization" ||
      op == "GroupNormalization" || op == "InstanceNormalization" ||
      op == "RMSNormalization" || op == "SimplifiedLayerNormalization")
    return input == 1 || input == 2;
  return op == "Gather" && input == 0;
}

/// A batch norm's running mean or variance: updated from the batch's
/// statistics, never by the optimizer, and not a buffer to judge.
bool isRunningStatistic(const std::string &op, int input) {
  return op == "BatchNormalization" && (input == 3 || input == 4);
}

class Chooser {
public:
  Chooser(const ::onnx::GraphProto &graph) {
    for (const auto &node : graph.node()) {
      for (int i = 0; i < node.input_size(); ++i)
        if (!node.input(i).empty())
          uses_[node.input(i)].push_back({&node, i});
      for (const std::string &output : node.output())
        producers_[output] = &node;
    }
    for (const auto &input : graph.input()) {
      int type = input.type().tensor_type().elem_type();
      position_[input.name()] =
          type != ::onnx::TensorProto::FLOAT && type != ::onnx::TensorProto::DOUBLE &&
          type != ::onnx::TensorProto::FLOAT16 && type != ::onnx::TensorProto::BFLOAT16;
    }
    for (const auto &tensor : graph.initializer())
      position_[tensor.name()] = !isParameterTensor(tensor);
    for (const auto &output : graph.output())
      outputs_.insert(output.name());
  }

  /// Whether `name` reaches the model only as an angle: multiplied by
  /// positions (positionLike), reshaped or concatenated, into Sin or Cos.
  /// A rotary embedding's inverse frequencies (`inv_freq`) are read so;
  /// a learned frequency multiplies a float input or an activation.
  bool onlyAngles(const std::string &name) {
    // Values to follow, and whether they are already multiplied by positions.
    // Each (value, multiplied) enters the work list once: a fuzzed graph
    // reading one value from thousands of inputs stays linear.
    std::vector<std::pair<std::string, bool>> work = {{name, false}};
    std::set<std::pair<std::string, bool>> seen = {{name, false}};
    bool angle = false;
    while (!work.empty()) {
      auto [value, multiplied] = work.back();
      work.pop_back();
      if (outputs_.count(value))
        return false;
      auto it = uses_.find(value);
      if (it == uses_.end())
        continue;
      for (const Use &use : it->second) {
        const std::string &op = use.node->op_type();
        if (op == "Sin" || op == "Cos") {
          if (!multiplied) // sin(w): a weight, read through sin
            return false;
          angle = true;
          continue;
        }
        bool product = op == "Mul" || op == "MatMul";
        if (product) {
          for (int i = 0; i < use.node->input_size(); ++i)
            if (i != use.input && !positionLike(use.node->input(i)))
              return false;
        } else if (!passesOn(op, use.input) && op != "Concat") {
          return false;
        }
        for (const std::string &output : use.node->output())
          if (seen.insert({output, multiplied || product}).second)
            work.push_back({output, multiplied || product});
      }
    }
    return angle;
  }

  /// Whether `name` reaches the model only through Sin and Cos (both),
  /// reshaped or concatenated on the way: a table of angles.
  bool onlySinAndCos(const std::string &name) const {
    std::vector<std::string> work = {name};
    std::set<std::string> seen = {name}; // each value enters the work list once
    bool sin = false, cos = false;
    while (!work.empty()) {
      std::string value = work.back();
      work.pop_back();
      if (outputs_.count(value))
        return false;
      auto it = uses_.find(value);
      if (it == uses_.end())
        continue;
      for (const Use &use : it->second) {
        const std::string &op = use.node->op_type();
        sin |= op == "Sin", cos |= op == "Cos";
        if (op == "Sin" || op == "Cos")
          continue;
        if (!passesOn(op, use.input) && op != "Concat")
          return false;
        for (const std::string &output : use.node->output())
          if (seen.insert(output).second)
            work.push_back(output);
      }
    }
    return sin && cos;
  }

  /// How `name` is used, following it through reshapes and casts.
  enum class Role { Weight, RunningStatistic, Other };
  Role roleOf(const std::string &name) const {
    std::vector<std::string> work = {name};
    llvm::StringSet<> seen = {name}; // each value enters the work list once
    bool running = false;
    while (!work.empty()) {
      std::string value = work.back();
      work.pop_back();
      auto it = uses_.find(value);
      if (it == uses_.end())
        continue;
      for (const Use &use : it->second) {
        const std::string &op = use.node->op_type();
        if (isWeightUse(op, use.input))
          return Role::Weight;
        running |= isRunningStatistic(op, use.input);
        if (passesOn(op, use.input) && use.node->output_size() > 0 &&
            seen.insert(use.node->output(0)).second)
          work.push_back(use.node->output(0));
      }
    }
    return running ? Role::RunningStatistic : Role::Other;
  }

  /// Whether every node that reads `name` reads it where a value sets a
  /// shape (Resize's roi and scales).
  bool onlySetsShapes(const std::string &name) const {
    auto it = uses_.find(name);
    return it != uses_.end() && llvm::all_of(it->second, [](const Use &use) {
             return use.node->op_type() == "Resize" && (use.input == 1 || use.input == 2);
           });
  }

  /// Whether a Gather reads rows of `name` (an embedding table).
  bool isEmbeddingTable(const std::string &name) const {
    auto it = uses_.find(name);
    return it != uses_.end() && llvm::any_of(it->second, [](const Use &use) {
             return use.node->op_type() == "Gather" && use.input == 0;
           });
  }

  /// How many nodes read `name` directly.
  size_t readers(const std::string &name) const {
    auto it = uses_.find(name);
    if (it == uses_.end())
      return 0;
    std::set<const ::onnx::NodeProto *> nodes;
    for (const Use &use : it->second)
      nodes.insert(use.node);
    return nodes.size();
  }

private:
  /// Whether `value` is computed from integer inputs and constants alone
  /// (no weight, no float input): positions, and what is made of them.
  bool positionLike(const std::string &value) {
    std::vector<std::pair<std::string, bool>> stack = {{value, false}};
    while (!stack.empty()) {
      auto [v, expanded] = stack.back();
      if (!expanded && position_.count(v)) {
        stack.pop_back();
        continue;
      }
      auto producer = producers_.find(v);
      if (producer == producers_.end()) { // not in the graph
        position_[v] = false;
        stack.pop_back();
        continue;
      }
      const ::onnx::NodeProto &node = *producer->second;
      if (!expanded) {
        stack.back().second = true;
        // Not a position until its inputs say so: a cycle (a malformed
        // graph reading its own output) ends here instead of growing the
        // stack without end.
        position_[v] = false;
        for (const std::string &input : node.input())
          if (!input.empty() && !position_.count(input))
            stack.push_back({input, false});
        continue;
      }
      // Subgraphs (If, Loop) are not followed: such a value is not a position.
      position_[v] = node.attribute_size() == 0 || llvm::none_of(node.attribute(), [](auto &a) {
                       return a.has_g() || a.graphs_size() > 0;
                     });
      for (const std::string &input : node.input())
        position_[v] = position_[v] && (input.empty() || position_[input]);
      stack.pop_back();
    }
    return position_[value];
  }

  std::map<std::string, std::vector<Use>> uses_;
  std::map<std::string, const ::onnx::NodeProto *> producers_;
  std::map<std::string, bool> position_; // positionLike's answers
  std::set<std::string> outputs_;
};

std::string formatValue(double v) {
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

/// "a mask: its values are 0 and -inf" when `values` hold 0 and one other
/// value that only a mask holds (1, or a large negative number).
std::string maskReason(const std::vector<double> &values) {
  std::set<double> distinct;
  for (double v : values) {
    if (std::isnan(v))
      return "";
    distinct.insert(v);
    if (distinct.size() > 2)
      return "";
  }
  if (distinct.size() != 2 || !distinct.count(0.0))
    return "";
  double other = *distinct.begin() == 0.0 ? *distinct.rbegin() : *distinct.begin();
  if (other == 1.0 || other <= -1e4)
    return "a mask: its values are 0 and " + formatValue(other);
  return "";
}

/// Whether a mask of 0s and a large negative number (maskReason) hides
/// causally in every [rows, cols] slice of its last two dims.
bool isCausalMask(const std::vector<double> &values, const ::onnx::TensorProto &tensor) {
  int rank = tensor.dims_size();
  if (rank < 2 || values.empty())
    return false;
  int64_t rows = tensor.dims(rank - 2), cols = tensor.dims(rank - 1);
  if (rows <= 0 || cols < rows)
    return false; // a row seeing no key
  for (size_t e = 0; e < values.size(); ++e) {
    int64_t i = int64_t(e) / cols % rows, j = int64_t(e) % cols;
    bool hidden = values[e] <= -1e4;
    if (hidden != (j > i + cols - rows) || (!hidden && values[e] != 0))
      return false;
  }
  return true;
}

/// Whether `values` has two different numbers, all within [-1, 1].
bool unitRanged(const std::vector<double> &values) {
  bool varies = false;
  for (double v : values) {
    if (!(std::fabs(v) <= 1 + kUnitTolerance))
      return false;
    varies |= v != values.front();
  }
  return varies;
}

/// "a sin/cos table: ..." when the last axis pairs columns whose squares
/// sum to 1 (interleaved, as in the original Transformer, or halves).
/// Whether `values` ([..., S, F], F = `last`) are positions times
/// frequencies, each row s the frequencies times s (row 0 zeros): a rotary
/// embedding's angles the exporter computed ahead (Llama's
/// `positions * inv_freq`).
bool isAngleTable(const std::vector<double> &values, int64_t last) {
  if (last < 1 || values.size() % size_t(last) || values.size() / size_t(last) < 3)
    return false;
  size_t rows = values.size() / size_t(last);
  bool moves = false;
  for (size_t r = 0; r < rows; ++r)
    for (size_t k = 0; k < size_t(last); ++k) {
      double want = double(r) * values[size_t(last) + k], got = values[r * size_t(last) + k];
      if (std::fabs(got - want) > 1e-5 * std::max(1.0, std::fabs(want)))
        return false;
      moves |= got != 0;
    }
  return moves;
}

std::string tableReason(const std::vector<double> &values, int64_t last) {
  if (last < 2 || last % 2 || values.size() % size_t(last) || !unitRanged(values))
    return "";
  auto pairsUp = [&](int64_t stride, int64_t step) {
    for (size_t row = 0; row < values.size(); row += size_t(last))
      for (int64_t k = 0; k < last / 2; ++k) {
        double a = values[row + size_t(k * step)], b = values[row + size_t(k * step + stride)];
        if (std::fabs(a * a + b * b - 1) > kUnitTolerance)
          return false;
      }
    return true;
  };
  if (pairsUp(1, 2))
    return "a sin/cos position table: its columns pair up with sin^2 + cos^2 = 1";
  if (pairsUp(last / 2, 1))
    return "a sin/cos position table: its halves pair up with sin^2 + cos^2 = 1";
  return "";
}

bool squaresSumToOne(const std::vector<double> &a, const std::vector<double> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::fabs(a[i] * a[i] + b[i] * b[i] - 1) > kUnitTolerance)
      return false;
  return true;
}

mlir::FailureOr<std::vector<double>> valuesOf(mlir::MLIRContext &context,
                                              const ::onnx::TensorProto &tensor,
                                              const std::string &baseDir, std::string &error) {
  auto dense = readTensor(context, tensor, baseDir, error);
  if (mlir::failed(dense))
    return mlir::failure();
  std::vector<double> values;
  values.reserve(size_t(dense->getNumElements()));
  for (const llvm::APFloat &v : dense->getValues<llvm::APFloat>())
    values.push_back(v.convertToDouble());
  return values;
}

/// A few of an f32 tensor's elements (at `indices`), read without reading
/// the rest: from raw_data or float_data, or at their offsets in the
/// external file. Empty when the tensor is not f32 or cannot be read.
std::vector<float> sampleFloats(const ::onnx::TensorProto &tensor, const std::string &baseDir,
                                const std::vector<int64_t> &indices) {
  std::vector<float> out;
  if (tensor.data_type() != ::onnx::TensorProto::FLOAT)
    return out;
  formats::onnx::TensorInfo info;
  std::string error;
  if (!formats::onnx::describeTensor(tensor, tensor.name(), info, error))
    return out;
  if (formats::onnx::isExternal(tensor)) {
    formats::onnx::ExternalData data;
    if (!formats::onnx::resolveExternalData(tensor, baseDir, info.bytes, tensor.name(), data,
                                            error))
      return out;
    int fd = ::open(data.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return out;
    for (int64_t i : indices) {
      float v;
      if (!formats::onnx::readFileAt(fd, data.offset + i * 4, 4, reinterpret_cast<char *>(&v),
                                     error)) {
        out.clear();
        break;
      }
      out.push_back(v);
    }
    ::close(fd);
    return out;
  }
  for (int64_t i : indices) {
    if (int64_t(tensor.raw_data().size()) == info.bytes) {
      float v;
      std::memcpy(&v, tensor.raw_data().data() + i * 4, 4);
      out.push_back(v);
    } else if (tensor.float_data_size() == info.count) {
      out.push_back(tensor.float_data(int(i)));
    } else {
      return {};
    }
  }
  return out;
}

int64_t elementCount(const ::onnx::TensorProto &tensor) {
  int64_t count = 1;
  for (int64_t d : tensor.dims()) {
    if (d < 0)
      return -1;
    count = d && count > (int64_t(1) << 48) / d ? (int64_t(1) << 48) : count * d;
  }
  return count;
}

std::string someNames(const std::vector<std::string> &names) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < 8; ++i)
    text += (i ? ", " : "") + names[i];
  if (names.size() > 8)
    text += " and " + std::to_string(names.size() - 8) + " more";
  return text;
}

} // namespace

bool isParameterTensor(const ::onnx::TensorProto &tensor) {
  switch (tensor.data_type()) {
  case ::onnx::TensorProto::FLOAT:
  case ::onnx::TensorProto::DOUBLE:
  case ::onnx::TensorProto::FLOAT16:
  case ::onnx::TensorProto::BFLOAT16:
    return elementCount(tensor) > 1;
  default:
    return false;
  }
}

mlir::LogicalResult chooseWeights(mlir::MLIRContext &context, const ::onnx::GraphProto &graph,
                                  const std::string &baseDir, const TrainablePatterns &patterns,
                                  WeightChoices &choices, std::string &error) {
  std::map<std::string, std::string> &frozen = choices.frozen;
  std::vector<const ::onnx::TensorProto *> parameters;
  std::vector<std::string> names;
  for (const auto &tensor : graph.initializer())
    if (isParameterTensor(tensor)) {
      parameters.push_back(&tensor);
      names.push_back(tensor.name());
    }

  // The patterns: each must name a parameter; no parameter may be named by
  // both lists.
  std::map<std::string, std::string> byPattern; // name -> the --frozen pattern
  llvm::StringSet<> trainable;
  for (auto [flag, list] : {std::pair{"--trainable", &patterns.trainable},
                            std::pair{"--frozen", &patterns.frozen}}) {
    bool isFrozen = list == &patterns.frozen;
    for (const std::string &text : *list) {
      auto glob = llvm::GlobPattern::create(text, /*MaxSubPatterns=*/1024);
      if (!glob) {
        error = std::string(flag) + " '" + text + "': " + llvm::toString(glob.takeError());
        return mlir::failure();
      }
      bool matched = false;
      for (const std::string &name : names) {
        if (!glob->match(name))
          continue;
        matched = true;
        if (isFrozen ? trainable.contains(name) : byPattern.count(name) > 0) {
          error = "'" + name + "' is named by both --trainable and --frozen ('" + text + "')";
          return mlir::failure();
        }
        if (isFrozen)
          byPattern[name] = text;
        else
          trainable.insert(name);
      }
      if (!matched) {
        error = std::string(flag) + " '" + text + "' names none of the model's " +
                std::to_string(names.size()) + " weights (" +
                (names.empty() ? "it has none" : someNames(names)) + ")";
        return mlir::failure();
      }
    }
  }
  for (const auto &[name, pattern] : byPattern)
    frozen[name] = "--frozen '" + pattern + "'";

  // The rest by use, then by value.
  Chooser chooser(graph);
  for (const ::onnx::TensorProto *tensor : parameters) {
    const std::string &name = tensor->name();
    if (chooser.onlySetsShapes(name))
      choices.constants.insert(name);
    else if (!trainable.contains(name) && !frozen.count(name) && chooser.onlyAngles(name))
      frozen[name] = "a rotary embedding's inverse frequencies: it is read only as the sine "
                     "and cosine of its product with positions";
  }
  struct Candidate {
    const ::onnx::TensorProto *tensor;
    std::vector<double> values;
  };
  std::vector<Candidate> candidates;
  for (const ::onnx::TensorProto *tensor : parameters) {
    const std::string &name = tensor->name();
    if (trainable.contains(name) || frozen.count(name) ||
        chooser.roleOf(name) != Chooser::Role::Other || elementCount(*tensor) > kMaxInspected)
      continue;
    // Bad data is the importer's to report, at the node that reads it.
    std::string unreadable;
    auto values = valuesOf(context, *tensor, baseDir, unreadable);
    if (mlir::failed(values))
      continue;
    int64_t last = tensor->dims_size() ? tensor->dims(tensor->dims_size() - 1) : 0;
    std::string why = maskReason(*values);
    if (!why.empty() && isCausalMask(*values, *tensor))
      choices.causalMasks.insert(name);
    if (why.empty())
      why = tableReason(*values, last);
    if (why.empty() && isAngleTable(*values, last) && chooser.onlySinAndCos(name))
      why = "a rotary embedding's angles: positions times frequencies, read only through "
            "their sine and cosine";
    if (!why.empty())
      frozen[name] = why;
    else if (unitRanged(*values))
      candidates.push_back({tensor, std::move(*values)});
  }
  // Weights the exporter merged: one initializer read by several nodes,
  // holding one number.
  for (const ::onnx::TensorProto *tensor : parameters) {
    const std::string &name = tensor->name();
    if (frozen.count(name) || chooser.readers(name) < 2 || elementCount(*tensor) > kMaxInspected)
      continue;
    std::string unreadable;
    auto values = valuesOf(context, *tensor, baseDir, unreadable);
    if (mlir::succeeded(values) &&
        llvm::all_of(*values, [&](double v) { return v == values->front(); }))
      choices.untied.insert(name);
  }
  // Tied weights the exporter folded apart: an embedding table (what a
  // Gather reads) and a 2-D weight holding exactly its transpose.
  std::vector<const ::onnx::TensorProto *> tables, transposed;
  for (const ::onnx::TensorProto *tensor : parameters)
    if (tensor->dims_size() == 2 && !frozen.count(tensor->name()) &&
        elementCount(*tensor) <= kMaxTied)
      (chooser.isEmbeddingTable(tensor->name()) ? tables : transposed).push_back(tensor);
  for (const ::onnx::TensorProto *table : tables)
    for (const ::onnx::TensorProto *other : transposed) {
      if (other->dims(0) != table->dims(1) || other->dims(1) != table->dims(0) ||
          choices.transposeOf.count(other->name()))
        continue;
      // A few elements first: an untied lm_head of a 7B model is rejected
      // after reading 16 of its values, not its gigabyte.
      int64_t rows = table->dims(0), cols = table->dims(1);
      std::vector<int64_t> at, atTransposed;
      for (int64_t s = 0; s < 16 && rows * cols > 0; ++s) {
        int64_t i = (s * 2654435761LL) % (rows * cols), r = i / cols, c = i % cols;
        at.push_back(i);
        atTransposed.push_back(c * rows + r);
      }
      std::vector<float> sa = sampleFloats(*table, baseDir, at),
                         sb = sampleFloats(*other, baseDir, atTransposed);
      if (!sa.empty() && sa.size() == sb.size() && sa != sb)
        continue;
      std::string unreadable;
      auto a = valuesOf(context, *table, baseDir, unreadable);
      auto b = valuesOf(context, *other, baseDir, unreadable);
      if (mlir::failed(a) || mlir::failed(b))
        continue;
      bool same = true;
      for (int64_t r = 0; same && r < rows; ++r)
        for (int64_t c = 0; same && c < cols; ++c)
          same = (*a)[size_t(r * cols + c)] == (*b)[size_t(c * rows + r)];
      if (same) {
        choices.transposeOf[other->name()] = table->name();
        break;
      }
    }
  // Rotary embeddings' cos and sin tables come as two tensors.
  for (size_t i = 0; i < candidates.size(); ++i)
    for (size_t j = i + 1; j < candidates.size(); ++j) {
      const std::string &a = candidates[i].tensor->name(), &b = candidates[j].tensor->name();
      if (frozen.count(a) || frozen.count(b) ||
          !std::equal(candidates[i].tensor->dims().begin(), candidates[i].tensor->dims().end(),
                      candidates[j].tensor->dims().begin(),
                      candidates[j].tensor->dims().end()) ||
          !squaresSumToOne(candidates[i].values, candidates[j].values))
        continue;
      frozen[a] = frozen[b] = "rotary cos and sin tables: paired, cos^2 + sin^2 = 1";
    }
  return mlir::success();
}

} // namespace dtc::onnx
