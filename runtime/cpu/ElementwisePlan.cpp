//===- ElementwisePlan.cpp - preparing a fused elementwise expression -----===//
//
// The expression is checked against the buffer types, then prepared for
// the blocks that run it. Adjacent output dims that every input broadcasts
// alike are merged, so that a block reads an input in place (same shape as
// the output and of the compute type), from a tile made once per thread
// (one row repeated, as a bias), as copies or splats along the inner dim,
// or not at all (one element, splat once per thread). Nodes of such
// uniform values alone are evaluated once per thread too. Scratch slots
// are reused once a node's last reader has run.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ElementwisePlan.h"

#include "runtime/cpu/ElementwiseLoops.h"
#include "runtime/cpu/ElementwiseOps.h"
#include "runtime/cpu/ElementwiseTypes.h"
#include "runtime/cpu/KernelSupport.h"
#include "plan/DType.h"

#include <algorithm>
#include <limits>

namespace dtc::runtime::cpu::elementwise {
namespace {

/// Checks `expr` against the buffer types; the message names the node.
bool checkNodes(const plan::Elementwise &expr, const std::vector<plan::TensorType> &inputTypes,
                const std::vector<plan::TensorType> &outputTypes, std::string &error) {
  auto nodeName = [&](int i) {
    int op = expr.nodes(i).op();
    return "elementwise node " + std::to_string(i) + " (" +
           (op > 0 && op < plan::ExprOp_ARRAYSIZE ? kOps[op].name : "op " + std::to_string(op)) +
           ")";
  };
  auto bad = [&](int i, const std::string &what) {
    error = nodeName(i) + ": " + what;
    return false;
  };
  if (expr.nodes_size() == 0) {
    error = "elementwise: the expression has no nodes";
    return false;
  }
  for (int i = 0; i < expr.nodes_size(); ++i) {
    const plan::ExprNode &node = expr.nodes(i);
    const int op = node.op();
    if (op <= 0 || op >= plan::ExprOp_ARRAYSIZE)
      return bad(i, "unknown op (was the plan written by a newer dtc?)");
    const OpInfo &info = kOps[op];
    if (node.args_size() != info.arity)
      return bad(i, "expected " + std::to_string(info.arity) + " arguments, got " +
                        std::to_string(node.args_size()));
    const plan::DType dtype = node.dtype();
    if (!isSupported(dtype))
      return bad(i, unsupported(dtype));
    if (info.rule == Rule::Input) {
      uint32_t input = node.args(0);
      if (input >= inputTypes.size())
        return bad(i, "reads input " + std::to_string(input) + " but the instruction has " +
                          std::to_string(inputTypes.size()) + " inputs");
      if (inputTypes[input].dtype() != dtype)
        return bad(i, "the node is " + std::string(dtypeName(dtype)) + " but input " +
                          std::to_string(input) + " is " +
                          dtypeName(inputTypes[input].dtype()));
      continue;
    }
    for (int k = 0; k < node.args_size(); ++k)
      if (node.args(k) >= uint32_t(i))
        return bad(i, "argument " + std::to_string(k) + " refers to node " +
                          std::to_string(node.args(k)) +
                          ", not an earlier node (the nodes must be in topological order)");
    auto argDType = [&](int k) { return expr.nodes(int(node.args(k))).dtype(); };
    // Whether arguments [from, arity) have dtype `want`.
    auto argsAre = [&](int from, plan::DType want) -> bool {
      for (int k = from; k < node.args_size(); ++k)
        if (argDType(k) != want)
          return bad(i, "argument " + std::to_string(k) + " (node " +
                            std::to_string(node.args(k)) + ") is " + dtypeName(argDType(k)) +
                            ", expected " + dtypeName(want) +
                            " (a Cast is missing before this op)");
      return true;
    };
    switch (info.rule) {
    case Rule::Numeric:
      if (dtype == plan::BOOL)
        return bad(i, "needs a numeric dtype, got bool");
      if (!argsAre(0, dtype))
        return false;
      break;
    case Rule::FloatMath:
      if (!isFloat(dtype))
        return bad(i, std::string("needs f32 or f64, got ") + dtypeName(dtype));
      if (!argsAre(0, dtype))
        return false;
      break;
    case Rule::Compare:
      if (dtype != plan::BOOL)
        return bad(i, std::string("produces bool, but the node is ") + dtypeName(dtype));
      if (!argsAre(1, argDType(0)))
        return false;
      break;
    case Rule::Logic:
      if (dtype != plan::BOOL)
        return bad(i, std::string("produces bool, but the node is ") + dtypeName(dtype));
      if (!argsAre(0, plan::BOOL))
        return false;
      break;
    case Rule::Where:
      if (argDType(0) != plan::BOOL)
        return bad(i, std::string("the condition (argument 0) must be bool, got ") +
                          dtypeName(argDType(0)));
      if (!argsAre(1, dtype))
        return false;
      break;
    default: // Constant, Cast: any supported dtype
      break;
    }
  }
  const int outputs = std::max(1, expr.outputs_size());
  if (size_t(outputs) != outputTypes.size()) {
    error = "elementwise: the expression has " + std::to_string(outputs) +
            " outputs but the instruction " + std::to_string(outputTypes.size());
    return false;
  }
  for (int o = 0; o < outputs; ++o) {
    uint32_t n = expr.outputs().empty() ? uint32_t(expr.nodes_size() - 1) : expr.outputs(o);
    if (n >= uint32_t(expr.nodes_size())) {
      error = "elementwise output " + std::to_string(o) + ": node " + std::to_string(n) +
              " is past the last node";
      return false;
    }
    plan::DType dtype = expr.nodes(int(n)).dtype();
    if (dtype != outputTypes[size_t(o)].dtype()) {
      error = nodeName(int(n)) +
              (expr.outputs().empty() ? ": the last node is " + std::string(dtypeName(dtype)) +
                                            " but the output is "
                                      : ": the node is " + std::string(dtypeName(dtype)) +
                                            " but output " + std::to_string(o) + " is ") +
              dtypeName(outputTypes[size_t(o)].dtype());
      return false;
    }
    if (shapeOf(outputTypes[size_t(o)]) != shapeOf(outputTypes[0])) {
      error = "elementwise output " + std::to_string(o) + ": " +
              shapeString(outputTypes[size_t(o)]) + " is not the shape of output 0, " +
              shapeString(outputTypes[0]) + " (one loop writes them all)";
      return false;
    }
  }
  return true;
}

/// Merges the output dims (dropping 1s) where every input broadcasts alike,
/// and gives each input its strides over the merged dims.
void mergeDims(const std::vector<plan::TensorType> &inputTypes, const Shape &outShape,
               ElementwisePlan &k) {
  const size_t rank = outShape.size();
  // broadcast[i][d]: input i repeats along output dim d.
  std::vector<std::vector<bool>> broadcast(inputTypes.size(), std::vector<bool>(rank));
  for (size_t i = 0; i < inputTypes.size(); ++i) {
    Shape in = shapeOf(inputTypes[i]);
    size_t pad = rank - in.size();
    for (size_t d = 0; d < rank; ++d)
      broadcast[i][d] = d < pad || in[d - pad] != outShape[d];
  }
  std::vector<std::vector<bool>> groupBroadcast(inputTypes.size());
  for (size_t d = 0; d < rank; ++d) {
    if (outShape[d] == 1)
      continue;
    bool same = !k.dims_.empty();
    for (size_t i = 0; i < inputTypes.size() && same; ++i)
      same = groupBroadcast[i].back() == broadcast[i][d];
    if (same) {
      k.dims_.back() *= outShape[d];
    } else {
      k.dims_.push_back(outShape[d]);
      for (size_t i = 0; i < inputTypes.size(); ++i)
        groupBroadcast[i].push_back(broadcast[i][d]);
    }
  }
  if (k.dims_.empty()) { // a single element
    k.dims_.push_back(1);
    for (auto &g : groupBroadcast)
      g.push_back(false);
  }
  for (size_t i = 0; i < inputTypes.size(); ++i) {
    InputAccess &in = k.inputs_[i];
    in.strides.assign(k.dims_.size(), 0);
    int64_t stride = 1;
    in.full = true;
    for (size_t d = k.dims_.size(); d-- > 0;) {
      if (groupBroadcast[i][d]) {
        in.full = false;
      } else {
        in.strides[d] = stride;
        stride *= k.dims_[d];
      }
    }
  }
}

/// How a block reads a (not uniform) input, given the merged output dims.
StepKind inputKind(const InputAccess &in, const std::vector<int64_t> &dims) {
  // I64 and U64 both hold int64 bits.
  bool computeBits = in.dtype == plan::F32 || in.dtype == plan::F64 ||
                     in.dtype == plan::I64 || in.dtype == plan::U64;
  if (in.full)
    return computeBits ? StepKind::InputInPlace : StepKind::InputLoad;
  // Its elements along the inner dim only, and a block spans one row at
  // least: reading from a tile of kBlock + inner values (two slots).
  bool onlyInner = in.strides.back() == 1 &&
                   std::all_of(in.strides.begin(), in.strides.end() - 1,
                               [](int64_t s) { return s == 0; });
  return onlyInner && dims.back() <= kBlock ? StepKind::InputRepeated : StepKind::InputLoad;
}

/// A CONSTANT's value or a CLIP bound for an integer or BOOL node, as the
/// int64 its loops read: saturated into the dtype's range.
int64_t intParamOf(double v, plan::DType dtype) {
  return visitStorage(dtype, [&](auto st) -> int64_t {
    using S = decltype(st);
    if constexpr (!kIsInt<S>) {
      return 0; // not called for float dtypes
    } else if constexpr (std::is_same_v<S, bool>) {
      return v != 0;
    } else if constexpr (std::is_same_v<S, uint64_t>) { // as its int64 bits
      return !(v > 0) ? 0 : v >= 18446744073709551616.0 ? -1 : int64_t(uint64_t(v));
    } else {
      int64_t i = saturateToInt64(v);
      i = std::max<int64_t>(i, std::numeric_limits<S>::min());
      return std::min<int64_t>(i, std::numeric_limits<S>::max());
    }
  });
}

} // namespace

std::unique_ptr<ElementwisePlan> planElementwise(const plan::Elementwise &expr,
                                                 const std::vector<plan::TensorType> &inputTypes,
                                                 const std::vector<plan::TensorType> &outputTypes,
                                                 std::string &error) {
  if (outputTypes.empty())
    return fail(error, "elementwise: the instruction has no outputs");
  for (const plan::TensorType &type : outputTypes)
    if (!isSupported(type.dtype()))
      return fail(error, "elementwise output: " + unsupported(type.dtype()));
  const Shape outShape = shapeOf(outputTypes[0]);
  for (size_t i = 0; i < inputTypes.size(); ++i) {
    const plan::TensorType &type = inputTypes[i];
    std::string what = "elementwise input " + std::to_string(i) + ": ";
    if (!isSupported(type.dtype()))
      return fail(error, what + unsupported(type.dtype()));
    bool broadcasts = size_t(type.shape_size()) <= outShape.size();
    for (int d = type.shape_size() - 1, o = int(outShape.size()) - 1; broadcasts && d >= 0;
         --d, --o)
      broadcasts = type.shape(d) == outShape[o] || type.shape(d) == 1;
    if (!broadcasts)
      return fail(error, what + shapeString(type) + " does not broadcast to the output shape " +
                             shapeString(outShape));
  }
  if (!checkNodes(expr, inputTypes, outputTypes, error))
    return nullptr;

  auto prepared = std::make_unique<ElementwisePlan>();
  ElementwisePlan &k = *prepared;
  k.total_ = product(outShape);
  for (const plan::TensorType &type : inputTypes) {
    InputAccess in;
    in.dtype = type.dtype();
    in.bytes = elementBytes(type.dtype());
    in.compute = computeOf(type.dtype());
    k.inputs_.push_back(std::move(in));
  }
  mergeDims(inputTypes, outShape, k);

  const int count = expr.nodes_size();
  k.nodes_ = count;
  std::vector<bool> isOutput(size_t(count), false);
  for (size_t o = 0; o < outputTypes.size(); ++o) {
    OutputAccess out;
    out.node = expr.outputs().empty() ? count - 1 : int(expr.outputs(int(o)));
    out.bytes = elementBytes(outputTypes[o].dtype());
    out.store = storeFnFor(outputTypes[o].dtype());
    isOutput[size_t(out.node)] = true;
    k.outputs_.push_back(out);
  }
  // Only the nodes the outputs depend on run.
  std::vector<bool> live = isOutput;
  for (int i = count - 1; i >= 0; --i)
    if (live[size_t(i)] && expr.nodes(i).op() != plan::INPUT)
      for (uint32_t a : expr.nodes(i).args())
        live[a] = true;
  // A node is uniform when it has one value for the whole output: a
  // constant, a one-element input, or an op of uniform nodes.
  std::vector<bool> uniform(size_t(count), false);
  std::vector<int> lastUse(size_t(count), -1); // by a node; -1: by none
  for (int i = 0; i < count; ++i) {
    const plan::ExprNode &node = expr.nodes(i);
    if (node.op() == plan::INPUT) {
      const auto &strides = k.inputs_[node.args(0)].strides;
      uniform[size_t(i)] = std::all_of(strides.begin(), strides.end(),
                                       [](int64_t s) { return s == 0; });
      continue;
    }
    bool allUniform = true;
    for (uint32_t a : node.args()) {
      allUniform = allUniform && uniform[a];
      if (live[size_t(i)])
        lastUse[a] = i;
    }
    uniform[size_t(i)] = allUniform;
  }
  // An output's store reads it after the block's last node.
  std::vector<bool> readByNodes(static_cast<size_t>(count), false);
  for (int i = 0; i < count; ++i) {
    readByNodes[size_t(i)] = lastUse[size_t(i)] >= 0;
    if (isOutput[size_t(i)])
      lastUse[size_t(i)] = count;
  }

  // Scratch slots: uniform nodes keep theirs; the others are reused once
  // their last reader has run.
  std::vector<int> freeSlots, slotOf(size_t(count), -1);
  int64_t cost = 0; // the stores are added below
  for (int i = 0; i < count; ++i) {
    if (!live[size_t(i)])
      continue;
    const plan::ExprNode &node = expr.nodes(i);
    Step s;
    s.node = i;
    for (int a = 0; a < node.args_size(); ++a)
      s.args[a] = int(node.args(a));
    if (node.op() == plan::INPUT) {
      s.input = int(node.args(0));
      s.kind = uniform[size_t(i)] ? StepKind::InputLoad
                                  : inputKind(k.inputs_[size_t(s.input)], k.dims_);
      s.load = loadFnFor(k.inputs_[size_t(s.input)].dtype);
      cost += 1;
    } else {
      s.kind = StepKind::Compute;
      s.fn = stepFnFor(expr, i);
      // An output's store narrows; a node other nodes read narrows itself.
      if (!isOutput[size_t(i)] || readByNodes[size_t(i)])
        s.narrow = narrowFnFor(node.op(), node.dtype());
      s.param[0] = node.value();
      s.param[1] = node.value2();
      if (computeOf(node.dtype()) == Compute::I64)
        for (int p = 0; p < 2; ++p)
          s.intParam[p] = intParamOf(s.param[p], node.dtype());
      if (!uniform[size_t(i)])
        cost += kOps[node.op()].cost;
    }
    if (uniform[size_t(i)]) {
      s.slot = k.slots_++;
      k.uniformSteps_.push_back(s);
      continue;
    }
    if (s.kind == StepKind::InputRepeated) {
      s.slot = k.slots_;
      k.slots_ += 2;
    } else if (s.kind != StepKind::InputInPlace) {
      if (freeSlots.empty()) {
        s.slot = k.slots_++;
      } else {
        s.slot = freeSlots.back();
        freeSlots.pop_back();
      }
      slotOf[size_t(i)] = s.slot;
    }
    // Freed after the slot above is taken, so a loop's output never is one
    // of its arguments (they are restrict).
    if (s.kind == StepKind::Compute)
      for (int a = 0; a < node.args_size(); ++a) {
        int arg = s.args[a];
        bool repeated = std::find(s.args, s.args + a, arg) != s.args + a;
        if (!repeated && lastUse[size_t(arg)] == i && slotOf[size_t(arg)] >= 0)
          freeSlots.push_back(slotOf[size_t(arg)]);
      }
    k.blockSteps_.push_back(s);
  }

  for (size_t o = 0; o < outputTypes.size(); ++o) {
    OutputAccess &out = k.outputs_[o];
    const plan::DType dtype = outputTypes[o].dtype();
    // Written by its node's loop: a node computed per block whose values
    // are already the output's bits, and the only output it feeds.
    bool alone = std::count_if(k.outputs_.begin(), k.outputs_.end(),
                               [&](const OutputAccess &a) { return a.node == out.node; }) == 1;
    out.storeInPlace = alone && !uniform[size_t(out.node)] &&
                       expr.nodes(out.node).op() != plan::INPUT &&
                       (dtype == plan::F32 || dtype == plan::F64 || dtype == plan::I64 ||
                        dtype == plan::U64);
    cost += 1;
  }
  // Small outputs stay on one thread: waking the pool costs more.
  k.grain_ = std::max<int64_t>(1, kSerialWork * 4 / (cost * kBlock));
  return prepared;
}

} // namespace dtc::runtime::cpu::elementwise
