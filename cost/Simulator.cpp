//===- Simulator.cpp -------------------------------------------------------===//
#include "cost/Simulator.h"

#include "cost/CostModel.h"
#include "cost/ServerExchange.h"
#include "plan/DType.h"
#include "plan/PipelineSchedule.h"
#include "plan/Ranks.h"
#include "plan/Replicas.h"
#include "plan/Sharding.h"
#include "plan/Streams.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>

namespace dtc::cost {

namespace {

/// The ranks of `rank`'s group for a collective over `axes`: those whose
/// mesh coordinates equal its own off those axes, in rank order.
std::vector<int64_t> groupOf(const plan::Mesh &mesh, int64_t rank,
                             const google::protobuf::RepeatedField<uint32_t> &axes) {
  int dims = mesh.axes_size();
  std::vector<int64_t> sizes(static_cast<size_t>(dims)), strides(static_cast<size_t>(dims), 1);
  for (int a = dims - 1; a >= 0; --a) {
    sizes[size_t(a)] = mesh.axes(a).size();
    if (a + 1 < dims)
      strides[size_t(a)] = strides[size_t(a) + 1] * sizes[size_t(a) + 1];
  }
  int64_t base = rank;
  for (uint32_t a : axes)
    if (a < uint32_t(dims))
      base -= (rank / strides[a] % sizes[a]) * strides[a];
  std::vector<int64_t> members{base};
  for (uint32_t a : axes) {
    if (a >= uint32_t(dims))
      continue;
    std::vector<int64_t> more;
    for (int64_t m : members)
      for (int64_t i = 0; i < sizes[a]; ++i)
        more.push_back(m + i * strides[a]);
    members = std::move(more);
  }
  std::sort(members.begin(), members.end());
  return members;
}

/// The ranks of `rank`'s group for a collective over a range of one
/// axis' coordinates (Collective.coordinates): the same place off the
/// axis, each coordinate of the range.
std::vector<int64_t> rangeGroupOf(const plan::Mesh &mesh, int64_t rank, uint32_t axis,
                                  const plan::CoordinateRange &range) {
  int64_t stride = 1;
  for (int a = mesh.axes_size() - 1; a > int(axis); --a)
    stride *= mesh.axes(a).size();
  int64_t own = rank / stride % mesh.axes(int(axis)).size();
  std::vector<int64_t> members;
  for (int64_t c = range.first(); c < range.first() + range.count(); ++c)
    members.push_back(rank + (c - own) * stride);
  return members;
}

/// One rank's step: kernels on the compute stream, collectives and
/// transfers on the communication stream (or inline on the compute stream
/// where the device has none), each starting when its stream is free and
/// its inputs are ready. A collective may have to wait for the other ranks of
/// its group (`advance` stops there).
class RankState {
public:
  RankState(const plan::Plan &plan, const plan::RankProgram &program, const Cluster &cluster,
            int rank)
      : plan_(plan), program_(program), cluster_(cluster), rank_(rank),
        ready_(size_t(program.buffers_size()), 0.0) {
    time.memoryPeakBytes = program.arena_bytes();
    int64_t count = program.instructions_size();
    microBatches_ = std::max<int64_t>(1, plan.training().micro_batches());
    accumulateEnd_ = microBatches_ > 1 ? std::min<int64_t>(program.accumulate_end(), count) : 0;
    length_ = microBatches_ * accumulateEnd_ + (count - accumulateEnd_);
    // The once-per-step reductions that overlap the last micro-batch run
    // right after the instruction that lets them start (as the runtime
    // does), and not again in the once-per-step part. Without a
    // communication stream a pipeline stage's wait for the step's end
    // (runtime/Executor.cpp on CPUs, Megatron-LM's of 2021): inline, they
    // would only hold up the sends the stages before it wait for.
    std::vector<std::vector<int>> overlappedAfter(static_cast<size_t>(count));
    overlapped_.assign(static_cast<size_t>(count), false);
    bool deferred = !cluster.device.communicationStream && plan.training().pipeline().stages() > 1;
    for (const plan::OverlappedInstruction &o : program.overlapped())
      if (!deferred && o.after() < uint32_t(count) && o.instruction() < uint32_t(count)) {
        overlappedAfter[o.after()].push_back(int(o.instruction()));
        overlapped_[o.instruction()] = true;
      }
    auto runPart = [&](int64_t begin, int64_t end, bool lastMicroBatch) {
      for (int64_t i = begin; i < end; ++i) {
        if (!overlapped_[size_t(i)])
          sequence_.push_back(int(i));
        if (lastMicroBatch)
          for (int o : overlappedAfter[size_t(i)])
            sequence_.push_back(o);
      }
    };
    const plan::Pipeline &pipeline = plan.training().pipeline();
    if (pipeline.stages() <= 1 && microBatches_ > 1 && program.overlapped_size() > 0) {
      for (int64_t m = 0; m < microBatches_; ++m)
        runPart(0, accumulateEnd_, m + 1 == microBatches_);
      runPart(accumulateEnd_, count, false);
      length_ = int64_t(sequence_.size());
    }
    // A pipeline stage runs its micro-batches' forward and backward parts
    // in its schedule's order, then the once-per-step part.
    if (pipeline.stages() > 1) {
      std::vector<int64_t> sizes = plan::meshAxisSizes(plan.mesh());
      int64_t stride = 1;
      for (size_t a = pipeline.axis() + 1; a < sizes.size(); ++a)
        stride *= sizes[a];
      plan::StageReplica at =
          plan::stageAtCoordinate(pipeline, rank / stride % sizes[pipeline.axis()]);
      int64_t replicas = plan::stageReplicas(pipeline, at.stage);
      int64_t end = std::min<int64_t>(program.accumulate_end(), count);
      // Where each part ends: an interleaved stage's forward and backward
      // per virtual stage, or one forward and one backward.
      int64_t virtuals = std::max<int64_t>(1, pipeline.virtual_stages());
      std::vector<int64_t> ends;
      for (uint32_t e : program.part_ends())
        ends.push_back(std::min<int64_t>(e, end));
      if (virtuals == 1)
        ends = {std::min<int64_t>(program.forward_end(), end), end};
      for (const plan::PipelineTask &task :
           plan::pipelineOrder(pipeline, at.stage, microBatches_, at.replica)) {
        size_t part = size_t((task.forward ? 0 : virtuals) + task.chunk);
        size_t from = sequence_.size();
        runPart(part ? ends[part - 1] : 0, ends[part], task.microBatch + replicas >= microBatches_);
        microBatchOf_.resize(sequence_.size(), 0);
        std::fill(microBatchOf_.begin() + int64_t(from), microBatchOf_.end(), task.microBatch);
      }
      runPart(end, count, false);
      length_ = int64_t(sequence_.size());
    }
    if (!cluster.device.caches.empty()) {
      // A step's bytes; and, steps repeating, what the last step sent away
      // last is still away at this one's start.
      for (const plan::Instruction &inst : program.instructions()) {
        double own = footprint(inst);
        stepBytes_ += own;
        touch(inst, own);
      }
      for (auto at = lastTouch_.begin(); at != lastTouch_.end();)
        at = at->second == kSentAway ? std::next(at) : lastTouch_.erase(at);
      touched_ = 0;
    }
    // Steps repeat: the first meeting comes after the last one's tail.
    if (cluster.device.jitter > 0)
      for (int i = program.instructions_size(); i-- > 0;) {
        const plan::Instruction &inst = program.instructions(i);
        if (plan::communicates(inst))
          break;
        sinceMeeting_ += instructionSeconds(inst.cost(), cluster.device, -1,
                                            !inst.gpu().batched());
      }
  }

