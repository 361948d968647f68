//===- PlanLoader.cpp -----------------------------------------------------===//
#include "plan/PlanLoader.h"

#include "plan/CastCopies.h"
#include "plan/Overlap.h"
#include "plan/PipelineSchedule.h"
#include "plan/Ranks.h"
#include "plan/ServerTensors.h"
#include "plan/Sharding.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sys/stat.h>
#include <tuple>

namespace dtc::plan {

using plan::Buffer;
using plan::Instruction;
using plan::Plan;
using plan::TensorType;

namespace {

bool sameType(const TensorType &a, const TensorType &b) {
  return a.dtype() == b.dtype() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(),
                    b.shape().end());
}

/// Whether `part` is one of the equal parts of `whole` cut `parts[d]` ways
/// along each dim d.
bool isPartOf(const TensorType &part, const TensorType &whole, const std::vector<int64_t> &parts) {
  if (part.dtype() != whole.dtype() || part.shape_size() != whole.shape_size())
    return false;
  for (int d = 0; d < part.shape_size(); ++d)
    if (whole.shape(d) % parts[size_t(d)] != 0 ||
        whole.shape(d) / parts[size_t(d)] != part.shape(d))
      return false;
  return true;
}

template <typename Dims> std::string shapeString(const Dims &dims) {
  std::string s = "[";
  for (int64_t d : dims)
    s += (s.size() > 1 ? "," : "") + std::to_string(d);
  return s + "]";
}

std::string axesString(const MeshAxes &axes) {
  std::string s = "{";
  for (int i = 0; i < axes.size(); ++i)
    s += (i ? "," : "") + std::to_string(axes[i]);
  return s + "}";
}

std::string typeString(const TensorType &type) {
  return std::string(dtypeName(type.dtype())) + shapeString(type.shape());
}

/// How many inputs and outputs an instruction kind takes; -1 for "one or
/// more".
struct Arity {
  int minInputs, maxInputs, outputs;
};

Arity arityOf(const Instruction &inst) {
  switch (inst.op_case()) {
  case Instruction::kMatmul: {
    // A bias, a GELU's input, an addend; the biased product before the
    // activation kept, the rhs's rows' sum.
    const plan::MatMul &m = inst.matmul();
    int in = 2 + m.bias() + m.gelu_gradient() + m.addend();
    return Arity{in, in, 1 + (m.bias() ? m.keep_preactivation() : m.bias_gradient())};
  }
  case Instruction::kElementwise:
    // no inputs: an expression of constants; several outputs if it names them
    return {0, 1 << 16, std::max(1, inst.elementwise().outputs_size())};
  case Instruction::kLayerNorm: // and a bias, but not for RMSNorm
    return {2, 3 - inst.layer_norm().rms(), 1};
  case Instruction::kLayerNormBackward: { // and a residual; and weights' partial sums
    const auto &ln = inst.layer_norm_backward();
    return {3 + ln.residual(), 3 + ln.residual(), 3 + ln.scale_gradient() + ln.bias_gradient()};
  }
  case Instruction::kCrossEntropy: { // and the logits' gradient
    int gradient = inst.cross_entropy().gradient();
    return {2 + gradient, 2 + gradient, 2 + gradient};
  }
  case Instruction::kBatchNorm:
    return {5, 5, 1};
  case Instruction::kGather:
    return {2, 2, 1};
  case Instruction::kConv2D:
    return {2, 3, 1};
  case Instruction::kConcat:
    return {1, 1 << 16, 1};
  case Instruction::kConv2DBackwardInput:
  case Instruction::kConv2DBackwardWeight:
  case Instruction::kScatterAdd:
    return {2, 2, 1};
  case Instruction::kPool2DBackward:
    return {1, 2, 1};
  case Instruction::kRotary: // x, cos, sin
    return {3, 3, 1};
  case Instruction::kAttention: // and its bias
    return {3 + inst.attention().bias(), 3 + inst.attention().bias(), 2};
  case Instruction::kAttentionBackward: // packed: one gradient
    return {6 + inst.attention_backward().bias(), 6 + inst.attention_backward().bias(),
            inst.attention_backward().packed() ? 1 : 3};
  case Instruction::kSend:
    return {1, 1, 0};
  case Instruction::kRecv:
    return {0, 0, 1};
  case Instruction::kCollective: { // a bucket: an input and an output a member
    int members = std::max(1, inst.inputs_size());
    return {1, 1 << 16, members};
  }
  default:
    return {1, 1, 1};
  }
}

class PlanValidator {
public:
  explicit PlanValidator(const Plan &plan) : plan_(plan) {}

  bool run(std::string &error) {
    bool ok = checkHeader() && checkTensors();
    for (int r = 0; ok && r < plan_.ranks_size(); ++r)
      ok = checkRank(r) && checkUpdates(r);
    ok = ok && checkStages() && checkTransfers();
    if (!ok)
      error = error_;
    return ok;
  }

private:
  bool fail(const std::string &message) {
    error_ = message;
    return false;
  }

  /// The kinds of parts of a step (runtime/Executor.h: StepPart), each a
  /// stream of sends and receives of its own: the prologue, a pipeline
  /// stage's forward part, the (rest of the) per-micro-batch part, the
  /// once-per-step part. Without micro-batches the whole program is one
  /// part.
  enum Part { kPrologue, kForward, kBackward, kOnce, kParts };

  bool pipelined() const { return plan_.training().pipeline().stages() > 1; }
  int64_t microBatches() const { return std::max<int64_t>(1, plan_.training().micro_batches()); }
  /// An interleaved pipeline's virtual stages; 1 otherwise.
  int64_t virtuals() const {
    return pipelined() ? std::max<int64_t>(1, plan_.training().pipeline().virtual_stages()) : 1;
  }

  /// A program's segments: 0 the prologue; 1 + k virtual stage k's
  /// forward part, 1 + V + k its backward (or per-micro-batch) part; 1 + 2V
  /// the once-per-step part. With V = 1 segment numbers are Parts.
  int segments() const { return int(2 * virtuals() + 2); }
  Part kindOf(int segment) const {
    int64_t v = virtuals();
    return segment == 0 ? kPrologue : segment <= v ? kForward : segment <= 2 * v ? kBackward : kOnce;
  }

  int partOf(const plan::RankProgram &program, int instruction) const {
    bool micro = plan_.training().micro_batches() > 1 || pipelined();
    uint32_t accumulateEnd =
        micro ? program.accumulate_end() : uint32_t(program.instructions_size());
    if (uint32_t(instruction) >= accumulateEnd)
      return segments() - 1;
    if (virtuals() > 1) {
      int k = 0;
      while (k + 1 < program.part_ends_size() && uint32_t(instruction) >= program.part_ends(k))
        ++k;
      return 1 + k;
    }
    uint32_t forwardEnd = pipelined() ? std::min(program.forward_end(), accumulateEnd) : 0;
    return uint32_t(instruction) < forwardEnd ? kForward : kBackward;
  }

  /// " in the forward part", ...: where a transfer runs, for messages ("" for
  /// the whole program of a plan without parts).
  std::string inPart(int segment) const {
    std::string chunk;
    if (virtuals() > 1 && kindOf(segment) != kPrologue && kindOf(segment) != kOnce)
      chunk = " of virtual stage " + std::to_string((segment - 1) % virtuals());
    switch (kindOf(segment)) {
    case kPrologue:
      return " in the prologue";
    case kForward:
      return " in the forward part" + chunk;
    case kBackward:
      return pipelined() ? " in the backward part" + chunk
             : plan_.training().micro_batches() > 1 ? " in the per-micro-batch part"
                                                     : "";
    default:
      return " in the once-per-step part";
    }
  }

