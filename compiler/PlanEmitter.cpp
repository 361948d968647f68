//===- PlanEmitter.cpp ----------------------------------------------------===//
#include "compiler/PlanEmitter.h"
#include "plan/PipelineSchedule.h"

#include <set>
#include "compiler/PlanTypes.h"

#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/MicroBatches.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/Overlap.h"
#include "plan/PlanLoader.h"
#include "plan/PlanPrinter.h"
#include "plan/Version.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/xxhash.h"

#include <cmath>
#include <optional>

using namespace mlir;

namespace dtc {
namespace {

/// Little-endian element bytes of a dense constant (i1 as one byte each).
std::string constantBytes(DenseElementsAttr attr) {
  auto type = cast<RankedTensorType>(attr.getType());
  int64_t count = type.getNumElements();
  Type element = type.getElementType();
  std::string bytes;
  if (element.isInteger(1)) {
    for (bool v : attr.getValues<bool>())
      bytes.push_back(v ? 1 : 0);
    return bytes;
  }
  int64_t width = element.getIntOrFloatBitWidth() / 8;
  ArrayRef<char> raw = attr.getRawData();
  if (attr.isSplat()) {
    for (int64_t i = 0; i < count; ++i)
      bytes.append(raw.data(), width);
    return bytes;
  }
  return std::string(raw.data(), raw.size());
}

/// A constant's single value, as the expression's CONSTANT node holds it.
double splatValue(DenseElementsAttr attr) {
  Type element = attr.getElementType();
  if (isa<FloatType>(element))
    return attr.getSplatValue<APFloat>().convertToDouble();
  if (element.isInteger(1))
    return attr.getSplatValue<bool>() ? 1.0 : 0.0;
  APInt v = attr.getSplatValue<APInt>();
  return element.isUnsignedInteger() ? double(v.getZExtValue()) : double(v.getSExtValue());
}

plan::ExprOp exprOpOf(Operation *op) {
  return llvm::StringSwitch<plan::ExprOp>(op->getName().stripDialect())
      .Case("add", plan::ADD).Case("sub", plan::SUB).Case("mul", plan::MUL)
      .Case("div", plan::DIV).Case("pow", plan::POW).Case("max", plan::MAX)
      .Case("min", plan::MIN).Case("neg", plan::NEG).Case("abs", plan::ABS)
      .Case("exp", plan::EXP).Case("log", plan::LOG).Case("sqrt", plan::SQRT)
      .Case("reciprocal", plan::RECIPROCAL).Case("tanh", plan::TANH)
      .Case("erf", plan::ERF).Case("relu", plan::RELU).Case("sigmoid", plan::SIGMOID)
      .Case("clip", plan::CLIP).Case("cast", plan::CAST).Case("where", plan::WHERE)
      .Case("equal", plan::EQUAL).Case("less", plan::LESS)
      .Case("less_equal", plan::LESS_EQUAL).Case("greater", plan::GREATER)
      .Case("greater_equal", plan::GREATER_EQUAL).Case("not", plan::NOT)
      .Case("and", plan::AND).Case("or", plan::OR).Case("xor", plan::XOR)
      .Case("sin", plan::SIN).Case("cos", plan::COS)
      .Default(plan::EXPR_INVALID);
}

/// The role a `dtc.role` names (dtc-build-training-step writes them).
std::optional<plan::InputRole> inputRole(StringRef role) {
  return llvm::StringSwitch<std::optional<plan::InputRole>>(role)
      .Case("labels", plan::LABELS)
      .Case("learning_rate", plan::LEARNING_RATE)
      .Case("bias_correction1", plan::BIAS_CORRECTION1)
      .Case("bias_correction2", plan::BIAS_CORRECTION2)
      .Default(std::nullopt);
}

/// The plan's training section from `dtc.training` (the updates are
/// filled as the results are emitted).
LogicalResult emitTraining(func::FuncOp func, DictionaryAttr options, plan::Training &out) {
  bool ok = true;
  auto text = [&](StringRef key) -> std::string {
    auto a = options.getAs<StringAttr>(key);
    ok = ok && a;
    return a ? a.str() : "";
  };
  auto real = [&](StringRef key) {
    auto a = options.getAs<FloatAttr>(key);
    ok = ok && a;
    return a ? a.getValueAsDouble() : 0.0;
  };
  auto integer = [&](StringRef key, bool required = true) -> int64_t {
    auto a = options.getAs<IntegerAttr>(key);
    ok = ok && (a || !required);
    return a ? a.getInt() : 0;
  };
  out.set_loss(text("loss"));
  out.set_optimizer(text("optimizer"));
  out.set_learning_rate(real("learning_rate"));
  out.set_schedule(text("schedule"));
  out.set_warmup_steps(integer("warmup_steps"));
  out.set_total_steps(integer("total_steps"));
  out.set_beta1(real("beta1"));
  out.set_beta2(real("beta2"));
  out.set_momentum(real("momentum"));
  out.set_weight_decay(real("weight_decay"));
  out.set_clip_norm(real("clip_norm"));
  if (auto skip = options.getAs<BoolAttr>("skip_nonfinite"))
    out.set_skip_nonfinite(skip.getValue());
  if (auto sync = options.getAs<StringAttr>("sync")) {
    out.set_sync(sync.str());
    out.set_average_every(integer("average_every", /*required=*/false));
    auto axes = options.getAs<DenseI64ArrayAttr>("data_axes");
    ok = ok && axes;
    if (axes)
      for (int64_t a : axes.asArrayRef())
        out.add_data_axes(uint32_t(a));
  }
  out.set_precision(text("precision"));
  out.set_running_statistics(integer("running_statistics"));
  out.set_classes(integer("classes", /*required=*/false));
  out.set_micro_batches(std::max<int64_t>(1, integer("micro_batches", /*required=*/false)));
  if (options.get("ignore_index")) {
    out.set_has_ignore_index(true);
    out.set_ignore_index(integer("ignore_index"));
  }
  if (!ok)
    return func.emitError("malformed ") << attr::kTraining << ": " << options;
  return success();
}

class PlanEmitter {
public:
  /// `meshShape`: the sizes of the mesh axes (sharded buffers name them).
  /// `axisOffset`: the mesh axes before the program's own (a pipeline's
  /// stage axis), added to every axis the IR names.
  PlanEmitter(func::FuncOp func, plan::Plan &plan, std::vector<int64_t> meshShape,
              uint32_t axisOffset = 0)
      : func_(func), plan_(plan), rank_(*plan.add_ranks()), meshShape_(std::move(meshShape)),
        axisOffset_(axisOffset) {}