  bool done() const { return pc_ >= length_; }
  /// The instruction it stands at, by index in the program.
  int pc() const { return instructionAt(pc_); }
  /// The instruction it stands at.
  const plan::Instruction &current() const { return program_.instructions(pc()); }
  /// The rank a send or receive of this rank goes to.
  int64_t peerOf(const plan::Transfer &transfer) const {
    int64_t m = size_t(pc_) < microBatchOf_.size() ? microBatchOf_[size_t(pc_)] : 0;
    return plan::transferPeer(transfer, plan::meshAxisSizes(plan_.mesh()), rank_, m);
  }
  /// Whether the current instruction needs the other ranks of its group.
  bool atCollective() const { return plan::communicates(current()); }
  /// The ranks the current instruction waits for: its collective's group,
  /// or the sender and the receiver of a transfer (for messages).
  std::vector<int64_t> partners() const {
    const plan::Instruction &inst = current();
    if (inst.has_send())
      return {rank_, peerOf(inst.send())};
    if (inst.has_recv())
      return {peerOf(inst.recv()), rank_};
    if (inst.collective().has_coordinates())
      return rangeGroupOf(plan_.mesh(), rank_, inst.collective().mesh_axes(0),
                          inst.collective().coordinates());
    return groupOf(plan_.mesh(), rank_, inst.collective().mesh_axes());
  }
  /// Names the current instruction's meeting, the same on every rank that
  /// takes part ({mesh axes as bits, the group's first rank, 0} for a
  /// collective, {-1, sender, receiver} for a transfer), and how many ranks
  /// it joins.
  std::array<int64_t, 3> meeting(int64_t &size) const {
    const plan::Instruction &inst = current();
    size = 2;
    if (inst.has_send())
      return {-1, rank_, peerOf(inst.send())};
    if (inst.has_recv())
      return {-1, peerOf(inst.recv()), rank_};
    const plan::Mesh &mesh = plan_.mesh();
    if (inst.collective().has_coordinates()) { // a replicated stage's replicas
      std::vector<int64_t> group = partners();
      size = int64_t(group.size());
      return {int64_t(1) << 40, group.front(), 1};
    }
    int64_t bits = 0, base = rank_, stride = 1;
    size = 1;
    for (int a = mesh.axes_size() - 1; a >= 0; --a) {
      int64_t n = mesh.axes(a).size();
      for (uint32_t axis : inst.collective().mesh_axes())
        if (axis == uint32_t(a)) {
          bits |= int64_t(1) << a;
          base -= (rank_ / stride % n) * stride;
          size *= n;
        }
      stride *= n;
    }
    return {bits, base, 0};
  }
  /// Whether this rank has reported reaching its current instruction.
  bool arrived = false;
  /// When the current instruction could start: its stream free, its inputs
  /// ready.
  double earliestStart() const {
    const plan::Instruction &inst = current();
    double start = streamFree_[streamOf(pc())];
    for (uint32_t in : inst.inputs())
      if (in < ready_.size())
        start = std::max(start, ready_[in]);
    return start;
  }
  /// Runs the current instruction from `start` (its earliest, or later when
  /// a collective waited for its group).
  void run(double start, std::vector<Event> *events) {
    const plan::Instruction &inst = current();
    bool comm = atCollective();
    double own = cluster_.device.caches.empty() ? 0 : footprint(inst);
    double seconds =
        inst.has_send() || inst.has_recv() ? transferSeconds(inst)
        : comm ? collectiveInstructionSeconds(plan_.mesh(), inst, cluster_,
                                              bufferType(inst.inputs()), bufferType(inst.outputs()))
               : instructionSeconds(inst.cost(), cluster_.device, cachedStreamSeconds(inst, own),
                                    !inst.gpu().batched());
    touch(inst, own);
    if (comm) { // the group starts when its slowest rank arrives
      int64_t ranks = 0;
      meeting(ranks);
      seconds += cluster_.device.jitter * expectedMaximum(ranks) * sinceMeeting_;
      sinceMeeting_ = 0;
    } else {
      sinceMeeting_ += seconds;
    }
    double end = start + seconds;
    int on = streamOf(pc());
    if (on == 0) // what the compute stream waited for
      time.idle += start - streamFree_[0];
    if (comm) {
      time.communication += seconds;
    } else {
      time.compute += seconds;
      time.byClass[inst.cost().op_class()] += seconds; // slot 0: free ops, 0 s
      flops += inst.cost().flops();
    }
    streamFree_[on] = end;
    for (uint32_t out : inst.outputs())
      if (out < ready_.size())
        ready_[out] = end;
    if (events)
      events->push_back({rank_, pc(), comm, on, start, end});
    ++pc_;
    arrived = false;
  }
  /// Runs instructions until the end or a collective (which the caller
  /// joins with its group).
  void advance(std::vector<Event> *events) {
    while (!done() && !atCollective())
      run(earliestStart(), events);
  }
  /// The step's end: compute waits for the last collectives.
  void finish() {
    time.end = std::max({streamFree_[0], streamFree_[1], streamFree_[2], streamFree_[3]});
    time.idle += time.end - streamFree_[0];
  }