  /// The stage of `rank` on the pipeline's axis and its replica there
  /// ({0, 0} without stages).
  StageReplica replicaOf(int64_t rank) const {
    if (!pipelined())
      return {};
    int64_t stride = 1;
    for (size_t a = plan_.training().pipeline().axis() + 1; a < axisSizes_.size(); ++a)
      stride *= axisSizes_[a];
    return stageAtCoordinate(plan_.training().pipeline(),
                             rank / stride % axisSizes_[plan_.training().pipeline().axis()]);
  }
  int64_t stageOf(int64_t rank) const { return replicaOf(rank).stage; }

  /// The micro-batches `rank` runs: a replicated stage's replica, its own.
  std::vector<int64_t> microBatchesOf(int64_t rank) const {
    StageReplica at = replicaOf(rank);
    int64_t replicas = pipelined() ? stageReplicas(plan_.training().pipeline(), at.stage) : 1;
    std::vector<int64_t> runs;
    for (int64_t m = at.replica; m < microBatches(); m += replicas)
      runs.push_back(m);
    return runs;
  }

  /// Sends and receives pair up: within each part, the n-th tensor rank a
  /// sends to rank b is the n-th b receives from a, of the same type, and
  /// no rank sends to itself; and, run in the order each rank runs its parts
  /// (a stage's in its schedule's order), with sends buffered and receives
  /// waiting, every receive meets its send. (Otherwise a rank would wait
  /// forever.)
  bool checkTransfers() {
    // Per program and part, its transfers' instruction indices.
    std::vector<std::vector<std::vector<int>>> transfers(
        size_t(plan_.ranks_size()), std::vector<std::vector<int>>(size_t(segments())));
    bool any = false;
    for (int p = 0; p < plan_.ranks_size(); ++p) {
      const plan::RankProgram &program = plan_.ranks(p);
      for (int i = 0; i < program.prologue_size(); ++i)
        if (program.prologue(i).has_send() || program.prologue(i).has_recv())
          transfers[size_t(p)][kPrologue].push_back(i);
      for (int i = 0; i < program.instructions_size(); ++i)
        if (program.instructions(i).has_send() || program.instructions(i).has_recv())
          transfers[size_t(p)][partOf(program, i)].push_back(i);
      for (const std::vector<int> &list : transfers[size_t(p)])
        any = any || !list.empty();
    }
    if (!any)
      return true;
    auto instruction = [&](const plan::RankProgram &program, int part,
                           int i) -> const Instruction & {
      return part == kPrologue ? program.prologue(i) : program.instructions(i);
    };
    int64_t devices = meshDevices(plan_.mesh());
    // (from, to, kind of part, channel, micro-batch) -> the types sent, and
    // the types received: a message's tag (transferTag), per micro-batch
    // where a replicated stage's peer depends on it (-1: any).
    using Stream = std::tuple<int64_t, int64_t, int, uint32_t, int64_t>;
    std::map<Stream, std::vector<const TensorType *>> sent, received;
    bool replicated = pipelined() && stageCoordinates(plan_.training().pipeline()) >
                                         int64_t(plan_.training().pipeline().stages());
    for (int64_t r = 0; r < devices; ++r) {
      int p = programIndexOfRank(plan_, r);
      const plan::RankProgram &program = plan_.ranks(p);
      const std::vector<int64_t> once{-1};
      std::vector<int64_t> own = replicated ? microBatchesOf(r) : once;
      for (int part = 0; part < segments(); ++part) {
        bool perMicroBatch = part != kPrologue && part != segments() - 1;
        for (int64_t m : perMicroBatch ? own : once)
          for (int i : transfers[size_t(p)][size_t(part)]) {
            const Instruction &inst = instruction(program, part, i);
            const Transfer &transfer = inst.has_send() ? inst.send() : inst.recv();
            if (int64_t(transfer.channel()) >= virtuals() * virtuals())
              return fail("rank " + std::to_string(r) + ", instruction " + std::to_string(i) +
                          ": transfer channel " + std::to_string(transfer.channel()) +
                          " (there are " + std::to_string(virtuals() * virtuals()) + ")");
            int64_t peer = transferPeer(transfer, axisSizes_, r, std::max<int64_t>(m, 0));
            if (peer == r)
              return fail("rank " + std::to_string(r) +
                          (inst.has_send() ? " sends to" : " receives from") + " itself");
            if (inst.has_send())
              sent[{r, peer, kindOf(part), transfer.channel(), m}].push_back(
                  &program.buffers(int(inst.inputs(0))).type());
            else
              received[{peer, r, kindOf(part), transfer.channel(), m}].push_back(
                  &program.buffers(int(inst.outputs(0))).type());
          }
      }
    }
    std::set<Stream> streams;
    for (const auto *side : {&sent, &received})
      for (const auto &entry : *side)
        streams.insert(entry.first);
    for (const Stream &stream : streams) {
      const auto &sends = sent[stream], &receives = received[stream];
      std::string a = std::to_string(std::get<0>(stream)), b = std::to_string(std::get<1>(stream));
      std::string in = inPart(std::get<2>(stream)) +
                       (virtuals() > 1 ? " on channel " + std::to_string(std::get<3>(stream))
                                       : std::string()) +
                       (std::get<4>(stream) >= 0
                            ? " of micro-batch " + std::to_string(std::get<4>(stream))
                            : std::string());
      if (sends.size() != receives.size())
        return fail("rank " + a + " sends " + std::to_string(sends.size()) + " tensors to rank " +
                    b + in + ", which receives " + std::to_string(receives.size()) +
                    " from it");
      for (size_t k = 0; k < sends.size(); ++k)
        if (sends[k]->SerializeAsString() != receives[k]->SerializeAsString())
          return fail("tensor " + std::to_string(k + 1) + " that rank " + a + " sends to rank " +
                      b + in + " is " + typeString(*sends[k]) + ", but rank " + b +
                      " receives " + typeString(*receives[k]));
    }
    return checkTransfersMeet(transfers);
  }