  LogicalResult emit() {
    Block &block = func_.getBody().front();
    // Every program has the step's inputs; the first one states them.
    bool first = plan_.ranks_size() == 1;
    auto outputIndices = func_->getAttrOfType<DenseI64ArrayAttr>(attr::kOutputs);
    bool pipelined = bool(func_->getAttrOfType<IntegerAttr>(attr::kStage));
    // A pipeline stage's and a parameter-server plan's programs list their
    // own updates.
    bool ownUpdates =
        pipelined || func_->getParentOfType<ModuleOp>()->hasAttr(attr::kParameterServers);
    int64_t virtuals = virtualStagesOf(func_);
    std::vector<uint32_t> partEnds; // an interleaved stage's (RankProgram.part_ends)
    for (BlockArgument arg : block.getArguments()) {
      plan::Tensor scratch;
      plan::Tensor *input = first ? plan_.add_inputs() : &scratch;
      auto name = func_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr::kName);
      input->set_name(name ? name.str() : "input_" + std::to_string(arg.getArgNumber()));
      if (auto role = func_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr::kRole)) {
        std::optional<plan::InputRole> known = inputRole(role.getValue());
        if (!known)
          return func_.emitError("input ") << arg.getArgNumber() << " has unknown role " << role;
        input->set_role(*known);
      }
      setType(arg.getType(), *input->mutable_type());
      auto offset = func_.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), attr::kOffset);
      if (!offset)
        return func_.emitError("plan emission needs buffer offsets (run dtc-assign-buffers)");
      plan::Buffer &buffer = addBuffer(arg, offset.getInt(), input->name());
      buffer.set_input(arg.getArgNumber());
      // A split input: the plan names the whole tensor, the buffer its part.
      if (auto sharding = func_.getArgAttrOfType<graph::ShardingAttr>(arg.getArgNumber(), attr::kSharding)) {
        setSharding(buffer, sharding);
        *input->mutable_type()->mutable_shape() = globalShape(arg, sharding);
      }
    }
    for (Operation &op : block) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        // A pipeline stage's results are some of the step's outputs
        // (dtc.outputs); plan.outputs has room for all of them.
        if (outputIndices) {
          for (int64_t index : outputIndices.asArrayRef())
            while (plan_.outputs_size() <= index)
              plan_.add_outputs();
          while (rank_.outputs_size() < plan_.outputs_size())
            rank_.add_outputs(plan::kNoBuffer);
        }
        for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
          int64_t index = outputIndices ? outputIndices[i] : int64_t(i);
          plan::Tensor *output = outputIndices ? plan_.mutable_outputs(int(index)) : plan_.add_outputs();
          auto name = func_.getResultAttrOfType<StringAttr>(i, attr::kName);
          output->set_name(name ? name.str() : "output_" + std::to_string(index));
          setType(value.getType(), *output->mutable_type());
          if (outputIndices)
            rank_.set_outputs(int(index), ids_.lookup(value));
          else
            rank_.add_outputs(ids_.lookup(value));
          // A training step's new weights and optimizer state.
          if (auto updates = func_.getResultAttrOfType<StringAttr>(i, attr::kUpdates)) {
            auto parameter = parameters_.find(updates.getValue());
            if (parameter == parameters_.end())
              return func_.emitError("result ") << i << " updates unknown parameter " << updates;
            plan::ParameterUpdate *update = ownUpdates ? rank_.add_updates()
                                                      : plan_.mutable_training()->add_updates();
            update->set_output(uint32_t(index));
            update->set_buffer(parameter->second);
          }
        }
        continue;
      }
      // A micro-batched step's once-per-step part comes last, and a
      // pipeline stage's forward part first (dtc-schedule).
      bool once = op.hasAttr(attr::kOncePerStep);
      bool forward = op.hasAttr(attr::kPipelineForward) && !once;
      int before = rank_.instructions_size();
      if (failed(emitOp(&op)))
        return failure();
      bool emitted = rank_.instructions_size() != before;
      if (!forward && emitted && !forwardEnd_)
        forwardEnd_ = before;
      if (forward && emitted && forwardEnd_)
        return op.emitError("a forward op after the backward part (run dtc-schedule)");
      // An interleaved stage's parts, one after another.
      if (int64_t part = pipelinePartOf(&op, virtuals); pipelined && virtuals > 1 && emitted) {
        if (part < int64_t(partEnds.size()))
          return op.emitError("an op of an earlier virtual stage's part after a later one's "
                              "(run dtc-schedule)");
        while (int64_t(partEnds.size()) < part)
          partEnds.push_back(uint32_t(before));
      }
      if (once && !accumulateEnd_)
        accumulateEnd_ = before;
      if (!once && accumulateEnd_ && emitted)
        return op.emitError("a per-micro-batch op after the once-per-step part (run dtc-schedule)");
    }
    // A parameter server's update runs once per step, all of it.
    bool server = bool(func_->getAttrOfType<IntegerAttr>(attr::kServer));
    rank_.set_accumulate_end(
        server ? 0u : uint32_t(accumulateEnd_.value_or(rank_.instructions_size())));
    if (pipelined) {
      rank_.set_forward_end(
          uint32_t(std::min(forwardEnd_.value_or(rank_.instructions_size()),
                            int(rank_.accumulate_end()))));
      if (virtuals > 1) {
        while (int64_t(partEnds.size()) < 2 * virtuals)
          partEnds.push_back(rank_.accumulate_end());
        for (uint32_t end : partEnds)
          rank_.add_part_ends(end);
      }
      // The stash's groups; a buffer in a group's first copy is in it.
      if (auto triples = func_->getAttrOfType<DenseI64ArrayAttr>(attr::kStashes))
        for (size_t i = 0; i + 2 < triples.size(); i += 3) {
          plan::Stash *stash = rank_.add_stashes();
          stash->set_offset(triples[i]);
          stash->set_bytes(triples[i + 1]);
          stash->set_slots(uint32_t(triples[i + 2]));
        }
      for (plan::Buffer &buffer : *rank_.mutable_buffers())
        for (int g = 0; g < rank_.stashes_size(); ++g)
          if (!buffer.has_parameter() && !buffer.has_constant() && !buffer.has_input() &&
              buffer.offset() >= rank_.stashes(g).offset() &&
              buffer.offset() < rank_.stashes(g).offset() + rank_.stashes(g).bytes())
            buffer.set_stash(uint32_t(g + 1));
    }
    rank_.set_arena_bytes(func_->getAttrOfType<IntegerAttr>(attr::kArenaBytes).getInt());
    // A micro-batched step's gradient reductions that can overlap the last
    // micro-batch's backward.
    if (accumulateEnd_)
      for (const plan::OverlappedInstruction &o : plan::overlappableReductions(rank_))
        *rank_.add_overlapped() = o;
    return success();
  }