  RankTime time;
  double flops = 0;

private:
  /// The type of the first of `ids`, or null.
  const plan::TensorType *
  bufferType(const google::protobuf::RepeatedField<uint32_t> &ids) const {
    if (ids.empty() || ids[0] >= uint32_t(program_.buffers_size()))
      return nullptr;
    return &program_.buffers(int(ids[0])).type();
  }
  double bufferBytes(uint32_t id) const {
    if (id >= uint32_t(program_.buffers_size()))
      return 0;
    return double(std::max<int64_t>(0, plan::byteSize(program_.buffers(int(id)).type())));
  }
  /// The bytes an instruction reads and writes (a view touches none).
  double footprint(const plan::Instruction &inst) const {
    if (inst.cost().op_class() == plan::OP_CLASS_INVALID && !inst.has_collective() &&
        !inst.has_send() && !inst.has_recv())
      return 0;
    double bytes = 0;
    for (uint32_t in : inst.inputs())
      bytes += bufferBytes(in);
    for (uint32_t out : inst.outputs())
      bytes += bufferBytes(out);
    return bytes;
  }
  /// A kernel's bytes at the bandwidth of the cache level each operand is
  /// in: the smallest that holds what was touched since the operand's
  /// bytes were (an LRU stack distance, counted in bytes moved: an upper
  /// bound), this kernel's own bytes included. Outputs are written where
  /// the kernel's bytes fit. Bytes not touched yet this step were touched
  /// a step ago (parameters, optimizer state, inputs). Scaled to the bytes
  /// the op's cost counts; -1 without cache levels. `own` is footprint(inst).
  double cachedStreamSeconds(const plan::Instruction &inst, double own) const {
    const Device &device = cluster_.device;
    if (own <= 0)
      return -1;
    double seconds = 0;
    for (uint32_t in : inst.inputs()) {
      if (in >= uint32_t(program_.buffers_size()))
        continue;
      auto last = lastTouch_.find(program_.buffers(int(in)).offset());
      double since = last != lastTouch_.end() ? touched_ - last->second : stepBytes_;
      seconds += bufferBytes(in) / (sentAway(in) ? device.memoryBandwidth
                                                 : device.bandwidthAfter(since + own));
    }
    for (uint32_t out : inst.outputs())
      seconds += bufferBytes(out) /
                 (sentAway(out) ? device.memoryBandwidth : device.bandwidthAfter(own));
    return seconds * double(inst.cost().bytes()) / own;
  }
  /// Whether the buffer's bytes were last sent to a rank on this machine:
  /// its core read them into its own caches, and this core reads or writes
  /// them again at memory's pace (a fill after a send was measurably slower
  /// than one without; dtc's ran at memory bandwidth: docs/cluster.md).
  bool sentAway(uint32_t id) const {
    if (id >= uint32_t(program_.buffers_size()))
      return false;
    auto last = lastTouch_.find(program_.buffers(int(id)).offset());
    return last != lastTouch_.end() && last->second == kSentAway;
  }
  /// Marks the instruction's buffers (by arena offset: views share their
  /// operand's bytes) as touched now; a view touches nothing.
  void touch(const plan::Instruction &inst, double own) {
    if (own <= 0)
      return;
    touched_ += own;
    for (const auto *ids : {&inst.inputs(), &inst.outputs()})
      for (uint32_t id : *ids)
        if (id < uint32_t(program_.buffers_size()))
          lastTouch_[program_.buffers(int(id)).offset()] = touched_;
    if (inst.has_send() && onThisNode(peerOf(inst.send())) && inst.inputs_size() > 0 &&
        inst.inputs(0) < uint32_t(program_.buffers_size()))
      lastTouch_[program_.buffers(int(inst.inputs(0))).offset()] = kSentAway;
  }
  /// Whether `peer` shares this rank's node.
  bool onThisNode(int64_t peer) const {
    int64_t perNode = std::max<int64_t>(1, cluster_.devicesPerNode);
    return rank_ / perNode == peer / perNode;
  }