  /// Runs every rank's transfers in the order of its parts (the prologue;
  /// a stage's forward and backward parts in its schedule's order, or each
  /// micro-batch's part; the once-per-step part) with sends buffered and
  /// receives waiting for their send, until every rank is done or all that
  /// are not wait: then the plan would hang, and the message says where.
  bool checkTransfersMeet(const std::vector<std::vector<std::vector<int>>> &transfers) {
    struct Run {
      int part; // a segment
      int64_t microBatch; // -1: once
    };
    // Each stage's (replica's) runs of its parts in one step (one "stage"
    // without a pipeline), by the coordinate on the pipeline's axis.
    int64_t coordinates = pipelined() ? stageCoordinates(plan_.training().pipeline()) : 1;
    std::vector<std::vector<Run>> runs(static_cast<size_t>(coordinates));
    for (int64_t coordinate = 0; coordinate < coordinates; ++coordinate) {
      std::vector<Run> &order = runs[size_t(coordinate)];
      order.push_back({kPrologue, -1});
      if (pipelined()) {
        StageReplica at = stageAtCoordinate(plan_.training().pipeline(), coordinate);
        for (const PipelineTask &task : pipelineOrder(plan_.training().pipeline(), at.stage,
                                                      microBatches(), at.replica))
          order.push_back({int(1 + (task.forward ? 0 : virtuals()) + task.chunk), task.microBatch});
      } else {
        for (int64_t m = 0; m < microBatches(); ++m)
          order.push_back({kBackward, m});
      }
      order.push_back({segments() - 1, -1});
    }
    int64_t devices = meshDevices(plan_.mesh());
    auto runsOf = [&](int64_t r) -> const std::vector<Run> & {
      int64_t stride = 1;
      if (pipelined())
        for (size_t a = plan_.training().pipeline().axis() + 1; a < axisSizes_.size(); ++a)
          stride *= axisSizes_[a];
      return runs[pipelined() ? size_t(r / stride %
                                       axisSizes_[plan_.training().pipeline().axis()])
                              : 0];
    };
    struct Cursor {
      size_t run = 0, transfer = 0;
    };
    std::vector<Cursor> cursors(static_cast<size_t>(devices));
    using Stream = std::tuple<int64_t, int64_t, int, uint32_t>; // (from, to, part kind, channel)
    std::map<Stream, int64_t> inFlight; // sent, not yet received
    std::map<Stream, int64_t> waiting;  // the receiver blocked on the stream
    std::vector<int64_t> ready;
    for (int64_t r = devices; r-- > 0;)
      ready.push_back(r);
    auto current = [&](int64_t r) -> const Instruction * {
      Cursor &c = cursors[size_t(r)];
      int p = programIndexOfRank(plan_, r);
      const std::vector<Run> &order = runsOf(r);
      for (; c.run < order.size(); ++c.run, c.transfer = 0) {
        int part = order[c.run].part;
        const std::vector<int> &list = transfers[size_t(p)][size_t(part)];
        if (c.transfer < list.size())
          return part == kPrologue ? &plan_.ranks(p).prologue(list[c.transfer])
                                   : &plan_.ranks(p).instructions(list[c.transfer]);
      }
      return nullptr;
    };
    while (!ready.empty()) {
      int64_t r = ready.back();
      ready.pop_back();
      for (const Instruction *inst; (inst = current(r));) {
        const Run &run = runsOf(r)[cursors[size_t(r)].run];
        int part = run.part;
        int64_t m = std::max<int64_t>(run.microBatch, 0);
        if (inst->has_send()) {
          Stream stream{r, transferPeer(inst->send(), axisSizes_, r, m), kindOf(part),
                        inst->send().channel()};
          ++inFlight[stream];
          if (auto it = waiting.find(stream); it != waiting.end()) {
            ready.push_back(it->second);
            waiting.erase(it);
          }
        } else {
          Stream stream{transferPeer(inst->recv(), axisSizes_, r, m), r, kindOf(part),
                        inst->recv().channel()};
          if (inFlight[stream] == 0) {
            waiting[stream] = r;
            break;
          }
          --inFlight[stream];
        }
        ++cursors[size_t(r)].transfer;
      }
    }
    if (waiting.empty())
      return true;
    // Where a waiting rank is, for the message.
    auto where = [&](int64_t r) {
      const Cursor &c = cursors[size_t(r)];
      const Run &run = runsOf(r)[c.run];
      int p = programIndexOfRank(plan_, r);
      int i = transfers[size_t(p)][run.part][c.transfer];
      std::string at = run.part == kPrologue ? "prologue instruction " + std::to_string(i)
                                             : "instruction " + std::to_string(i);
      std::string partText = inPart(run.part);
      if (run.microBatch >= 0 && (pipelined() || microBatches() > 1))
        partText += " of micro-batch " + std::to_string(run.microBatch);
      const Instruction &inst =
          run.part == kPrologue ? plan_.ranks(p).prologue(i) : plan_.ranks(p).instructions(i);
      std::string stage = pipelined() ? " (stage " + std::to_string(stageOf(r)) + ")" : "";
      return "rank " + std::to_string(r) + stage + " waits" + partText + " (" + at +
             ") for a tensor from rank " +
             std::to_string(
                 transferPeer(inst.recv(), axisSizes_, r, std::max<int64_t>(run.microBatch, 0)));
    };
    int64_t first = devices;
    for (const auto &entry : waiting)
      first = std::min(first, entry.second);
    std::string schedule =
        pipelined() ? " under the " + scheduleName(plan_.training().pipeline().schedule()) +
                          " schedule with " + std::to_string(microBatches()) + " micro-batches"
                    : "";
    std::string message = "the ranks' sends and receives cannot all meet" + schedule + ": " +
                          where(first);
    const Instruction *blocked = current(first);
    int64_t peer = transferPeer(
        blocked->recv(), axisSizes_, first,
        std::max<int64_t>(runsOf(first)[cursors[size_t(first)].run].microBatch, 0));
    for (const auto &entry : waiting)
      if (entry.second == peer) {
        message += ", and " + where(peer);
        break;
      }
    return fail(message);
  }

  /// A training step's updates: a graph output of a parameter's type,
  /// copied into that parameter.
  bool checkUpdates(int r) {
    const plan::RankProgram &program = plan_.ranks(r);
    bool pipelined = plan_.training().pipeline().stages() > 1 ||
                     plan_.training().has_parameter_servers();
    if (pipelined && plan_.training().updates_size() > 0)
      return fail("training: a pipelined or parameter-server plan lists its updates per "
                  "program, not in training");
    if (!pipelined && program.updates_size() > 0)
      return fail("rank " + std::to_string(r) + ": updates of its own, but the plan has no "
                  "pipeline stages or parameter servers");
    for (const plan::ParameterUpdate &u :
         pipelined ? program.updates() : plan_.training().updates()) {
      std::string where = "training update of output " + std::to_string(u.output());
      if (int64_t(u.output()) >= plan_.outputs_size() ||
          int64_t(u.output()) >= program.outputs_size() ||
          program.outputs(int(u.output())) == kNoBuffer)
        return fail(where + ": no such output");
      if (int64_t(u.buffer()) >= program.buffers_size() ||
          !program.buffers(int(u.buffer())).has_parameter())
        return fail(where + ": buffer " + std::to_string(u.buffer()) + " is not a parameter");
      // Both the rank's value and (for a whole parameter) the graph's output:
      // a sharded parameter's update is sharded too, the graph's type whole.
      const plan::Buffer &parameter = program.buffers(int(u.buffer()));
      const plan::TensorType &to = parameter.type();
      const plan::TensorType &from = program.buffers(int(program.outputs(int(u.output())))).type();
      if (!sameType(from, to) ||
          (parameter.sharding_size() == 0 && !sameType(plan_.outputs(int(u.output())).type(), to)))
        return fail(where + ": its type differs from the parameter's");
    }
    return true;
  }

  bool checkHeader() {
    if (plan_.format_version() != kPlanFormatVersion)
      return fail("plan format version " + std::to_string(plan_.format_version()) +
                  " (written by '" + plan_.producer() + "'); this dtc reads version " +
                  std::to_string(kPlanFormatVersion) +
                  ": recompile the model with this dtc");
    int64_t devices = 1;
    for (const auto &axis : plan_.mesh().axes()) {
      if (axis.size() < 1 || axis.size() > (1 << 20))
        return fail("mesh axis '" + axis.name() + "' has size " +
                    std::to_string(axis.size()));
      devices *= axis.size();
      if (devices > (1 << 20))
        return fail("mesh has more than 2^20 devices");
    }
    axisSizes_ = meshAxisSizes(plan_.mesh());
    if (plan_.program_of_rank_size() == 0) {
      if (devices != plan_.ranks_size())
        return fail("mesh has " + std::to_string(devices) + " devices but the plan has " +
                    std::to_string(plan_.ranks_size()) + " rank programs");
      return true;
    }
    // Parameter servers: ranks past the mesh's, each its own program.
    int64_t servers = 0;
    if (plan_.training().has_parameter_servers()) {
      const plan::ParameterServers &ps = plan_.training().parameter_servers();
      servers = ps.servers();
      if (servers < 1 || servers > (1 << 16) || plan_.ranks_size() != servers + 1)
        return fail("parameter servers: " + std::to_string(servers) + " servers but " +
                    std::to_string(plan_.ranks_size()) + " programs (one for the workers, one "
                    "per server)");
      if (ps.staleness() < 0)
        return fail("parameter servers: staleness " + std::to_string(ps.staleness()));
      for (const plan::ServerTensor &t : ps.tensors()) {
        std::string what = "parameter servers: tensor '" + t.weight() + "'";
        if (t.server() >= uint32_t(servers))
          return fail(what + " on server " + std::to_string(t.server()));
        if (t.gradient() >= uint32_t(plan_.outputs_size()) ||
            t.weight_output() >= uint32_t(plan_.outputs_size()))
          return fail(what + ": no such output");
        const plan::RankProgram &worker = plan_.ranks(0);
        const plan::RankProgram &server = plan_.ranks(int(t.server()) + 1);
        if (int(t.gradient()) >= worker.outputs_size() ||
            worker.outputs(int(t.gradient())) == kNoBuffer ||
            int(t.weight_output()) >= server.outputs_size() ||
            server.outputs(int(t.weight_output())) == kNoBuffer)
          return fail(what + ": the worker does not compute its gradient or the server its "
                      "weight");
        // A position table's gradient may cover only the rows the step
        // reads (the server pads it); a row block, the block's rows.
        const TensorType &gradient = plan_.outputs(int(t.gradient())).type();
        const TensorType &weight = plan_.outputs(int(t.weight_output())).type();
        if (gradient.dtype() != F32)
          return fail(what + ": its gradient is not f32");
        if (t.rows() < 0 || t.first_row() < 0 ||
            (t.rows() > 0 &&
             (gradient.shape_size() == 0 || weight.shape_size() == 0 ||
              t.first_row() + t.rows() > gradient.shape(0) || weight.shape(0) != t.rows() ||
              rowBytes(gradient) != rowBytes(weight))))
          return fail(what + ": rows [" + std::to_string(t.first_row()) + ", " +
                      std::to_string(t.first_row() + t.rows()) + ") do not fit its gradient and "
                      "weight");
      }
    }
    if (plan_.program_of_rank_size() != devices + servers)
      return fail("program_of_rank names the programs of " +
                  std::to_string(plan_.program_of_rank_size()) + " ranks but the mesh has " +
                  std::to_string(devices) + " devices" +
                  (servers ? " and the plan " + std::to_string(servers) + " servers" : ""));
    for (int r = 0; r < plan_.program_of_rank_size(); ++r)
      if (plan_.program_of_rank(r) >= uint32_t(plan_.ranks_size()))
        return fail("program_of_rank: rank " + std::to_string(r) + " runs program " +
                    std::to_string(plan_.program_of_rank(r)) + " but the plan has " +
                    std::to_string(plan_.ranks_size()));
    return true;
  }