private:
  plan::Buffer &addBuffer(Value value, int64_t offset, const std::string &name) {
    ids_[value] = rank_.buffers_size();
    plan::Buffer &buffer = *rank_.add_buffers();
    setType(value.getType(), *buffer.mutable_type());
    buffer.set_offset(offset);
    buffer.set_name(name);
    return buffer;
  }

  /// The mesh axes that split each dim of a value.
  void setSharding(plan::Buffer &buffer, graph::ShardingAttr sharding) const {
    for (DenseI64ArrayAttr dim : sharding.getEntries()) {
      plan::DimSharding *d = buffer.add_sharding();
      for (int64_t axis : dim.asArrayRef())
        d->add_mesh_axes(uint32_t(axis) + axisOffset_);
    }
  }

  /// The whole tensor's shape of a value split by `sharding`.
  google::protobuf::RepeatedField<int64_t> globalShape(Value local, graph::ShardingAttr sharding) {
    google::protobuf::RepeatedField<int64_t> shape;
    for (auto [d, size] : llvm::enumerate(cast<ShapedType>(local.getType()).getShape())) {
      int64_t parts = 1;
      if (d < sharding.getEntries().size())
        for (int64_t axis : sharding.getEntries()[d].asArrayRef())
          parts *= meshShape_[size_t(axis) + axisOffset_];
      shape.Add(size * parts);
    }
    return shape;
  }

  /// A collective on the mesh, costed by the bytes each rank holds before
  /// it; an all-slice moves nothing between ranks and is costed as the
  /// local copy of its part.
  /// A mesh collective as the plan's: its kind, mesh axes, dims and
  /// reduction.
  struct CollectiveOf {
    plan::CollectiveKind kind = plan::COLLECTIVE_INVALID;
    ArrayRef<int16_t> axes;
    int64_t axis = 0, concatAxis = 0;
    std::optional<mesh::ReductionKind> reduction;
  };
  static CollectiveOf collectiveOf(Operation *op) {
    return TypeSwitch<Operation *, CollectiveOf>(op)
        .Case([](mesh::AllReduceOp c) {
          return CollectiveOf{plan::ALL_REDUCE, c.getMeshAxes(), 0, 0, c.getReduction()};
        })
        .Case([](mesh::AllGatherOp c) {
          return CollectiveOf{plan::ALL_GATHER, c.getMeshAxes(),
                              c.getGatherAxis().getSExtValue()};
        })
        .Case([](mesh::AllSliceOp c) {
          return CollectiveOf{plan::ALL_SLICE, c.getMeshAxes(), c.getSliceAxis().getSExtValue()};
        })
        .Case([](mesh::ReduceScatterOp c) {
          return CollectiveOf{plan::REDUCE_SCATTER, c.getMeshAxes(),
                              c.getScatterAxis().getSExtValue(), 0, c.getReduction()};
        })
        .Case([](mesh::AllToAllOp c) {
          return CollectiveOf{plan::ALL_TO_ALL, c.getMeshAxes(), c.getSplitAxis().getSExtValue(),
                              c.getConcatAxis().getSExtValue()};
        })
        .Default([](Operation *) { return CollectiveOf{}; });
  }

  /// A collective instruction: `op` a mesh collective, or a graph.bucket of
  /// them (one instruction, an input and an output a member, each
  /// member's dim in member_axes).
  LogicalResult emitCollective(Operation *op) {
    auto bucket = dyn_cast<graph::BucketOp>(op);
    SmallVector<Operation *> members;
    if (bucket)
      for (Operation &m : bucket.getBody().front().without_terminator())
        members.push_back(&m);
    else
      members.push_back(op);
    CollectiveOf first = collectiveOf(members.front());
    ArrayRef<int16_t> axes = first.axes;
    for (Operation *m : members)
      if (getElementTypeOrSelf(m->getOperand(0)) != getElementTypeOrSelf(m->getResult(0)))
        return m->emitError("plan collectives keep the element type; this one turns ")
               << getElementTypeOrSelf(m->getOperand(0)) << " into "
               << getElementTypeOrSelf(m->getResult(0));
    plan::Instruction &inst = addInstruction(op, op->getOperands());
    plan::Collective *c = inst.mutable_collective();
    c->set_kind(first.kind);
    // A replicated stage's replicas (dtc-pipeline-split): the pipeline's
    // axis, only their coordinates.
    if (auto range = op->getAttrOfType<DenseI64ArrayAttr>(attr::kReplicas)) {
      if (range.size() != 2 || axisOffset_ == 0)
        return op->emitError("malformed ") << attr::kReplicas;
      c->add_mesh_axes(0);
      c->mutable_coordinates()->set_first(range[0]);
      c->mutable_coordinates()->set_count(range[1]);
      axes = {};
    }
    for (int16_t a : axes)
      c->add_mesh_axes(uint32_t(a) + axisOffset_);
    c->set_axis(first.axis);
    c->set_concat_axis(first.concatAxis);
    if (bucket && first.kind != plan::ALL_REDUCE)
      for (Operation *m : members)
        c->add_member_axes(collectiveOf(m).axis);
    if (first.reduction) {
      switch (*first.reduction) {
      case mesh::ReductionKind::Sum:
        c->set_reduction(plan::REDUCE_SUM);
        break;
      case mesh::ReductionKind::Max:
        c->set_reduction(plan::REDUCE_MAX);
        break;
      case mesh::ReductionKind::Min:
        c->set_reduction(plan::REDUCE_MIN);
        break;
      default:
        return op->emitError("no plan collective for this reduction");
      }
    }
    if (first.kind == plan::ALL_SLICE) { // the part is read and written once
      setCost(inst, {0, 2.0 * double(tensorBytes(op->getResult(0))), graph::OpCost::DataMovement},
              op->getResult(0));
      return success();
    }
    plan::Cost *cost = inst.mutable_cost();
    double bytes = 0;
    for (Value input : op->getOperands())
      bytes += double(tensorBytes(input));
    cost->set_bytes(bytes);
    cost->set_op_class(plan::OP_COMMUNICATION);
    plan::TensorType type;
    setType(op->getOperand(0).getType(), type);
    cost->set_dtype(type.dtype());
    return success();
  }

  /// The rank of stage `stage` at this rank's place on the other axes: on
  /// a replicated stage, the replica that runs the micro-batch.
  void setStagePeer(plan::AxisPeer &peer, int64_t stage) const {
    const plan::Pipeline &pipeline = plan_.training().pipeline();
    peer.set_coordinate(plan::firstStageCoordinate(pipeline, stage));
    if (int64_t replicas = plan::stageReplicas(pipeline, stage); replicas > 1)
      peer.set_replicas(uint32_t(replicas));
  }

  static void setTransferCost(plan::Instruction &inst, Value sent) {
    plan::Cost *cost = inst.mutable_cost();
    cost->set_bytes(double(tensorBytes(sent)));
    cost->set_op_class(plan::OP_COMMUNICATION);
    plan::TensorType type;
    setType(sent.getType(), type);
    cost->set_dtype(type.dtype());
  }

  plan::Instruction &addInstruction(Operation *op, ValueRange inputs) {
    // Ops of the load-time prologue (dtc-hoist-constants) run once.
    plan::Instruction &inst =
        op->hasAttr(attr::kPrologue) ? *rank_.add_prologue() : *rank_.add_instructions();
    for (Value v : inputs)
      inst.add_inputs(ids_.lookup(v));
    for (Value v : op->getResults())
      inst.add_outputs(ids_.lookup(v));
    if (auto costed = dyn_cast<graph::CostOp>(op))
      setCost(inst, costed.cost(), computedValue(op));
    setGpuKernel(op, inst);
    return inst;
  }

  /// The instruction's cost, from its op's cost rule; `computed` is the
  /// value whose element type is the compute dtype.
  static void setCost(plan::Instruction &inst, const graph::OpCost &cost, Value computed) {
    *inst.mutable_cost() = planCost(cost, computed);
  }

  LogicalResult emitOp(Operation *op) {
    auto offsets = op->getAttrOfType<DenseI64ArrayAttr>(attr::kOffsets);
    if (!offsets && op->getNumResults() > 0)
      return op->emitError("plan emission needs buffer offsets (run dtc-assign-buffers)");
    std::string name = locationName(op->getLoc());
    SmallVector<Location> members; // a bucket's results are named by their collective
    if (auto bucket = dyn_cast<graph::BucketOp>(op))
      for (Operation &m : bucket.getBody().front().without_terminator())
        members.push_back(m.getLoc());
    for (auto [i, result] : llvm::enumerate(op->getResults())) {
      plan::Buffer &buffer =
          addBuffer(result, offsets[i], members.empty() ? name : locationName(members[i]));
      // How the partitioner split the value (shown by dtc plan): each
      // result's, or the op's one (a fused op's results, all one shape; a
      // second result of the same type: a kept GELU input).
      auto sharding = op->getAttrOfType<graph::ShardingAttr>(attr::kSharding);
      if (auto each = op->getAttrOfType<ArrayAttr>(attr::kResultShardings);
          each && each.size() == op->getNumResults())
        sharding = dyn_cast<graph::ShardingAttr>(each[i]);
      else if (!isa<graph::FusedOp>(op) && result.getType() != op->getResult(0).getType())
        sharding = {};
      if (sharding && !isa<graph::ParameterOp>(op) &&
          int64_t(sharding.getEntries().size()) == cast<ShapedType>(result.getType()).getRank())
        setSharding(buffer, sharding);
    }

    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](graph::ParameterOp p) -> LogicalResult {
          auto *source = rank_.mutable_buffers(ids_[p.getResult()])->mutable_parameter();
          source->set_initializer(p.getName().str());
          // Where the importer found its bytes in external data: a rank
          // reads its slice from there.
          if (std::optional<llvm::StringRef> file = p.getFile())
            source->set_file(file->str());
          if (std::optional<uint64_t> offset = p.getOffset())
            source->set_offset(int64_t(*offset));
          source->set_zeros(p->hasAttr(attr::kZeros));
          source->set_accumulator(p->hasAttr(attr::kAccumulator));
          source->set_frozen(p.getFrozen().has_value());
          if (std::optional<llvm::StringRef> copyOf = p.getCopyOf()) {
            source->set_copy_of(copyOf->str());
            source->set_reader(p.getReader().value_or("").str());
          }
          if (std::optional<llvm::StringRef> castOf = p.getCastOf())
            source->set_cast_of(castOf->str());
          // A weight the step pads (compiler/PadClasses.h): the model's shape.
          if (auto model = p->getAttrOfType<DenseI64ArrayAttr>(attr::kModelShape))
            for (int64_t d : model.asArrayRef())
              source->add_model_shape(d);
          auto std = p->getAttrOfType<FloatAttr>(attr::kInitStd);
          auto value = p->getAttrOfType<FloatAttr>(attr::kInitValue);
          if (std || value) { // a generated model's: drawn at load, seeded by its name
            plan::SeededInit *seeded = source->mutable_seeded();
            seeded->set_mean(value ? value.getValueAsDouble() : 0.0);
            seeded->set_std(std ? std.getValueAsDouble() : 0.0);
            seeded->set_seed(llvm::xxh3_64bits(p.getName()));
            for (int64_t d : cast<ShapedType>(p.getType()).getShape())
              seeded->add_shape(d);
          }
          // A parameter server's row block of the initializer.
          if (auto rows = p->getAttrOfType<DenseI64ArrayAttr>(attr::kRows)) {
            auto local = cast<ShapedType>(p.getType()).getShape();
            for (auto [d, size] : llvm::enumerate(local)) {
              plan::DimSlice *slice = source->add_slice();
              slice->set_start(d == 0 ? rows[0] : 0);
              slice->set_size(size);
            }
            if (source->has_seeded())
              source->mutable_seeded()->set_shape(0, rows[1]);
          }
          parameters_[p.getName()] = ids_[p.getResult()];
          if (auto sharding = p->getAttrOfType<graph::ShardingAttr>(attr::kSharding)) {
            setSharding(*rank_.mutable_buffers(ids_[p.getResult()]), sharding);
            if (source->has_seeded())
              *source->mutable_seeded()->mutable_shape() = globalShape(p.getResult(), sharding);
          }
          return success();
        })
        .Case([&](graph::ConstantOp c) -> LogicalResult {
          auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
          if (!dense)
            return c.emitError("constant is not a dense tensor");
          if (std::optional<double> fill = splatFill(c, dense)) {
            emitFill(c, *fill);
            return success();
          }
          rank_.mutable_buffers(ids_[c.getResult()])->set_constant(constantBytes(dense));
          return success();
        })
        .Case<graph::ReshapeOp, graph::SqueezeOp, graph::UnsqueezeOp>(
            [&](Operation *) -> LogicalResult { return success(); }) // views: same bytes
        .Case([&](graph::FusedOp f) -> LogicalResult { return emitFused(f); })
        // Pipeline stages are mesh axis 0: a transfer goes to the rank of
        // the other stage at this rank's place on the other axes.
        .Case([&](graph::SendOp send) -> LogicalResult {
          plan::Instruction &inst = addInstruction(op, op->getOperands());
          setStagePeer(*inst.mutable_send()->mutable_along(), send.getStage());
          if (auto channel = op->getAttrOfType<IntegerAttr>(attr::kChannel))
            inst.mutable_send()->set_channel(uint32_t(channel.getInt()));
          setTransferCost(inst, send.getInput());
          return success();
        })
        .Case([&](graph::RecvOp recv) -> LogicalResult {
          plan::Instruction &inst = addInstruction(op, {});
          setStagePeer(*inst.mutable_recv()->mutable_along(), recv.getStage());
          if (auto channel = op->getAttrOfType<IntegerAttr>(attr::kChannel))
            inst.mutable_recv()->set_channel(uint32_t(channel.getInt()));
          setTransferCost(inst, recv.getOutput());
          return success();
        })
        .Case([&](graph::CopyOp) -> LogicalResult {
          plan::Instruction &inst = addInstruction(op, op->getOperands());
          inst.mutable_copy();
          setCost(inst, {0, 2.0 * double(tensorBytes(op->getResult(0))), graph::OpCost::DataMovement},
                  op->getResult(0));
          return success();
        })
        .Case([&](graph::MatmulOp m) -> LogicalResult {
          auto *mm = addInstruction(op, op->getOperands()).mutable_matmul();
          mm->set_transpose_lhs(m.getTransposeLhs());
          mm->set_transpose_rhs(m.getTransposeRhs());
          return success();
        })
        .Case([&](graph::MatmulBiasOp m) -> LogicalResult {
          auto *mm = addInstruction(op, op->getOperands()).mutable_matmul();
          mm->set_transpose_lhs(m.getTransposeLhs());
          mm->set_transpose_rhs(m.getTransposeRhs());
          mm->set_bias(true);
          mm->set_activation(m.getActivation() == "relu"        ? plan::ACTIVATION_RELU
                             : m.getActivation() == "gelu_tanh" ? plan::ACTIVATION_GELU_TANH
                                                                : plan::ACTIVATION_NONE);
          mm->set_keep_preactivation(m.getKeepPreactivation());
          mm->set_addend(!m.getAddend().empty());
          return success();
        })
        .Case([&](graph::MatmulGradOp m) -> LogicalResult {
          auto *mm = addInstruction(op, op->getOperands()).mutable_matmul();
          mm->set_transpose_lhs(true);
          mm->set_bias_gradient(true);
          return success();
        })
        .Case([&](graph::MatmulAccOp m) -> LogicalResult {
          auto *mm = addInstruction(op, op->getOperands()).mutable_matmul();
          mm->set_transpose_lhs(m.getTransposeLhs());
          mm->set_transpose_rhs(m.getTransposeRhs());
          mm->set_addend(true);
          return success();
        })
        .Case([&](graph::MatmulGeluGradOp m) -> LogicalResult {
          auto *mm = addInstruction(op, op->getOperands()).mutable_matmul();
          mm->set_transpose_lhs(m.getTransposeLhs());
          mm->set_transpose_rhs(m.getTransposeRhs());
          mm->set_gelu_gradient(true);
          return success();
        })
        .Case([&](graph::SoftmaxOp s) -> LogicalResult {
          addInstruction(op, op->getOperands()).mutable_softmax()->set_axis(
              normalizedAxis(s.getInput(), s.getAxis()));
          return success();
        })
        .Case([&](graph::LogSoftmaxOp s) -> LogicalResult {
          auto *sm = addInstruction(op, op->getOperands()).mutable_softmax();
          sm->set_axis(normalizedAxis(s.getInput(), s.getAxis()));
          sm->set_log(true);
          return success();
        })
        .Case([&](graph::LayerNormOp l) -> LogicalResult { return emitLayerNorm(l); })
        .Case([&](graph::LayerNormBackwardOp l) -> LogicalResult {
          auto *ln = addInstruction(op, op->getOperands()).mutable_layer_norm_backward();
          ln->set_axis(int64_t(l.getAxis()));
          ln->set_epsilon(l.getEpsilon().convertToDouble());
          ln->set_rms(l.getRms());
          ln->set_residual(!l.getResidual().empty());
          ln->set_scale_gradient(l.getScaleGradient());
          ln->set_bias_gradient(l.getBiasGradient());
          return success();
        })
        .Case([&](graph::CrossEntropyOp c) -> LogicalResult {
          addInstruction(op, op->getOperands())
              .mutable_cross_entropy()
              ->set_gradient(bool(c.getGradScale()));
          return success();
        })
        .Case([&](graph::BatchNormOp b) -> LogicalResult {
          addInstruction(op, op->getOperands()).mutable_batch_norm()->set_epsilon(
              b.getEpsilon().convertToDouble());
          return success();
        })
        .Case<graph::ReduceSumOp, graph::ReduceMeanOp, graph::ReduceMaxOp,
              graph::ReduceMinOp>([&](Operation *r) { return emitReduce(r); })
        .Case([&](graph::GatherOp g) -> LogicalResult {
          plan::Gather *gather = addInstruction(op, op->getOperands()).mutable_gather();
          gather->set_axis(normalizedAxis(g.getData(), g.getAxis()));
          gather->set_skip_outside(g.getSkipOutside());
          return success();
        })
        .Case([&](graph::Conv2DOp c) -> LogicalResult {
          auto *conv = addInstruction(op, op->getOperands()).mutable_conv2d();
          fillConv(*conv, c.getStrides(), c.getPads(), c.getDilations(), c.getGroups());
          conv->set_relu(c.getRelu());
          conv->set_channels_last(c.getChannelsLast());
          return success();
        })
        .Case([&](graph::MaxPool2DOp p) -> LogicalResult {
          auto *pool = addInstruction(op, op->getOperands()).mutable_pool2d();
          pool->set_max(true);
          fillPool(*pool, p.getKernel(), p.getStrides(), p.getPads(), p.getDilations());
          pool->set_channels_last(p.getChannelsLast());
          return success();
        })
        .Case([&](graph::AvgPool2DOp p) -> LogicalResult {
          auto *pool = addInstruction(op, op->getOperands()).mutable_pool2d();
          fillPool(*pool, p.getKernel(), p.getStrides(), p.getPads(), p.getDilations());
          pool->set_count_include_pad(p.getCountIncludePad());
          pool->set_channels_last(p.getChannelsLast());
          return success();
        })
        .Case([&](graph::Conv2DBackwardInputOp c) -> LogicalResult {
          fillConv(*addInstruction(op, op->getOperands()).mutable_conv2d_backward_input(),
                   c.getStrides(), c.getPads(), c.getDilations(), c.getGroups());
          return success();
        })
        .Case([&](graph::Conv2DBackwardWeightOp c) -> LogicalResult {
          fillConv(*addInstruction(op, op->getOperands()).mutable_conv2d_backward_weight(),
                   c.getStrides(), c.getPads(), c.getDilations(), c.getGroups());
          return success();
        })
        .Case([&](graph::MaxPool2DBackwardOp p) -> LogicalResult {
          auto *pool = addInstruction(op, op->getOperands()).mutable_pool2d_backward();
          pool->set_max(true);
          fillPool(*pool, p.getKernel(), p.getStrides(), p.getPads(), p.getDilations());
          return success();
        })
        .Case([&](graph::AvgPool2DBackwardOp p) -> LogicalResult {
          auto *pool = addInstruction(op, op->getOperands()).mutable_pool2d_backward();
          fillPool(*pool, p.getKernel(), p.getStrides(), p.getPads(), p.getDilations());
          pool->set_count_include_pad(p.getCountIncludePad());
          return success();
        })
        .Case([&](graph::ScatterAddOp s) -> LogicalResult {
          plan::Gather *scatter = addInstruction(op, op->getOperands()).mutable_scatter_add();
          scatter->set_axis(normalizedAxis(s.getOutput(), s.getAxis()));
          scatter->set_skip_outside(s.getSkipOutside());
          return success();
        })
        .Case([&](graph::TransposeOp t) -> LogicalResult {
          auto *tr = addInstruction(op, op->getOperands()).mutable_transpose();
          for (int64_t v : t.getPerm()) tr->add_perm(v);
          return success();
        })
        .Case([&](graph::ConcatOp c) -> LogicalResult {
          addInstruction(op, op->getOperands()).mutable_concat()->set_axis(
              normalizedAxis(c.getResult(), c.getAxis()));
          return success();
        })
        .Case([&](graph::SliceOp s) -> LogicalResult {
          auto *sl = addInstruction(op, op->getOperands()).mutable_slice();
          for (int64_t v : s.getOffsets()) sl->add_offsets(v);
          for (int64_t v : s.getStrides()) sl->add_strides(v);
          return success();
        })
        .Case([&](graph::SplitOp s) -> LogicalResult { return emitSplit(s); })
        .Case<mesh::AllReduceOp, mesh::AllGatherOp, mesh::AllSliceOp, mesh::ReduceScatterOp,
              mesh::AllToAllOp, graph::BucketOp>([&](auto) { return emitCollective(op); })
        .Case([&](graph::RotaryOp r) -> LogicalResult {
          addInstruction(op, op->getOperands()).mutable_rotary()->set_backward(r.getBackward());
          return success();
        })
        .Case([&](graph::AttentionOp a) -> LogicalResult {
          auto *at = addInstruction(op, op->getOperands()).mutable_attention();
          at->set_scale(a.getScale().convertToDouble());
          at->set_causal(a.getCausal());
          at->set_bias(bool(a.getBias()));
          at->set_bshd(a.getBshd());
          at->set_packed(a.getPacked());
          at->set_interleaved(a.getInterleaved());
          return success();
        })
        .Case([&](graph::AttentionBackwardOp a) -> LogicalResult {
          auto *at = addInstruction(op, op->getOperands()).mutable_attention_backward();
          at->set_scale(a.getScale().convertToDouble());
          at->set_causal(a.getCausal());
          at->set_bias(bool(a.getBias()));
          at->set_bshd(a.getBshd());
          at->set_packed(a.getPacked());
          at->set_interleaved(a.getInterleaved());
          return success();
        })
        .Case([&](graph::TopKOp t) -> LogicalResult {
          auto *top = addInstruction(op, op->getOperands()).mutable_top_k();
          top->set_axis(t.getAxis());
          top->set_k(t.getK());
          top->set_largest(t.getLargest());
          return success();
        })
        .Case([&](graph::TriluOp t) -> LogicalResult {
          auto *tr = addInstruction(op, op->getOperands()).mutable_trilu();
          tr->set_upper(t.getUpper());
          tr->set_k(t.getK());
          return success();
        })
        .Default([&](Operation *) -> LogicalResult {
          return op->emitError("no CPU instruction for '")
                 << op->getName() << "' (run dtc-fuse-elementwise first for elementwise ops)";
        });
  }

  static int64_t normalizedAxis(Value v, int64_t axis) {
    int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
    return axis < 0 ? axis + rank : axis;
  }

  /// A large splat constant (the zero blocks of gradients, masks) is not
  /// stored in the plan but filled by a prologue instruction at load: the
  /// value, when a double holds it exactly.
  static std::optional<double> splatFill(graph::ConstantOp c, DenseElementsAttr dense) {
    constexpr int64_t kFillBytes = 4096;
    if (!dense.isSplat() || tensorBytes(c.getResult()) < kFillBytes)
      return std::nullopt;
    Type element = dense.getType().getElementType();
    if (isa<FloatType>(element))
      return dense.getSplatValue<APFloat>().convertToDouble();
    if (element.isInteger(1))
      return dense.getSplatValue<bool>() ? 1.0 : 0.0;
    if (auto integer = dyn_cast<IntegerType>(element)) {
      APInt v = dense.getSplatValue<APInt>();
      int64_t i = integer.isUnsigned() ? int64_t(v.getZExtValue()) : v.getSExtValue();
      if (std::abs(double(i)) < 9007199254740992.0) // 2^53
        return double(i);
    }
    return std::nullopt;
  }

  /// The prologue instruction writing `value` into every element of `c`.
  void emitFill(graph::ConstantOp c, double value) {
    plan::Instruction &inst = *rank_.add_prologue();
    inst.add_outputs(ids_.lookup(c.getResult()));
    plan::ExprNode *node = inst.mutable_elementwise()->add_nodes();
    node->set_op(plan::CONSTANT);
    node->set_value(value);
    plan::TensorType type;
    setType(c.getType(), type);
    node->set_dtype(type.dtype());
    setCost(inst, {0, double(tensorBytes(c.getResult())), graph::OpCost::Elementwise},
            c.getResult());
  }

  static void fillConv(plan::Conv2D &conv, ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                       ArrayRef<int64_t> dilations, int64_t groups) {
    for (int64_t v : strides) conv.add_strides(v);
    for (int64_t v : pads) conv.add_pads(v);
    for (int64_t v : dilations) conv.add_dilations(v);
    conv.set_groups(groups);
  }

  static void fillPool(plan::Pool2D &pool, ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                       ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations) {
    for (int64_t v : kernel) pool.add_kernel(v);
    for (int64_t v : strides) pool.add_strides(v);
    for (int64_t v : pads) pool.add_pads(v);
    for (int64_t v : dilations) pool.add_dilations(v);
  }

  LogicalResult emitLayerNorm(graph::LayerNormOp op) {
    auto input = cast<RankedTensorType>(op.getInput().getType());
    int64_t axis = normalizedAxis(op.getInput(), op.getAxis());
    ArrayRef<int64_t> normalized = input.getShape().drop_front(axis);
    for (Value param : {op.getScale(), op.getBias()})
      if (param && cast<RankedTensorType>(param.getType()).getShape() != normalized)
        return op.emitError("layer_norm: scale and bias must have the normalized shape (")
               << input.getShape().drop_front(axis).size()
               << " trailing dims of the input); broadcast ones are not supported yet";
    auto *ln = addInstruction(op, op->getOperands()).mutable_layer_norm();
    ln->set_axis(axis);
    ln->set_epsilon(op.getEpsilon().convertToDouble());
    ln->set_rms(op.getRms());
    return success();
  }

  LogicalResult emitReduce(Operation *op) {
    auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes");
    bool keepdims = op->getAttrOfType<BoolAttr>("keepdims").getValue();
    auto inputType = cast<RankedTensorType>(op->getOperand(0).getType());
    plan::Instruction &inst = addInstruction(op, op->getOperands());
    if (!keepdims) {
      // The kernel keeps reduced dims as 1; write to a view of the result's
      // bytes with that shape.
      SmallVector<int64_t> kept(inputType.getShape());
      for (int64_t a : axes.asArrayRef())
        kept[a] = 1;
      plan::Buffer &view = *rank_.add_buffers();
      view = rank_.buffers(inst.outputs(0));
      view.clear_sharding(); // the kernel's view; the value's buffer says the split
      view.mutable_type()->clear_shape();
      for (int64_t d : kept)
        view.mutable_type()->add_shape(d);
      inst.set_outputs(0, rank_.buffers_size() - 1);
    }
    plan::Reduce *reduce = inst.mutable_reduce();
    reduce->set_kind(llvm::TypeSwitch<Operation *, plan::ReduceKind>(op)
                         .Case([](graph::ReduceSumOp) { return plan::REDUCE_SUM; })
                         .Case([](graph::ReduceMeanOp) { return plan::REDUCE_MEAN; })
                         .Case([](graph::ReduceMaxOp) { return plan::REDUCE_MAX; })
                         .Default([](Operation *) { return plan::REDUCE_MIN; }));
    for (int64_t a : axes.asArrayRef())
      reduce->add_axes(a);
    return success();
  }

  LogicalResult emitSplit(graph::SplitOp op) {
    int64_t axis = normalizedAxis(op.getInput(), op.getAxis());
    int64_t rank = cast<RankedTensorType>(op.getInput().getType()).getRank();
    int64_t start = 0;
    for (Value piece : op.getResults()) {
      plan::Instruction &inst = *rank_.add_instructions();
      inst.add_inputs(ids_.lookup(op.getInput()));
      inst.add_outputs(ids_.lookup(piece));
      // A piece is read and written once.
      setCost(inst, {0, 2.0 * double(tensorBytes(piece)), graph::OpCost::DataMovement}, piece);
      plan::Slice *slice = inst.mutable_slice();
      for (int64_t d = 0; d < rank; ++d) {
        slice->add_offsets(d == axis ? start : 0);
        slice->add_strides(1);
      }
      start += cast<RankedTensorType>(piece.getType()).getDimSize(axis);
      setGpuKernel(op, inst, cast<OpResult>(piece).getResultNumber());
    }
    return success();
  }

  /// The GPU kernel dtc-kernels-to-ptx made of `op` (of a split, for its
  /// `piece`), if any; its PTX goes into the plan's modules once.
  void setGpuKernel(Operation *op, plan::Instruction &inst, unsigned piece = 0) {
    if (op->hasAttr(attr::kBatched)) { // a later instruction launches it
      inst.mutable_gpu()->set_batched(true);
      return;
    }
    auto name = op->getAttrOfType<SymbolRefAttr>(attr::kKernel);
    if (auto list = op->getAttrOfType<ArrayAttr>(attr::kKernel); list && piece < list.size())
      name = dyn_cast<SymbolRefAttr>(list[piece]);
    auto module = op->getParentOfType<ModuleOp>();
    auto kernel = name && module ? SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(module, name)
                                 : func::FuncOp();
    auto ptx = kernel ? kernel->getAttrOfType<DictionaryAttr>(attr::kPtx) : DictionaryAttr();
    auto entry = kernel ? kernel->getAttrOfType<StringAttr>(attr::kPtxEntry) : StringAttr();
    auto launch = kernel ? kernel->getAttrOfType<DenseI64ArrayAttr>(attr::kLaunch)
                         : DenseI64ArrayAttr();
    if (!ptx || !entry || !launch || launch.size() != 2)
      return;
    plan::GpuKernel &gpu = *inst.mutable_gpu();
    gpu.set_entry(entry.str());
    bool held = llvm::any_of(plan_.gpu_modules(), [&](const plan::GpuModule &m) {
      return m.entry() == gpu.entry();
    });
    if (!held) {
      plan::GpuModule &module = *plan_.add_gpu_modules();
      module.set_entry(gpu.entry());
      for (NamedAttribute chip : ptx) {
        plan::ChipCode &code = *module.add_code();
        code.set_chip(chip.getName().str());
        code.set_ptx(cast<StringAttr>(chip.getValue()).getValue().str());
      }
    }
    gpu.set_grid(launch[0]);
    gpu.set_block(launch[1]);
    // A batch's kernel's arguments are some of the batch's operands.
    auto operands = kernel->getAttrOfType<DenseI64ArrayAttr>(attr::kBatchOperands);
    if (auto params = kernel->getAttrOfType<DenseI64ArrayAttr>(attr::kParams))
      for (int64_t p : params.asArrayRef())
        gpu.add_params(uint32_t(operands ? operands[size_t(p)] : p));
    if (auto batch = op->getAttrOfType<IntegerAttr>(attr::kBatch))
      gpu.set_batch(uint32_t(batch.getInt()));
    gpu.set_zero_outputs(kernel->hasAttr(attr::kZeroOutputs));
    gpu.set_status(kernel->hasAttr(attr::kStatus));
  }

  LogicalResult emitFused(graph::FusedOp fused) {
    plan::Instruction &inst = addInstruction(fused, fused.getInputs());
    plan::Elementwise *expr = inst.mutable_elementwise();
    Block &body = fused.getBody().front();
    llvm::DenseMap<Value, uint32_t> node;
    auto add = [&](plan::ExprOp kind, Type type) -> plan::ExprNode & {
      plan::ExprNode &n = *expr->add_nodes();
      n.set_op(kind);
      n.set_dtype(dtypeOf(cast<RankedTensorType>(type).getElementType()));
      return n;
    };
    for (BlockArgument arg : body.getArguments()) {
      node[arg] = expr->nodes_size();
      add(plan::INPUT, arg.getType()).add_args(arg.getArgNumber());
    }
    for (Operation &op : body) {
      if (auto yield = dyn_cast<graph::YieldOp>(op)) {
        // One output: the last node, a copy added only if it is not (a cast
        // to its own type is the identity). Several: the nodes listed, a
        // copy for an input or for a node yielded twice.
        std::vector<uint32_t> outputs;
        for (Value value : yield.getValues()) {
          uint32_t result = node.lookup(value);
          bool copy = expr->nodes(result).op() == plan::INPUT ||
                      llvm::is_contained(outputs, result) ||
                      (yield.getValues().size() == 1 && result + 1 != (uint32_t)expr->nodes_size());
          if (copy) {
            result = uint32_t(expr->nodes_size());
            add(plan::CAST, value.getType()).add_args(node.lookup(value));
          }
          outputs.push_back(result);
        }
        if (outputs.size() > 1)
          for (uint32_t result : outputs)
            expr->add_outputs(result);
        break;
      }
      if (auto broadcast = dyn_cast<graph::BroadcastOp>(op)) {
        node[broadcast.getResult()] = node.lookup(broadcast.getInput());
        continue;
      }
      if (auto constant = dyn_cast<graph::ConstantOp>(op)) {
        node[constant.getResult()] = expr->nodes_size();
        add(plan::CONSTANT, constant.getType())
            .set_value(splatValue(cast<DenseElementsAttr>(constant.getValue())));
        continue;
      }
      plan::ExprOp kind = exprOpOf(&op);
      if (auto gelu = dyn_cast<graph::GeluOp>(op))
        kind = gelu.getApproximate() == "tanh" ? plan::GELU_TANH : plan::GELU;
      if (kind == plan::EXPR_INVALID)
        return op.emitError("no expression node for '") << op.getName() << "'";
      uint32_t index = expr->nodes_size();
      plan::ExprNode &n = add(kind, op.getResult(0).getType());
      for (Value operand : op.getOperands())
        n.add_args(node.lookup(operand));
      if (auto clip = dyn_cast<graph::ClipOp>(op)) {
        n.set_value(clip.getMin() ? clip.getMin()->convertToDouble() : -INFINITY);
        n.set_value2(clip.getMax() ? clip.getMax()->convertToDouble() : INFINITY);
      }
      node[op.getResult(0)] = index;
    }
    return success();
  }

  func::FuncOp func_;
  plan::Plan &plan_;
  plan::RankProgram &rank_;
  llvm::DenseMap<Value, uint32_t> ids_;
  llvm::StringMap<uint32_t> parameters_; // parameter name -> buffer id
  std::vector<int64_t> meshShape_;
  uint32_t axisOffset_ = 0;
  std::optional<int> accumulateEnd_; // the first once-per-step instruction
  std::optional<int> forwardEnd_;    // a pipeline stage's first backward instruction
};

} // namespace