  /// A send or receive: its tensor over the link between the two ranks.
  /// Where the device has communication streams a send is staged, as the
  /// CUDA runtime's are (runtime/cuda/NcclTransfers.cpp): its stream holds
  /// only the copy into the staging buffer, and the link's time is the
  /// receive's.
  double transferSeconds(const plan::Instruction &inst) const {
    bool send = inst.has_send();
    int64_t peer = send ? peerOf(inst.send()) : peerOf(inst.recv());
    double bytes = bufferBytes(send ? inst.inputs(0) : inst.outputs(0));
    const Device &device = cluster_.device;
    if (send && device.communicationStream && device.memoryBandwidth > 0)
      return 2 * bytes /
             (device.memoryBandwidth * (device.memoryEfficiency > 0 ? device.memoryEfficiency : 1));
    const Link &link = onThisNode(peer) ? cluster_.intraNode : cluster_.interNode;
    return collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, bytes, link);
  }

  /// Where an instruction runs: on the compute stream (0), or, where the
  /// device has communication streams, on the one plan/Streams.h gives it.
  int streamOf(int instruction) const {
    if (!cluster_.device.communicationStream)
      return 0;
    const plan::Instruction &inst = program_.instructions(instruction);
    return int(plan::streamOf(inst, overlapped_[size_t(instruction)]));
  }