  bool checkTensors() {
    for (const auto *list : {&plan_.inputs(), &plan_.outputs()})
      for (const auto &t : *list)
        if (byteSize(t.type()) < 0)
          return fail("graph input/output '" + t.name() + "' has an invalid type");
    return true;
  }

  bool checkRank(int r) {
    const auto &rank = plan_.ranks(r);
    std::string where = "rank " + std::to_string(r);
    if (rank.arena_bytes() < 0)
      return fail(where + ": negative arena size");
    for (int b = 0; b < rank.buffers_size(); ++b)
      if (!checkBuffer(rank, b, where + ", buffer " + std::to_string(b)))
        return false;
    std::vector<CastCopy> copies;
    if (std::string problem; !castCopies(rank, meshAxisSizes(plan_.mesh()), !plan_.has_training(), copies,
                                               problem))
      return fail(where + ": " + problem);
    // Made from the weights where the runtime sets them: not where it
    // rewrites them between steps too.
    if (!copies.empty() &&
        (plan_.training().average_every() > 0 || plan_.training().has_parameter_servers()))
      return fail(where + ": bf16 copies of weights, which " +
                  (plan_.training().has_parameter_servers() ? "parameter servers"
                                                             : "local SGD's averaging") +
                  " would leave behind");
    for (int i = 0; i < rank.prologue_size(); ++i)
      if (!checkInstruction(rank, rank.prologue(i),
                            where + ", prologue instruction " + std::to_string(i)))
        return false;
    for (int i = 0; i < rank.instructions_size(); ++i)
      if (!checkInstruction(rank, rank.instructions(i),
                            where + ", instruction " + std::to_string(i)))
        return false;
    if (std::string problem = batchProblem(rank); !problem.empty())
      return fail(where + ": " + problem);
    if (plan_.training().micro_batches() < 0)
      return fail("training: negative micro-batch count");
    if (rank.accumulate_end() > uint32_t(rank.instructions_size()))
      return fail(where + ": accumulate_end " + std::to_string(rank.accumulate_end()) +
                  " is past its " + std::to_string(rank.instructions_size()) + " instructions");
    if (plan_.training().micro_batches() > 1 && plan_.outputs_size() == 0)
      return fail("training: micro-batches but no loss output");
    // Once-per-step reductions run early must change nothing by it.
    if (rank.overlapped_size() > 0 && plan_.training().micro_batches() <= 1 && !pipelined())
      return fail(where + ": overlapped instructions, but the step has no micro-batches");
    if (std::string problem = overlappedProblem(rank); !problem.empty())
      return fail(where + ": " + problem);
    if (rank.outputs_size() != plan_.outputs_size())
      return fail(where + ": " + std::to_string(rank.outputs_size()) +
                  " output buffers for " + std::to_string(plan_.outputs_size()) +
                  " graph outputs");
    const plan::Pipeline &pipeline = plan_.training().pipeline();
    if (pipeline.stages() > 1) {
      if (pipeline.replicas_size() > 0 && pipeline.replicas_size() != int(pipeline.stages()))
        return fail("training: " + std::to_string(pipeline.stages()) + " pipeline stages, but " +
                    std::to_string(pipeline.replicas_size()) + " replica counts");
      if (pipeline.axis() >= axisSizes_.size() ||
          axisSizes_[pipeline.axis()] != stageCoordinates(pipeline))
        return fail("training: " + std::to_string(pipeline.stages()) +
                    " pipeline stages" +
                    (stageCoordinates(pipeline) > int64_t(pipeline.stages())
                         ? " on " + std::to_string(stageCoordinates(pipeline)) + " replicas"
                         : std::string()) +
                    ", but mesh axis " + std::to_string(pipeline.axis()) +
                    " is not of that size");
      std::vector<int64_t> copies(pipeline.replicas().begin(), pipeline.replicas().end());
      if (std::string problem = replicaProblem(pipeline.schedule(), microBatches(), copies);
          !problem.empty())
        return fail("training: " + problem);
      if (pipeline.schedule() != plan::GPIPE && pipeline.schedule() != plan::ONE_F_ONE_B &&
          pipeline.schedule() != plan::INTERLEAVED)
        return fail("training: unknown pipeline schedule " +
                    std::to_string(int(pipeline.schedule())));
      int64_t v = std::max<int64_t>(1, pipeline.virtual_stages());
      if (std::string problem =
              scheduleProblem(pipeline.schedule(), pipeline.stages(), microBatches(), v);
          !problem.empty())
        return fail("training: " + problem);
      if (v > kMaxVirtualStages)
        return fail("training: " + std::to_string(v) + " virtual stages; at most " +
                    std::to_string(kMaxVirtualStages));
      if (v > 1) {
        if (rank.part_ends_size() != 2 * v)
          return fail(where + ": " + std::to_string(rank.part_ends_size()) + " part ends for " +
                      std::to_string(v) + " virtual stages (2 each)");
        for (int k = 0; k < rank.part_ends_size(); ++k)
          if (rank.part_ends(k) < (k ? rank.part_ends(k - 1) : 0))
            return fail(where + ": part_ends go backwards at " + std::to_string(k));
        if (rank.part_ends(int(v) - 1) != rank.forward_end() ||
            rank.part_ends(int(2 * v) - 1) != rank.accumulate_end())
          return fail(where + ": part_ends do not end at forward_end and accumulate_end");
      } else if (rank.part_ends_size() > 0) {
        return fail(where + ": part ends, but no virtual stages");
      }
      if (rank.forward_end() > rank.accumulate_end())
        return fail(where + ": forward_end " + std::to_string(rank.forward_end()) +
                    " is past accumulate_end " + std::to_string(rank.accumulate_end()));
      if (!checkStash(rank, where))
        return false;
    } else if (rank.forward_end() != 0 || rank.stashes_size() != 0 ||
               rank.part_ends_size() > 0 ||
               std::any_of(rank.buffers().begin(), rank.buffers().end(),
                           [](const Buffer &b) { return b.stash() != 0; })) {
      return fail(where + ": a forward part or a stash, but the plan has no pipeline stages");
    }
    for (int o = 0; o < rank.outputs_size(); ++o) {
      uint32_t id = rank.outputs(o);
      if (id == kNoBuffer &&
          (pipeline.stages() > 1 || plan_.training().has_parameter_servers()))
        continue; // another stage's or server's
      if (id == kNoBuffer)
        return fail(where + ": output " + std::to_string(o) + " ('" + plan_.outputs(o).name() +
                    "') is left to another program, but only a pipeline stage or a parameter "
                    "server may leave an output to another and the plan has neither");
      if (id >= (uint32_t)rank.buffers_size())
        return fail(where + ": output " + std::to_string(o) + " names buffer " +
                    std::to_string(id) + " of " + std::to_string(rank.buffers_size()));
    }
    return true;
  }