SmallVector<func::FuncOp> programFunctions(ModuleOp module) {
  SmallVector<std::pair<int64_t, func::FuncOp>> stages;
  for (func::FuncOp f : module.getOps<func::FuncOp>())
    if (auto stage = f->getAttrOfType<IntegerAttr>(attr::kStage))
      stages.push_back({stage.getInt(), f});
  llvm::sort(stages, [](auto &a, auto &b) { return a.first < b.first; });
  SmallVector<func::FuncOp> functions;
  for (auto &[stage, f] : stages)
    functions.push_back(f);
  if (functions.empty())
    if (auto main = module.lookupSymbol<func::FuncOp>("main"))
      functions.push_back(main);
  // Parameter servers' programs follow the workers'.
  SmallVector<std::pair<int64_t, func::FuncOp>> servers;
  for (func::FuncOp f : module.getOps<func::FuncOp>())
    if (auto server = f->getAttrOfType<IntegerAttr>(attr::kServer))
      servers.push_back({server.getInt(), f});
  llvm::sort(servers, [](auto &a, auto &b) { return a.first < b.first; });
  for (auto &[server, f] : servers)
    functions.push_back(f);
  return functions;
}

LogicalResult emitPlan(ModuleOp module, plan::Plan &out) {
  SmallVector<func::FuncOp> programs = programFunctions(module);
  if (programs.empty())
    return module.emitError("no function 'main' to emit");
  func::FuncOp func = programs.front();
  auto pipeline = module->getAttrOfType<DictionaryAttr>(attr::kPipeline);
  out.set_format_version(plan::kPlanFormatVersion);
  out.set_producer(std::string("dtc ") + kDtcVersion);
  if (auto cluster = module->getAttrOfType<StringAttr>(attr::kCluster))
    out.set_cluster(cluster.str()); // what the search costed it on
  if (auto backend = module->getAttrOfType<StringAttr>(attr::kBackend))
    out.set_backend(backend.str());
  if (auto training = func->getAttrOfType<DictionaryAttr>(attr::kTraining)) {
    if (failed(emitTraining(func, training, *out.mutable_training())))
      return failure();
    if (auto tied = module->getAttrOfType<DictionaryAttr>(attr::kTransposedWeights))
      for (NamedAttribute entry : tied) {
        plan::TransposedWeight *t = out.mutable_training()->add_transposed_weights();
        t->set_initializer(entry.getName().str());
        t->set_transpose_of(cast<StringAttr>(entry.getValue()).str());
      }
  }
  // The mesh: a pipeline's stages (axis 0), then each stage's own mesh.
  std::vector<int64_t> meshShape;
  auto addAxis = [&](const std::string &name, int64_t size) {
    plan::MeshAxis *axis = out.mutable_mesh()->add_axes();
    axis->set_name(name);
    axis->set_size(size);
    meshShape.push_back(size);
  };
  if (pipeline) {
    plan::Pipeline *p = out.mutable_training()->mutable_pipeline();
    p->set_stages(uint32_t(programs.size()));
    if (auto replicas = pipeline.getAs<DenseI64ArrayAttr>("replicas"))
      for (int64_t r : replicas.asArrayRef())
        p->add_replicas(uint32_t(r));
    addAxis("pp", plan::stageCoordinates(*p));
    auto schedule = pipeline.getAs<StringAttr>("schedule");
    p->set_schedule(plan::scheduleNamed(schedule ? schedule.str() : "").value_or(plan::ONE_F_ONE_B));
    p->set_axis(0);
    if (auto virtuals = pipeline.getAs<IntegerAttr>("virtual_stages"); virtuals && virtuals.getInt() > 1)
      p->set_virtual_stages(uint32_t(virtuals.getInt()));
  }
  uint32_t axisOffset = uint32_t(meshShape.size());
  if (auto mesh = module.lookupSymbol<mesh::MeshOp>("mesh")) {
    auto names = module->getAttrOfType<ArrayAttr>(attr::kMeshAxisNames);
    for (auto [i, size] : llvm::enumerate(mesh.getShape()))
      addAxis(names && i < names.size() ? cast<StringAttr>(names[i]).str()
                                        : "axis" + std::to_string(i),
              size);
  }
  if (meshShape.empty())
    addAxis("device", 1);
  int64_t devices = 1;
  for (int64_t size : meshShape)
    devices *= size;
  // SPMD: every rank runs program 0; a pipeline's rank runs its stage's;
  // parameter servers, past the mesh, their own.
  auto servers = module->getAttrOfType<DictionaryAttr>(attr::kParameterServers);
  int64_t serverCount = 0;
  if (servers) {
    serverCount = int64_t(programs.size()) - 1;
    plan::ParameterServers *ps = out.mutable_training()->mutable_parameter_servers();
    ps->set_servers(uint32_t(serverCount));
    auto staleness = servers.getAs<IntegerAttr>("staleness");
    auto tensors = servers.getAs<ArrayAttr>("tensors");
    if (!staleness || !tensors)
      return module.emitError("malformed ") << attr::kParameterServers;
    ps->set_staleness(staleness.getInt());
    for (auto entry : tensors.getAsRange<DictionaryAttr>()) {
      plan::ServerTensor *t = ps->add_tensors();
      t->set_weight(entry.getAs<StringAttr>("weight").str());
      t->set_server(uint32_t(entry.getAs<IntegerAttr>("server").getInt()));
      t->set_gradient(uint32_t(entry.getAs<IntegerAttr>("gradient").getInt()));
      t->set_weight_output(uint32_t(entry.getAs<IntegerAttr>("weight_output").getInt()));
      if (auto first = entry.getAs<IntegerAttr>("first_row"))
        t->set_first_row(first.getInt());
      if (auto rows = entry.getAs<IntegerAttr>("rows"))
        t->set_rows(rows.getInt());
      if (auto sparse = entry.getAs<IntegerAttr>("sparse_rows"))
        t->set_sparse_rows(sparse.getInt());
    }
    for (int64_t r = 0; r < devices + serverCount; ++r)
      out.add_program_of_rank(uint32_t(r < devices ? 0 : r - devices + 1));
  } else if (pipeline) { // a stage's ranks, or its replicas', one after another
    for (int64_t r = 0; r < devices; ++r)
      out.add_program_of_rank(uint32_t(
          plan::stageAtCoordinate(out.training().pipeline(), r / (devices / meshShape[0])).stage));
  } else if (module.lookupSymbol<mesh::MeshOp>("mesh")) {
    for (int64_t r = 0; r < devices; ++r)
      out.add_program_of_rank(0);
  }
  if (auto source = module->getAttrOfType<StringAttr>(attr::kSource))
    out.set_model(source.str());
  for (func::FuncOp program : programs) {
    PlanEmitter emitter(program, out, meshShape, axisOffset);
    if (failed(emitter.emit()))
      return failure();
  }
  // Every program names a buffer (or none: another stage's) per output.
  for (plan::RankProgram &program : *out.mutable_ranks())
    while (program.outputs_size() < out.outputs_size())
      program.add_outputs(plan::kNoBuffer);
  auto &notes = *out.mutable_decisions()->mutable_notes();
  if (out.program_of_rank_size() == 0)
    *notes.Add() = "mesh: 1 device (single-rank plan)";
  std::set<std::string> noted;
  for (auto [r, stageProgram] : llvm::enumerate(programs)) {
    func::FuncOp program = stageProgram; // a lambda cannot capture a structured binding
    auto intAttr = [&](StringRef name) {
      auto a = program->getAttrOfType<IntegerAttr>(name);
      return a ? a.getInt() : 0;
    };
    plan::RankSummary *summary = out.mutable_decisions()->add_ranks();
    summary->set_rank(servers    ? (r == 0 ? 0 : devices + int64_t(r) - 1)
                      : pipeline ? plan::firstStageCoordinate(out.training().pipeline(),
                                                              int64_t(r)) *
                                       (devices / meshShape[0])
                                 : 0);
    std::string who = servers ? "server " + std::to_string(r - 1) + ": "
                              : "stage " + std::to_string(r) + ": ";
    summary->set_peak_memory_bytes(intAttr(attr::kArenaBytes));
    summary->set_parameter_bytes(intAttr(attr::kParameterBytes));
    summary->set_weight_bytes(intAttr(attr::kWeightBytes));
    summary->set_weight_copy_bytes(intAttr(attr::kWeightCopyBytes));
    summary->set_optimizer_state_bytes(intAttr(attr::kOptimizerStateBytes));
    summary->set_activation_bytes(intAttr(attr::kActivationBytes));
    // What the passes decided (a stage's notes after the first's, where
    // they differ), then what emission made of it.
    for (std::string &note : notesOf(program))
      if (noted.insert(note).second)
        *notes.Add() = (r > 0 ? who : std::string()) + note;
  }
  for (auto [r, program] : llvm::enumerate(out.ranks())) {
    std::string stage = pipeline  ? "stage " + std::to_string(r) + ": "
                        : servers && r > 0 ? "server " + std::to_string(r - 1) + ": "
                                         : std::string();
    if (int prologue = program.prologue_size())
      *notes.Add() = stage + "prologue: " + std::to_string(prologue) +
                     " instructions depend only on parameters and constants; they run once, "
                     "at load";
    *notes.Add() = stage + "instructions: " + std::to_string(program.instructions_size()) +
                   " over " + std::to_string(program.buffers_size()) + " buffers";
  }

  std::string error;
  if (!plan::validatePlan(out, error))
    return module.emitError("internal error: the compiler wrote an invalid plan: ") << error;
  return success();
}

void registerPlanTranslations() {
  static bool once = [] {
    auto dialects = [](DialectRegistry &registry) {
      registry.insert<graph::GraphDialect, func::FuncDialect, mesh::MeshDialect>();
    };
    auto emit = [](Operation *op, raw_ostream &os, bool text) -> LogicalResult {
      auto module = dyn_cast<ModuleOp>(op);
      if (!module)
        return op->emitError("plan emission needs a module");
      plan::Plan plan;
      if (failed(emitPlan(module, plan)))
        return failure();
      if (text) {
        os << plan::printPlan(plan);
      } else {
        std::string bytes;
        plan.SerializeToString(&bytes);
        os << bytes;
      }
      return success();
    };
    TranslateFromMLIRRegistration(
        "graph-to-plan", "the compiled graph as a plan file (protobuf)",
        [emit](Operation *op, raw_ostream &os) { return emit(op, os, false); }, dialects);
    TranslateFromMLIRRegistration(
        "graph-to-plan-text", "the compiled graph as a plan, printed for people",
        [emit](Operation *op, raw_ostream &os) { return emit(op, os, true); }, dialects);
    return true;
  }();
  (void)once;
}

} // namespace dtc