  const plan::Plan &plan_;
  const plan::RankProgram &program_;
  const Cluster &cluster_;
  int rank_;
  /// A step's `n`-th instruction run: a micro-batched step runs its first
  /// accumulateEnd_ instructions once per micro-batch, then the rest.
  int instructionAt(int64_t n) const {
    if (!sequence_.empty())
      return sequence_[size_t(n)];
    int64_t repeated = microBatches_ * accumulateEnd_;
    return int(n < repeated ? n % accumulateEnd_ : accumulateEnd_ + (n - repeated));
  }
  int64_t pc_ = 0;
  int64_t microBatches_ = 1, accumulateEnd_ = 0, length_ = 0;
  std::vector<int> sequence_; // a pipeline stage's instructions, in its schedule's order
  std::vector<int64_t> microBatchOf_; // the micro-batch of each of sequence_'s (a stage's)
  std::vector<double> ready_; // when each buffer's value is ready; inputs at 0
  double streamFree_[plan::kStreams] = {0, 0, 0, 0};
  std::vector<bool> overlapped_; // per instruction: in RankProgram.overlapped
  double sinceMeeting_ = 0; // compute seconds since this rank last met others
  // Cache levels: bytes moved so far this step, when (in those bytes) each
  // arena offset was last touched, and the bytes a whole step moves.
  double touched_ = 0, stepBytes_ = 0;
  /// lastTouch_'s mark for bytes sent to a rank on this node (sentAway).
  static constexpr double kSentAway = -1;
  std::unordered_map<uint64_t, double> lastTouch_;
};

/// A rank's program; null when the plan lists none for it.
const plan::RankProgram *programOf(const plan::Plan &plan, int64_t rank) {
  int program = plan::programIndexOfRank(plan, rank);
  return program < plan.ranks_size() ? &plan.ranks(program) : nullptr;
}

/// The timeline a rank shares with the others like it: its program and,
/// in a pipeline, its coordinate on the pipeline axis (a replicated
/// stage's replicas run one program, each on its own timeline: a stage
/// sends each micro-batch to the replica of the next stage that takes it).
std::pair<int, int64_t> timelineOf(const plan::Plan &plan, int64_t rank) {
  const plan::Pipeline &pipeline = plan.training().pipeline();
  int64_t coordinate = 0;
  if (pipeline.stages() > 1) {
    std::vector<int64_t> sizes = plan::meshAxisSizes(plan.mesh());
    if (pipeline.axis() < sizes.size()) {
      int64_t stride = 1;
      for (size_t a = pipeline.axis() + 1; a < sizes.size(); ++a)
        stride *= sizes[a];
      coordinate = rank / stride % sizes[pipeline.axis()];
    }
  }
  return {plan::programIndexOfRank(plan, rank), coordinate};
}

/// Ranks running different programs (pipeline stages, unequal shares),
/// each on its own timeline, joined at collectives: the n-th collective a
/// rank makes on a group starts when every rank of the group has reached
/// its own n-th there. A collective some rank never reaches is an error.
///
/// `simulated` lists the ranks simulated (all, or one per program: see
/// simulate()); the others are taken to run as the simulated rank of their
/// program does. With one per program, a transfer to a rank not simulated,
/// or a collective whose group mixes programs, makes the result
/// kNotSymmetric (then all ranks are simulated instead).
constexpr const char *kNotSymmetric = "(not symmetric)";

std::string simulateJointly(const plan::Plan &plan, const Cluster &cluster, int64_t devices,
                            const std::vector<int64_t> &simulated, Simulation &sim,
                            bool keepEvents) {
  std::vector<RankState> ranks;
  std::vector<int> slotOf(size_t(devices), -1);
  for (int64_t r : simulated) {
    slotOf[size_t(r)] = int(ranks.size());
    ranks.emplace_back(plan, *programOf(plan, r), cluster, int(r));
  }
  bool everyRank = int64_t(simulated.size()) == devices;
  std::vector<Event> *events = keepEvents ? &sim.events : nullptr;
  // Per simulated rank, the meetings it has had so far on each group or pair.
  std::vector<std::map<std::array<int64_t, 3>, int64_t>> made(ranks.size());
  // Per simulated rank and instruction, the simulated members of its
  // collective's group (-1: not yet counted).
  std::vector<std::vector<int64_t>> groupSize;
  for (int64_t r : simulated)
    groupSize.emplace_back(size_t(programOf(plan, r)->instructions_size()), -1);
  // A group's n-th meeting: how many have reached it, the latest arrival,
  // and how many have yet to leave it (then it is forgotten).
  struct Meeting {
    int64_t arrived = 0, leaving = 0;
    double start = 0;
  };
  std::map<std::array<int64_t, 4>, Meeting> meetings;
  // Sends are buffered (the runtime's are): a send starts when its rank
  // gets to it, and the pair's n-th receive starts no earlier than the n-th
  // send did. When each send from (sender, receiver) on a channel started,
  // in order. (One direction between two stages carries one part of the
  // step, and an interleaved pipeline's channel names the two virtual
  // stages: the key names the runtime's message stream.)
  using Stream = std::tuple<int64_t, int64_t, uint32_t>;
  std::map<Stream, std::vector<double>> sent;
  std::map<Stream, size_t> received;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t slot = 0; slot < ranks.size(); ++slot) {
      RankState &rank = ranks[slot];
      int64_t r = simulated[slot];
      while (true) {
        rank.advance(events);
        if (rank.done())
          break;
        if (const plan::Instruction &inst = rank.current(); inst.has_send() || inst.has_recv()) {
          int64_t peer = inst.has_send() ? rank.peerOf(inst.send()) : rank.peerOf(inst.recv());
          if (!everyRank && (peer < 0 || peer >= devices || slotOf[size_t(peer)] < 0))
            return kNotSymmetric;
          if (inst.has_send()) {
            double start = rank.earliestStart();
            sent[{r, rank.peerOf(inst.send()), inst.send().channel()}].push_back(start);
            rank.run(start, events);
          } else {
            Stream pair{rank.peerOf(inst.recv()), r, inst.recv().channel()};
            const std::vector<double> &starts = sent[pair];
            size_t &n = received[pair];
            if (n >= starts.size())
              break; // the send has not been reached yet
            rank.run(std::max(rank.earliestStart(), starts[n++]), events);
          }
          progress = true;
          continue;
        }
        int64_t size = 0;
        std::array<int64_t, 3> where = rank.meeting(size);
        if (!everyRank) { // the group's simulated members meet for all of it
          // (the same each time the rank makes this instruction)
          int64_t &members = groupSize[slot][size_t(rank.pc())];
          if (members < 0) {
            int program = plan::programIndexOfRank(plan, r);
            std::pair<int, int64_t> own = timelineOf(plan, r);
            members = 0;
            for (int64_t m : rank.partners()) {
              if (m < 0 || m >= devices || plan::programIndexOfRank(plan, m) != program ||
                  (slotOf[size_t(m)] < 0 && timelineOf(plan, m) != own))
                return kNotSymmetric;
              members += slotOf[size_t(m)] >= 0;
            }
          }
          size = members;
        }
        int64_t &count = made[slot][where];
        auto it = meetings.try_emplace({where[0], where[1], where[2], count}).first;
        Meeting &meeting = it->second;
        if (!rank.arrived) {
          rank.arrived = true;
          ++meeting.arrived;
          meeting.start = std::max(meeting.start, rank.earliestStart());
        }
        if (meeting.arrived < size)
          break; // the others have not reached it yet
        rank.run(meeting.start, events);
        ++count;
        if (++meeting.leaving == size)
          meetings.erase(it);
        progress = true;
      }
    }
  }
  // A send no receive ever met (the sender did not wait for it).
  for (const auto &[pair, starts] : sent)
    if (received[pair] < starts.size())
      return "rank " + std::to_string(std::get<0>(pair)) + " sends " +
             std::to_string(starts.size()) + " tensors to rank " +
             std::to_string(std::get<1>(pair)) + ", which receives " +
             std::to_string(received[pair]) + " of them";
  for (size_t slot = 0; slot < ranks.size(); ++slot)
    if (const RankState &rank = ranks[slot]; !rank.done()) {
      const plan::Instruction &inst = rank.current();
      std::string at = "rank " + std::to_string(simulated[slot]) +
                       " waits forever at instruction " + std::to_string(rank.pc());
      if (inst.has_send())
        return at + " (send to rank " + std::to_string(rank.peerOf(inst.send())) +
               "): that rank never makes the matching receive";
      if (inst.has_recv())
        return at + " (receive from rank " + std::to_string(rank.peerOf(inst.recv())) +
               "): that rank never makes the matching send";
      std::string members;
      for (int64_t m : rank.partners())
        members += (members.empty() ? "" : ", ") + std::to_string(m);
      return at + " (" + plan::CollectiveKind_Name(inst.collective().kind()) + ") for ranks " +
             members +
             ": some of them never reach it (their programs make fewer collectives on that "
             "group)";
    }
  for (RankState &rank : ranks)
    rank.finish();
  // Every rank as the simulated rank of its timeline.
  std::map<std::pair<int, int64_t>, int> slotOfTimeline;
  for (size_t slot = 0; slot < ranks.size(); ++slot)
    slotOfTimeline[timelineOf(plan, simulated[slot])] = int(slot);
  for (int64_t r = 0; r < devices; ++r) {
    int slot = slotOf[size_t(r)] >= 0 ? slotOf[size_t(r)] : slotOfTimeline.at(timelineOf(plan, r));
    const RankState &rank = ranks[size_t(slot)];
    sim.ranks.push_back(rank.time);
    sim.flops += rank.flops;
    sim.stepSeconds = std::max(sim.stepSeconds, rank.time.end);
  }
  return "";
}

} // namespace