  /// A pipeline stage's stash: groups of values one part of a micro-batch
  /// computes for a later part (the runtime moves those, and only those, by
  /// the micro-batch's copy), each group `slots` copies `bytes` apart. The
  /// groups' copies lie in the arena, apart from each other; a stashed
  /// buffer lies in its group's copy 0; and nothing else a micro-batch uses
  /// (nor a parameter, constant or input) shares their bytes: a
  /// micro-batch's stash lives across other micro-batches' parts.
  bool checkStash(const plan::RankProgram &rank, const std::string &where) {
    std::vector<std::pair<int64_t, int64_t>> regions; // each group's copies, [begin, end)
    for (int g = 0; g < rank.stashes_size(); ++g) {
      const plan::Stash &stash = rank.stashes(g);
      int64_t slots = stash.slots(), bytes = stash.bytes();
      if (bytes < 0 || stash.offset() < 0 || slots == 0 ||
          bytes > (rank.arena_bytes() - std::min(stash.offset(), rank.arena_bytes())) / slots)
        return fail(where + ": stash " + std::to_string(g) + " (" + std::to_string(slots) +
                    " x " + std::to_string(bytes) + " bytes at " +
                    std::to_string(stash.offset()) + ") does not fit its arena");
      if (bytes > 0)
        regions.push_back({stash.offset(), stash.offset() + slots * bytes});
    }
    std::sort(regions.begin(), regions.end());
    for (size_t i = 1; i < regions.size(); ++i)
      if (regions[i].first < regions[i - 1].second)
        return fail(where + ": two stash groups' copies share bytes");
    std::vector<bool> persistent(size_t(rank.buffers_size()), false), used = persistent;
    for (const Instruction &inst : rank.prologue())
      for (uint32_t id : inst.outputs())
        persistent[id] = true;
    for (int i = 0; i < int(rank.accumulate_end()); ++i)
      for (const auto *ids : {&rank.instructions(i).inputs(), &rank.instructions(i).outputs()})
        for (uint32_t id : *ids)
          used[id] = true;
    for (int b = 0; b < rank.buffers_size(); ++b) {
      const plan::Buffer &buffer = rank.buffers(b);
      std::string what = where + ", buffer " + std::to_string(b) + " ('" + buffer.name() + "')";
      bool kept = buffer.source_case() != Buffer::SOURCE_NOT_SET || persistent[size_t(b)];
      int64_t begin = buffer.offset(), end = begin + byteSize(buffer.type());
      if (buffer.stash() != 0) {
        if (int64_t(buffer.stash()) > rank.stashes_size())
          return fail(what + ": in stash " + std::to_string(buffer.stash() - 1) + " of " +
                      std::to_string(rank.stashes_size()));
        if (kept)
          return fail(what + ": stashed, but a parameter, constant, input or load-time value; "
                             "only values the step computes are stashed");
        const plan::Stash &stash = rank.stashes(int(buffer.stash()) - 1);
        if (begin < stash.offset() || end > stash.offset() + stash.bytes())
          return fail(what + ": outside its stash group's first copy (" +
                      std::to_string(stash.bytes()) + " bytes at " +
                      std::to_string(stash.offset()) + ")");
        continue;
      }
      if (end == begin || (!kept && !used[size_t(b)]))
        continue;
      auto it = std::upper_bound(regions.begin(), regions.end(), begin,
                                 [](int64_t at, const std::pair<int64_t, int64_t> &region) {
                                   return at < region.second;
                                 });
      if (it != regions.end() && it->first < end)
        return fail(what + ": shares bytes with a stash, which holds micro-batches' values "
                           "from one part to a later one");
    }
    return true;
  }

  /// The copies stash group `g` of `program` needs on stage `stage`: the
  /// most micro-batches between the part writing one of its buffers and the
  /// part reading it last.
  int64_t stashNeeds(const plan::RankProgram &program, int g, int64_t stage) const {
    int64_t v = virtuals();
    std::vector<int> from(size_t(program.buffers_size()), -1), to = from;
    auto turn = [&](int part) { return part < v ? part : int(3 * v - 1) - part; };
    for (int i = 0; i < int(program.accumulate_end()); ++i) {
      int part = partOf(program, i) - 1;
      for (uint32_t id : program.instructions(i).outputs())
        if (from[id] < 0)
          from[id] = part;
      for (uint32_t id : program.instructions(i).inputs())
        if (to[id] < 0 || turn(part) > turn(to[id]))
          to[id] = part;
    }
    const plan::Pipeline &pipeline = plan_.training().pipeline();
    std::set<std::pair<int, int>> pairs;
    for (int b = 0; b < program.buffers_size(); ++b)
      if (int(program.buffers(b).stash()) == g + 1 && from[b] >= 0 && to[b] >= 0 &&
          turn(to[b]) > turn(from[b]))
        pairs.insert({from[b], to[b]});
    int64_t most = 0;
    for (auto [f, t] : pairs)
      most = std::max(most, stashSlots(pipeline.schedule(), pipeline.stages(), stage,
                                       microBatches(), v, f, t, stageReplicaCounts(pipeline)));
    return most;
  }

  /// Whether `program` computes output 0 in its forward part (its last
  /// writer runs there; no writer: an input or parameter, there all along).
  bool computesLoss(const plan::RankProgram &program) const {
    uint32_t loss = program.outputs(0);
    if (loss == kNoBuffer)
      return false;
    for (int i = program.instructions_size(); i-- > 0;)
      for (uint32_t id : program.instructions(i).outputs())
        if (id == loss)
          return partOf(program, i) == int(virtuals()); // the last virtual stage's forward
    return true;
  }

  /// A pipelined plan's stages: each stash holds as many micro-batches as
  /// its stage's schedule keeps in flight, every graph output is some
  /// stage's, and the last stage's ranks compute the loss (output 0) in
  /// their forward part, where the runtime reads it.
  bool checkStages() {
    if (!pipelined())
      return true;
    const plan::Pipeline &pipeline = plan_.training().pipeline();
    if (plan_.outputs_size() == 0)
      return fail("training: pipeline stages but no loss output");
    std::vector<bool> computed(size_t(plan_.outputs_size()), false);
    std::set<std::pair<int, int64_t>> stashChecked; // program, stage
    int64_t devices = meshDevices(plan_.mesh());
    for (int64_t r = 0; r < devices; ++r) {
      int p = programIndexOfRank(plan_, r);
      const plan::RankProgram &program = plan_.ranks(p);
      for (int o = 0; o < program.outputs_size(); ++o)
        computed[size_t(o)] = computed[size_t(o)] || program.outputs(o) != kNoBuffer;
      int64_t stage = stageOf(r);
      if (stage + 1 == int64_t(pipeline.stages()) && !computesLoss(program)) {
        std::string what = "rank " + std::to_string(r) + " (the last stage)";
        return fail(program.outputs(0) == kNoBuffer
                        ? what + " does not compute the loss (output 0)"
                        : what + " computes the loss (output 0) after its forward part, "
                                 "which the loss must end");
      }
      bool unchecked = stashChecked.insert({p, stage}).second;
      for (int g = 0; unchecked && g < program.stashes_size(); ++g)
        if (int64_t needs = stashNeeds(program, g, stage); program.stashes(g).slots() < needs)
          return fail("rank " + std::to_string(r) + " (stage " + std::to_string(stage) +
                      "): stash " + std::to_string(g) + " has " +
                      std::to_string(program.stashes(g).slots()) + " copies, but the " +
                      scheduleName(pipeline.schedule()) + " schedule keeps " +
                      std::to_string(needs) + " of its " + std::to_string(microBatches()) +
                      " micro-batches between the parts that write and read it on that stage");
    }
    for (int o = 0; o < plan_.outputs_size(); ++o)
      if (!computed[size_t(o)])
        return fail("graph output " + std::to_string(o) + " ('" + plan_.outputs(o).name() +
                    "') is computed by no pipeline stage");
    return true;
  }

  bool checkBuffer(const plan::RankProgram &rank, int b, const std::string &where) {
    const Buffer &buffer = rank.buffers(b);
    int64_t bytes = byteSize(buffer.type());
    if (bytes < 0)
      return fail(where + " ('" + buffer.name() + "'): invalid type");
    if (buffer.offset() % dtypeBytes(buffer.type().dtype()) != 0)
      return fail(where + " ('" + buffer.name() + "'): offset " +
                  std::to_string(buffer.offset()) + " is not a multiple of its element size");
    if (buffer.offset() < 0 || buffer.offset() > rank.arena_bytes() ||
        rank.arena_bytes() - buffer.offset() < bytes)
      return fail(where + " ('" + buffer.name() + "'): bytes [" +
                  std::to_string(buffer.offset()) + ", +" + std::to_string(bytes) +
                  ") lie outside the arena of " + std::to_string(rank.arena_bytes()));
    if (buffer.sharding_size() != 0 && !checkSharding(buffer, where))
      return false;
    switch (buffer.source_case()) {
    case Buffer::kConstant:
      if ((int64_t)buffer.constant().size() != bytes)
        return fail(where + " ('" + buffer.name() + "'): constant holds " +
                    std::to_string(buffer.constant().size()) + " bytes, its type needs " +
                    std::to_string(bytes));
      break;
    case Buffer::kInput: {
      if (buffer.input() >= (uint32_t)plan_.inputs_size() ||
          (buffer.sharding_size() == 0 &&
           !sameType(plan_.inputs(buffer.input()).type(), buffer.type())))
        return fail(where + " ('" + buffer.name() + "'): input " +
                    std::to_string(buffer.input()) + " is missing or of another type");
      // The graph's input is the whole tensor; the buffer holds a part.
      const plan::Tensor &input = plan_.inputs(buffer.input());
      std::vector<int64_t> parts = shardParts(buffer, axisSizes_);
      if (!isPartOf(buffer.type(), input.type(), parts))
        return fail(where + " ('" + buffer.name() + "'): input '" + input.name() + "' " +
                    typeString(input.type()) + " cut into " + shapeString(parts) +
                    " parts has no part of the buffer's type " + typeString(buffer.type()));
      break;
    }
    case Buffer::kParameter: {
      const auto &param = buffer.parameter();
      if (param.initializer().empty())
        return fail(where + ": parameter without an initializer name");
      if (param.offset() < 0)
        return fail(where + ": negative parameter offset");
      if (param.slice_size() != 0 && buffer.sharding_size() != 0)
        return fail(where + " ('" + param.initializer() +
                    "'): a sharded parameter's slice is the rank's part, found at load; "
                    "the plan must not give one");
      if (param.slice_size() != 0) {
        if (param.slice_size() != buffer.type().shape_size())
          return fail(where + " ('" + param.initializer() + "'): slice rank " +
                      std::to_string(param.slice_size()) + " differs from the buffer's");
        for (int d = 0; d < param.slice_size(); ++d)
          if (param.slice(d).start() < 0 ||
              param.slice(d).size() != buffer.type().shape(d))
            return fail(where + " ('" + param.initializer() + "'): slice of dim " +
                        std::to_string(d) + " does not match the buffer");
      }
      if (param.has_seeded()) {
        const plan::SeededInit &seeded = param.seeded();
        bool fits = seeded.shape_size() == buffer.type().shape_size();
        for (int d = 0; fits && d < seeded.shape_size(); ++d) {
          int64_t start = param.slice_size() ? param.slice(d).start() : 0;
          fits = seeded.shape(d) >= 0 && start + buffer.type().shape(d) <= seeded.shape(d);
        }
        if (!fits)
          return fail(where + " ('" + param.initializer() +
                      "'): the seeded parameter's shape does not hold the buffer's slice");
        plan::TensorType whole;
        whole.set_dtype(buffer.type().dtype());
        *whole.mutable_shape() = seeded.shape();
        std::vector<int64_t> parts = shardParts(buffer, axisSizes_);
        if (buffer.sharding_size() != 0 && !isPartOf(buffer.type(), whole, parts))
          return fail(where + " ('" + param.initializer() + "'): the seeded parameter " +
                      shapeString(seeded.shape()) + " cut into " + shapeString(parts) +
                      " parts has no part of the buffer's shape " +
                      shapeString(buffer.type().shape()));
        if (buffer.type().dtype() != plan::F32 || !std::isfinite(seeded.mean()) ||
            !std::isfinite(seeded.std()) || seeded.std() < 0)
          return fail(where + " ('" + param.initializer() +
                      "'): a seeded parameter must be f32 with a finite mean and std >= 0");
      }
      if (param.model_shape_size() != 0 && !checkModelShape(buffer, where))
        return false;
      break;
    }
    case Buffer::SOURCE_NOT_SET:
      break;
    }
    return true;
  }

  /// A padded parameter: the model's shape of the buffer's rank, each dim
  /// positive and inside the plan's whole tensor (the buffer's shape times
  /// its parts, or the seeded shape). A row block's whole (a parameter
  /// server's slice) is not in the plan: the reader clips the slice to it.
  bool checkModelShape(const Buffer &buffer, const std::string &where) {
    const plan::ParameterSource &param = buffer.parameter();
    std::string what = where + " ('" + param.initializer() + "'): model shape " +
                       shapeString(param.model_shape());
    if (param.model_shape_size() != buffer.type().shape_size())
      return fail(what + " has rank " + std::to_string(param.model_shape_size()) +
                  ", the buffer " + typeString(buffer.type()) + " rank " +
                  std::to_string(buffer.type().shape_size()));
    std::vector<int64_t> whole;
    if (param.has_seeded()) {
      whole.assign(param.seeded().shape().begin(), param.seeded().shape().end());
    } else if (param.slice_size() == 0) {
      std::vector<int64_t> parts = shardParts(buffer, axisSizes_);
      for (int d = 0; d < buffer.type().shape_size(); ++d)
        whole.push_back(buffer.type().shape(d) * parts[size_t(d)]);
    }
    for (int d = 0; d < param.model_shape_size(); ++d) {
      int64_t dim = param.model_shape(d);
      if (dim <= 0 || (!whole.empty() && dim > whole[size_t(d)]))
        return fail(what + ": dim " + std::to_string(d) + " is " + std::to_string(dim) +
                    (whole.empty() ? std::string(", not positive")
                                   : ", not in [1, " + std::to_string(whole[size_t(d)]) +
                                         "] (the plan's whole tensor " + shapeString(whole) +
                                         ")"));
    }
    return true;
  }