namespace {

/// One program's timeline alone, as rank `rank` (no other rank's
/// transfers: a worker's or a parameter server's program).
RankState runAlone(const plan::Plan &plan, int program, const Cluster &cluster, int rank,
                   std::vector<Event> *events) {
  RankState state(plan, plan.ranks(program), cluster, rank);
  while (!state.done()) {
    state.advance(events);
    if (!state.done())
      state.run(state.earliestStart(), events);
  }
  state.finish();
  return state;
}

/// A parameter-server plan: the workers' step (one timeline for all),
/// then the pushes, the servers' updates and the pulls (synchronous); or,
/// asynchronous, the slower of a worker's own round trip and a server's
/// share of every worker's.
Simulation simulateServers(const plan::Plan &plan, const Cluster &cluster, bool keepEvents) {
  Simulation sim;
  sim.parameterServers = true;
  ServerExchange x = serverExchange(plan, cluster);
  RankState worker = runAlone(plan, 0, cluster, 0, keepEvents ? &sim.events : nullptr);
  std::vector<RankState> servers;
  for (int64_t k = 0; k < x.servers; ++k) {
    servers.push_back(runAlone(plan, int(k + 1), cluster, int(x.workers + k), nullptr));
    sim.updateSeconds = std::max(sim.updateSeconds, servers.back().time.end);
  }
  bool async = plan.training().parameter_servers().staleness() > 0;
  sim.workerSeconds = worker.time.end;
  sim.pushSeconds = x.pushSeconds;
  sim.pullSeconds = x.pullSeconds;
  sim.allReduceSeconds = x.allReduceSeconds;
  sim.serverBottleneck = x.bottleneck;
  double exchange = x.pushSeconds + x.pullSeconds;
  sim.stepSeconds =
      async ? std::max(worker.time.end + x.workerSeconds + sim.updateSeconds,
                       x.serverSeconds + double(x.workers) * sim.updateSeconds)
            : worker.time.end + exchange + sim.updateSeconds;
  RankTime w = worker.time;
  w.communication += async ? x.workerSeconds : exchange;
  w.end = sim.stepSeconds;
  sim.ranks.assign(size_t(x.workers), w);
  sim.flops = worker.flops * double(x.workers);
  for (RankState &s : servers) {
    RankTime t = s.time;
    double updates = async ? double(x.workers) : 1.0;
    t.compute *= updates;
    t.communication += async ? x.serverSeconds : exchange;
    t.end = sim.stepSeconds;
    sim.ranks.push_back(t);
    sim.flops += s.flops * updates;
  }
  for (RankTime &t : sim.ranks)
    t.idle = std::max(0.0, sim.stepSeconds - t.compute - t.communication);
  return sim;
}

} // namespace