  /// A sharded buffer (a parameter or input, whose part each rank loads,
  /// or any other value, whose split is recorded for people): every dim's
  /// axes in the mesh, no axis cutting two dims (or one twice).
  bool checkSharding(const Buffer &buffer, const std::string &where) {
    std::string what = where + " ('" + buffer.name() + "')";
    if (buffer.sharding_size() != buffer.type().shape_size())
      return fail(what + ": sharding for " + std::to_string(buffer.sharding_size()) +
                  " dims of a rank-" + std::to_string(buffer.type().shape_size()) + " buffer");
    std::vector<bool> used(axisSizes_.size(), false);
    for (int d = 0; d < buffer.sharding_size(); ++d)
      for (uint32_t axis : buffer.sharding(d).mesh_axes()) {
        if (axis >= axisSizes_.size())
          return fail(what + ": dim " + std::to_string(d) + " is sharded over mesh axis " +
                      std::to_string(axis) + " but the mesh has " +
                      std::to_string(axisSizes_.size()) + " axes");
        if (used[axis])
          return fail(what + ": mesh axis " + std::to_string(axis) +
                      " shards the buffer twice");
        used[axis] = true;
      }
    return true;
  }

  /// A collective: its mesh axes, its reduction, and output shape as its
  /// kind makes it from the input's (plan.proto's CollectiveKind).
  bool checkCollective(const plan::RankProgram &rank, const Instruction &inst,
                       const std::string &where) {
    const plan::Collective &c = inst.collective();
    if (c.kind() == plan::COLLECTIVE_INVALID || !plan::CollectiveKind_IsValid(c.kind()))
      return fail(where + ": collective of unknown kind " + std::to_string(c.kind()) +
                  " (a plan from a newer dtc?)");
    std::string what = where + ": " + plan::CollectiveKind_Name(c.kind()) + " over mesh axes " +
                       axesString(c.mesh_axes());
    std::vector<bool> used(axisSizes_.size(), false);
    for (uint32_t axis : c.mesh_axes()) {
      if (axis >= axisSizes_.size())
        return fail(what + ": the mesh has " + std::to_string(axisSizes_.size()) + " axes");
      if (used[axis])
        return fail(what + ": axis " + std::to_string(axis) + " is named twice");
      used[axis] = true;
    }
    if (c.has_coordinates()) {
      const plan::CoordinateRange &range = c.coordinates();
      if (c.mesh_axes_size() != 1 || c.kind() != plan::ALL_REDUCE)
        return fail(what + ": only an all-reduce along one axis may name coordinates");
      if (range.first() < 0 || range.count() < 1 ||
          range.first() + range.count() > axisSizes_[c.mesh_axes(0)])
        return fail(what + ": coordinates [" + std::to_string(range.first()) + ", " +
                    std::to_string(range.first() + range.count()) + ") are not on the axis");
    }
    int64_t group = groupSize(axisSizes_, c);
    what += " (" + std::to_string(group) + " ranks)";
    int members = inst.inputs_size();
    if (members > 1) {
      if (c.kind() != plan::ALL_REDUCE && c.kind() != plan::ALL_GATHER &&
          c.kind() != plan::REDUCE_SCATTER)
        return fail(what + ": a bucket of " + std::to_string(members) +
                    " collectives must be all-reduces, all-gathers or reduce-scatters");
      if (c.has_coordinates())
        return fail(what + ": a stage's replicas' collectives are not bucketed");
    }
    bool memberAxes = members > 1 && c.kind() != plan::ALL_REDUCE;
    if (c.member_axes_size() != (memberAxes ? members : 0))
      return fail(what + ": " + std::to_string(c.member_axes_size()) + " member axes for " +
                  std::to_string(members) + (members == 1 ? " input" : " inputs") +
                  (memberAxes ? " (one a member)" : " (only a bucket of all-gathers or "
                                                    "reduce-scatters has them)"));
    for (int m = 0; m < members; ++m) {
      const TensorType &in = rank.buffers(int(inst.inputs(m))).type();
      if (in.dtype() != rank.buffers(int(inst.inputs(0))).type().dtype())
        return fail(what + ": a bucket's members share one dtype; input " + std::to_string(m) +
                    " is " + typeString(in) + ", input 0 " +
                    typeString(rank.buffers(int(inst.inputs(0))).type()));
      std::string member = members > 1 ? what + ", member " + std::to_string(m) : what;
      if (!checkCollectiveMember(c, memberAxes ? c.member_axes(m) : c.axis(), group, in,
                                 rank.buffers(int(inst.outputs(m))).type(), member))
        return false;
    }
    return true;
  }

  /// One member of a collective: input `in` to output `out` along `axis`.
  bool checkCollectiveMember(const plan::Collective &c, int64_t axis, int64_t group,
                             const TensorType &in, const TensorType &out,
                             const std::string &what) {
    bool reduces = c.kind() == plan::ALL_REDUCE || c.kind() == plan::REDUCE_SCATTER;
    if (reduces && c.reduction() != plan::REDUCE_SUM && c.reduction() != plan::REDUCE_MAX &&
        c.reduction() != plan::REDUCE_MIN)
      return fail(what + ": the reduction must be sum, max or min");
    if (reduces && c.reduction() == plan::REDUCE_SUM && in.dtype() == plan::BOOL)
      return fail(what + ": bools have no sum (max is or, min is and)");
    int rankOf = in.shape_size();
    bool moves = c.kind() != plan::ALL_REDUCE;
    if (moves && (axis < 0 || axis >= rankOf))
      return fail(what + ": dim " + std::to_string(axis) + " is not in the rank-" +
                  std::to_string(rankOf) + " input " + typeString(in));
    if (c.kind() == plan::ALL_TO_ALL && (c.concat_axis() < 0 || c.concat_axis() >= rankOf))
      return fail(what + ": concat dim " + std::to_string(c.concat_axis()) +
                  " is not in the rank-" + std::to_string(rankOf) + " input " +
                  typeString(in));
    bool splits = c.kind() == plan::REDUCE_SCATTER || c.kind() == plan::ALL_TO_ALL ||
                  c.kind() == plan::ALL_SLICE;
    if (splits && in.shape(int(axis)) % group != 0)
      return fail(what + ": dim " + std::to_string(axis) + " of the input " +
                  typeString(in) + " does not split into " + std::to_string(group) +
                  " equal parts");
    // in[d] * grows[d] == out[d] * parts[d].
    std::vector<int64_t> grows(size_t(rankOf), 1), parts(size_t(rankOf), 1);
    const char *rule = "the output's shape must be the input's";
    switch (c.kind()) {
    case plan::ALL_GATHER:
      grows[size_t(axis)] = group;
      rule = "the output's dim `axis` must be the group size times the input's";
      break;
    case plan::REDUCE_SCATTER:
    case plan::ALL_SLICE:
      parts[size_t(axis)] = group;
      rule = "the output's dim `axis` must be the input's divided by the group size";
      break;
    case plan::ALL_TO_ALL:
      parts[size_t(axis)] = group;
      grows[size_t(c.concat_axis())] *= group;
      rule = "dim `axis` is divided by the group size, dim `concat_axis` multiplied by it";
      break;
    default:
      break;
    }
    bool fits = in.dtype() == out.dtype() && out.shape_size() == rankOf;
    for (int d = 0; fits && d < rankOf; ++d)
      fits = __int128(in.shape(d)) * grows[size_t(d)] ==
             __int128(out.shape(d)) * parts[size_t(d)];
    if (!fits)
      return fail(what + (moves ? " along dim " + std::to_string(axis) : std::string()) +
                  ": input " + typeString(in) + ", output " + typeString(out) + ": " + rule +
                  ", the dtype the same");
    return true;
  }