Simulation simulate(const plan::Plan &plan, const Cluster &cluster, bool keepEvents,
                    bool everyRank) {
  if (plan.training().has_parameter_servers())
    return simulateServers(plan, cluster, keepEvents);
  int64_t devices = plan::planRanks(plan);
  Simulation sim;
  std::set<int> programs;
  for (int64_t r = 0; r < devices; ++r)
    if (programOf(plan, r))
      programs.insert(plan::programIndexOfRank(plan, r));
    else
      return sim.error = "rank " + std::to_string(r) + " has no program", sim;
  bool transfers = false;
  for (const plan::RankProgram &program : plan.ranks())
    for (const plan::Instruction &inst : program.instructions())
      transfers = transfers || inst.has_send() || inst.has_recv();
  if (programs.size() > 1 || transfers) {
    // Ranks that run the same program (a pipeline stage's data- and
    // tensor-parallel ranks) meet at their stage's collectives together and
    // send to and receive from ranks like them on the next stage, so their
    // timelines are one, as an SPMD plan's are: the lowest rank of each
    // program is simulated for all (a 1536-rank GPT plan of 8 stages: 8
    // timelines, not 1536), its events standing for theirs. Where that does
    // not hold, or `everyRank`, all ranks are.
    // A replicated stage's replicas: one timeline each (timelineOf).
    std::vector<int64_t> every(static_cast<size_t>(devices)), lowest;
    std::vector<int64_t> ranksOf(size_t(plan.ranks_size()), 0);
    std::set<std::pair<int, int64_t>> seen;
    for (int64_t r = 0; r < devices; ++r) {
      every[size_t(r)] = r;
      ++ranksOf[size_t(plan::programIndexOfRank(plan, r))];
      if (seen.insert(timelineOf(plan, r)).second)
        lowest.push_back(r);
    }
    // A transfer to a fixed rank (not along a mesh axis) goes there from
    // every rank of its program: those ranks are not alike.
    bool alike = true;
    for (int program = 0; program < plan.ranks_size(); ++program)
      for (const plan::Instruction &inst : plan.ranks(program).instructions())
        alike = alike && (ranksOf[size_t(program)] < 2 ||
                          ((!inst.has_send() || inst.send().has_along()) &&
                           (!inst.has_recv() || inst.recv().has_along())));
    sim.error = everyRank || !alike || lowest.size() == every.size()
                    ? kNotSymmetric
                    : simulateJointly(plan, cluster, devices, lowest, sim, keepEvents);
    if (sim.error == kNotSymmetric) {
      sim = Simulation{};
      sim.error = simulateJointly(plan, cluster, devices, every, sim, keepEvents);
    }
  } else if (!programs.empty()) {
    // One program on every rank (SPMD): the ranks reach each collective
    // together, so their timelines are one, simulated once: a plan for
    // 1024 devices costs one.
    RankState rank(plan, *programOf(plan, 0), cluster, 0);
    while (!rank.done()) {
      rank.advance(keepEvents ? &sim.events : nullptr);
      if (!rank.done())
        rank.run(rank.earliestStart(), keepEvents ? &sim.events : nullptr);
    }
    rank.finish();
    sim.ranks.assign(size_t(devices), rank.time);
    sim.flops = rank.flops * double(devices);
    sim.stepSeconds = rank.time.end;
  }
  // Local SGD: the runtime's average of the replicas every H steps, its
  // share of a step (after the step, on the link its group crosses).
  if (const plan::Training &training = plan.training();
      sim.error.empty() && training.sync() == "local" && training.average_every() > 0 &&
      plan.ranks_size() > 0) {
    plan::Instruction average;
    average.mutable_collective()->set_kind(plan::ALL_REDUCE);
    for (uint32_t a : training.data_axes())
      average.mutable_collective()->add_mesh_axes(a);
    average.mutable_cost()->set_bytes(
        double(plan::averagedWeightBytes(plan, plan.ranks(0))));
    sim.averageSeconds = collectiveInstructionSeconds(plan.mesh(), average, cluster);
    double share = sim.averageSeconds / double(training.average_every());
    sim.stepSeconds += share;
    for (RankTime &t : sim.ranks) {
      t.communication += share;
      t.end += share;
    }
  }
  // A rank that finishes early waits for the step's end.
  for (RankTime &t : sim.ranks)
    t.idle += sim.stepSeconds - t.end;
  return sim;
}