  /// What is wrong with the program's launch batches (GpuKernel.batch):
  /// each a run of consecutive instructions, the last launching them all,
  /// in one part of the step, its parameters among their operands.
  static std::string batchProblem(const plan::RankProgram &rank) {
    if (rank.prologue_size() &&
        std::any_of(rank.prologue().begin(), rank.prologue().end(), [](const Instruction &i) {
          return i.gpu().batch() > 1 || i.gpu().batched();
        }))
      return "a launch batch in the prologue, which runs on the host";
    std::vector<uint32_t> ends{rank.forward_end(), rank.accumulate_end()};
    ends.insert(ends.end(), rank.part_ends().begin(), rank.part_ends().end());
    int pending = 0; // batched instructions waiting for their launch
    for (int i = 0; i < rank.instructions_size(); ++i) {
      const plan::GpuKernel &gpu = rank.instructions(i).gpu();
      std::string at = "instruction " + std::to_string(i);
      if (gpu.batched()) {
        if (gpu.batch() > 1 || !gpu.entry().empty())
          return at + " is launched by a later one's kernel and launches its own";
        ++pending;
        continue;
      }
      if (gpu.batch() <= 1) {
        if (pending)
          return "instruction " + std::to_string(i - pending) +
                 " is launched by a later one's kernel, but no launch follows it";
        continue;
      }
      if (int64_t(gpu.batch()) != pending + 1)
        return at + "'s kernel launches " + std::to_string(gpu.batch()) +
               " instructions, but " + std::to_string(pending) + " before it wait for it";
      int first = i - pending;
      pending = 0;
      for (uint32_t end : ends)
        if (uint32_t(first) < end && end <= uint32_t(i))
          return at + "'s launch batch crosses the end of a part of the step (instruction " +
                 std::to_string(end) + ")";
      int64_t operands = 0;
      for (int j = first; j <= i; ++j)
        operands += rank.instructions(j).inputs_size() + rank.instructions(j).outputs_size();
      for (uint32_t p : gpu.params())
        if (int64_t(p) >= operands)
          return at + "'s batched kernel: parameter " + std::to_string(p) +
                 " is not one of its instructions' " + std::to_string(operands) + " operands";
    }
    if (pending)
      return "the last " + std::to_string(pending) +
             " instructions wait for a launch that never comes";
    return {};
  }

  bool checkInstruction(const plan::RankProgram &rank, const Instruction &inst,
                        const std::string &where) {
    if (inst.op_case() == Instruction::OP_NOT_SET)
      return fail(where + ": unknown operation (a plan from a newer dtc?)");
    if (inst.has_gpu() && !inst.gpu().batched() &&
        std::none_of(plan_.gpu_modules().begin(), plan_.gpu_modules().end(),
                     [&](const GpuModule &m) { return m.entry() == inst.gpu().entry(); }))
      return fail(where + ": GPU kernel '" + inst.gpu().entry() +
                  "' is not among the plan's GPU modules");
    Arity arity = arityOf(inst);
    if (inst.inputs_size() < arity.minInputs || inst.inputs_size() > arity.maxInputs ||
        inst.outputs_size() != arity.outputs)
      return fail(where + ": wrong number of inputs (" + std::to_string(inst.inputs_size()) +
                  ") or outputs (" + std::to_string(inst.outputs_size()) + ")");
    for (const auto *ids : {&inst.inputs(), &inst.outputs()})
      for (uint32_t id : *ids)
        if (id >= (uint32_t)rank.buffers_size())
          return fail(where + ": buffer " + std::to_string(id) + " out of range (" +
                      std::to_string(rank.buffers_size()) + " buffers)");
    if (inst.has_elementwise() && !checkExpression(inst, where))
      return false;
    if (inst.has_collective() && !checkCollective(rank, inst, where))
      return false;
    if (inst.has_send() || inst.has_recv()) {
      const plan::Transfer &transfer = inst.has_send() ? inst.send() : inst.recv();
      int64_t devices = meshDevices(plan_.mesh());
      std::string what = std::string(inst.has_send() ? "send to " : "receive from ") +
                         transferPeerText(transfer, plan_.mesh());
      if (transfer.has_along() ? transferPeer(transfer, axisSizes_, 0) < 0
                               : transfer.peer() < 0 || transfer.peer() >= devices)
        return fail(where + ": " + what + ", but the mesh " +
                    (transfer.has_along() ? "is " + meshString(axisSizes_)
                                          : "has " + rankCount(devices)));
    }
    // Only elementwise kernels (each element read before it is written) and
    // collectives (which copy what they send) may write over their input.
    if (!inst.has_elementwise() && !inst.has_collective())
      for (uint32_t out : inst.outputs())
        for (uint32_t in : inst.inputs()) {
          const plan::Buffer &o = rank.buffers(int(out)), &i = rank.buffers(int(in));
          int64_t oBytes = byteSize(o.type()), iBytes = byteSize(i.type());
          if (oBytes > 0 && iBytes > 0 && o.offset() < i.offset() + iBytes &&
              i.offset() < o.offset() + oBytes)
            return fail(where + ": output buffer " + std::to_string(out) +
                        " shares bytes with input buffer " + std::to_string(in) +
                        "; only elementwise kernels and collectives work in place");
        }
    // A bucket's members run together: one may write over its own input
    // alone.
    if (inst.has_collective())
      for (int m = 0; m < inst.outputs_size(); ++m)
        for (int k = 0; k < inst.inputs_size(); ++k) {
          const plan::Buffer &o = rank.buffers(int(inst.outputs(m)));
          const plan::Buffer &i = rank.buffers(int(inst.inputs(k)));
          int64_t oBytes = byteSize(o.type()), iBytes = byteSize(i.type());
          if (k != m && oBytes > 0 && iBytes > 0 && o.offset() < i.offset() + iBytes &&
              i.offset() < o.offset() + oBytes)
            return fail(where + ": a bucket's output " + std::to_string(m) +
                        " shares bytes with its input " + std::to_string(k));
        }
    // The cost is for dtc simulate, which indexes by its class.
    if (!plan::OpClass_IsValid(inst.cost().op_class()))
      return fail(where + ": unknown cost class " + std::to_string(inst.cost().op_class()) +
                  " (a plan from a newer dtc?)");
    return true;
  }

  bool checkExpression(const Instruction &inst, const std::string &where) {
    const auto &nodes = inst.elementwise().nodes();
    if (nodes.empty())
      return fail(where + ": empty elementwise expression");
    for (int n = 0; n < nodes.size(); ++n) {
      const auto &node = nodes[n];
      if (node.op() == plan::EXPR_INVALID || !plan::ExprOp_IsValid(node.op()))
        return fail(where + ": expression node " + std::to_string(n) + " has no operation");
      if (dtypeBytes(node.dtype()) == 0)
        return fail(where + ": expression node " + std::to_string(n) + " has no type");
      for (uint32_t arg : node.args()) {
        bool ok = node.op() == plan::INPUT ? arg < (uint32_t)inst.inputs_size()
                                           : arg < (uint32_t)n;
        if (!ok)
          return fail(where + ": expression node " + std::to_string(n) +
                      " refers to argument " + std::to_string(arg) +
                      " that does not precede it");
      }
    }
    const auto &outputs = inst.elementwise().outputs();
    if (!outputs.empty() && outputs.size() != inst.outputs_size())
      return fail(where + ": the expression names " + std::to_string(outputs.size()) +
                  " outputs but the instruction has " + std::to_string(inst.outputs_size()));
    for (uint32_t node : outputs)
      if (node >= uint32_t(nodes.size()))
        return fail(where + ": expression output node " + std::to_string(node) +
                    " is past the last node");
    return true;
  }

  const Plan &plan_;
  std::vector<int64_t> axisSizes_; // the mesh's, once checkHeader passed
  std::string error_;
};

} // namespace

bool validatePlan(const Plan &plan, std::string &error) {
  return PlanValidator(plan).run(error);
}

bool loadPlan(const std::string &path, Plan &plan, std::string &error) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    error = path + ": cannot open file";
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    error = path + ": is a directory, not a plan";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty() || !plan.ParseFromString(bytes)) {
    error = path + ": not a dtc plan (protobuf parse failed; is the file truncated?)";
    return false;
  }
  if (!validatePlan(plan, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

} // namespace dtc::plan