std::string chromeTrace(const plan::Plan &plan, const Simulation &sim,
                        const std::function<std::string(const plan::Instruction &)> &name) {
  llvm::json::Array events;
  std::set<int> simulated; // the ranks with events: alike ones share one
  for (const Event &e : sim.events)
    simulated.insert(e.rank);
  for (int r : simulated) {
    events.push_back(llvm::json::Object{{"ph", "M"}, {"pid", r}, {"name", "process_name"},
                                        {"args", llvm::json::Object{{"name", "rank " + std::to_string(r)}}}});
    for (int stream = 0; stream < 4; ++stream)
      events.push_back(llvm::json::Object{
          {"ph", "M"}, {"pid", r}, {"tid", stream}, {"name", "thread_name"},
          {"args", llvm::json::Object{{"name", stream == 0   ? "compute"
                                               : stream == 1 ? "communication"
                                               : stream == 2 ? "pipeline transfers"
                                                             : "gradient reductions"}}}});
  }
  for (const Event &e : sim.events) {
    int program = plan::programIndexOfRank(plan, e.rank);
    const plan::Instruction &inst = plan.ranks(program).instructions(e.instruction);
    events.push_back(llvm::json::Object{
        {"ph", "X"},
        {"pid", e.rank},
        {"tid", e.stream},
        {"name", name(inst)},
        {"ts", e.start * 1e6},
        {"dur", (e.end - e.start) * 1e6},
        {"args", llvm::json::Object{{"instruction", e.instruction},
                                    {"class", opClassName(inst.cost().op_class())},
                                    {"flops", inst.cost().flops()},
                                    {"bytes", inst.cost().bytes()}}}});
  }
  llvm::json::Value root =
      llvm::json::Object{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return llvm::formatv("{0}", root).str();
}

} // namespace dtc::cost
