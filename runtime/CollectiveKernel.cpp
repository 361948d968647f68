//===- CollectiveKernel.cpp -----------------------------------------------===//
#include "runtime/CollectiveKernel.h"

#include "plan/PlanLoader.h"
#include "plan/Sharding.h"
#include "runtime/comm/Communicator.h"
#include "plan/DType.h"

#include <algorithm>
#include <cstring>

namespace dtc::runtime {
namespace {

/// A dense tensor seen as [outer, dim, inner] around one of its dims, in
/// elements.
struct DimView {
  int64_t outer = 1, dim = 1, inner = 1;
};

DimView viewAround(const plan::TensorType &type, int64_t axis) {
  DimView v;
  for (int d = 0; d < type.shape_size(); ++d)
    (d < axis ? v.outer : d == axis ? v.dim : v.inner) *= type.shape(d);
  return v;
}

/// Copies part `part` of `parts` equal parts along the view's dim of
/// `tensor` into the dense `block`.
void takePart(const char *tensor, const DimView &v, int64_t parts, int64_t part,
              int64_t elementBytes, char *block) {
  int64_t run = v.dim / parts * v.inner * elementBytes, row = v.dim * v.inner * elementBytes;
  for (int64_t o = 0; o < v.outer; ++o)
    std::memcpy(block + o * run, tensor + o * row + part * run, size_t(run));
}

/// The inverse: writes the dense `block` as part `part` of `tensor`.
void putPart(const char *block, const DimView &v, int64_t parts, int64_t part,
             int64_t elementBytes, char *tensor) {
  int64_t run = v.dim / parts * v.inner * elementBytes, row = v.dim * v.inner * elementBytes;
  for (int64_t o = 0; o < v.outer; ++o)
    std::memcpy(tensor + o * row + part * run, block + o * run, size_t(run));
}

Reduction reductionOf(plan::ReduceKind kind) {
  return kind == plan::REDUCE_MAX ? Reduction::Max
         : kind == plan::REDUCE_MIN ? Reduction::Min
                                    : Reduction::Sum;
}

class CollectiveKernel final : public cpu::Kernel {
public:
  /// `part`: this rank's rank in the plan's group (row-major over its axes
  /// as listed), the part an all-slice keeps.
  CollectiveKernel(const plan::Collective &collective, const plan::TensorType &input,
                   const plan::TensorType &output, int64_t groupSize,
                   std::vector<int64_t> planRank, int64_t part, Communicator *group)
      : kind_(collective.kind()), reduction_(reductionOf(collective.reduction())),
        dtype_(input.dtype()), elementBytes_(dtypeBytes(input.dtype())),
        inCount_(elementCount(input)), outCount_(elementCount(output)),
        inView_(viewAround(input, collective.axis())),
        outView_(viewAround(output, kind_ == plan::ALL_TO_ALL ? collective.concat_axis()
                                                              : collective.axis())),
        groupSize_(groupSize), planRank_(std::move(planRank)), part_(part), group_(group) {
    for (size_t k = 0; k < planRank_.size(); ++k)
      inOrder_ = inOrder_ && planRank_[k] == int64_t(k);
  }

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    const char *in = static_cast<const char *>(inputs[0]);
    char *out = static_cast<char *>(outputs[0]);
    int64_t inBytes = inCount_ * elementBytes_, outBytes = outCount_ * elementBytes_;
    bool overlap = in < out + outBytes && out < in + inBytes;
    if (kind_ == plan::ALL_SLICE) { // this rank's part; nothing to send
      takePart(overlap ? copy(in, inBytes) : in, inView_, groupSize_, part_, elementBytes_, out);
      return true;
    }
    if (!group_) { // this rank alone: the shapes are equal
      std::memmove(out, in, size_t(outBytes));
      return true;
    }
    // MPI takes no overlapping send and receive buffers.
    switch (kind_) {
    case plan::ALL_REDUCE:
      std::memmove(out, in, size_t(outBytes));
      return group_->allReduce(out, outCount_, dtype_, reduction_, error);
    case plan::ALL_GATHER: {
      const char *send = overlap ? copy(in, inBytes) : in;
      bool direct = inOrder_ && outView_.outer == 1;
      char *recv = direct ? out : scratch(recv_, outBytes);
      if (!group_->allGather(send, recv, inCount_, dtype_, error))
        return false;
      if (!direct)
        for (int64_t k = 0; k < groupSize_; ++k)
          putPart(recv + k * inBytes, outView_, groupSize_, planRank_[size_t(k)], elementBytes_,
                  out);
      return true;
    }
    case plan::REDUCE_SCATTER:
      return group_->reduceScatter(pack(in, overlap, inBytes / groupSize_), out, outCount_,
                                   dtype_, reduction_, error);
    case plan::ALL_TO_ALL: {
      int64_t blockBytes = inBytes / groupSize_;
      const char *send = pack(in, overlap, blockBytes);
      bool direct = inOrder_ && outView_.outer == 1;
      char *recv = direct ? out : scratch(recv_, outBytes);
      if (!group_->allToAll(send, recv, inCount_ / groupSize_, dtype_, error))
        return false;
      if (!direct)
        for (int64_t k = 0; k < groupSize_; ++k)
          putPart(recv + k * blockBytes, outView_, groupSize_, planRank_[size_t(k)],
                  elementBytes_, out);
      return true;
    }
    default:
      error = "unknown collective kind " + std::to_string(kind_);
      return false;
    }
  }

private:
  static char *scratch(std::vector<char> &buffer, int64_t bytes) {
    buffer.resize(size_t(bytes)); // once: later runs ask for the same size
    return buffer.data();
  }

  const char *copy(const char *in, int64_t bytes) {
    char *to = scratch(send_, bytes);
    std::memcpy(to, in, size_t(bytes));
    return to;
  }

  /// The input as the communicator sends it: the parts along the input's
  /// dim as contiguous blocks, block k for the group's rank k. The input
  /// itself when it is laid out so already and apart from the output.
  const char *pack(const char *in, bool overlap, int64_t blockBytes) {
    if (inOrder_ && inView_.outer == 1 && !overlap)
      return in;
    char *packed = scratch(send_, blockBytes * groupSize_);
    for (int64_t k = 0; k < groupSize_; ++k)
      takePart(in, inView_, groupSize_, planRank_[size_t(k)], elementBytes_,
               packed + k * blockBytes);
    return packed;
  }

  plan::CollectiveKind kind_;
  Reduction reduction_;
  plan::DType dtype_;
  int64_t elementBytes_, inCount_, outCount_;
  DimView inView_, outView_;
  int64_t groupSize_;
  std::vector<int64_t> planRank_; // [k]: the plan's rank in the group of the group's rank k
  int64_t part_;                  // this rank's rank in the plan's group: the part it keeps
  bool inOrder_ = true;
  Communicator *group_;
  std::vector<char> send_, recv_;
};

/// A bucket: several collectives of one kind, group and dtype as one
/// message. What a rank sends for group rank k is each member's part for
/// k, one after another; all-reduces' members are simply one after
/// another. Every member is staged (copied in before the message is sent,
/// out after it arrives), so one may write over its own input.
class BucketKernel final : public cpu::Kernel {
public:
  struct Member {
    int64_t inBytes, outBytes;
    DimView inView, outView;
  };

  BucketKernel(plan::CollectiveKind kind, Reduction reduction, plan::DType dtype,
               std::vector<Member> members, int64_t groupSize, std::vector<int64_t> planRank,
               Communicator *group)
      : kind_(kind), reduction_(reduction), dtype_(dtype), elementBytes_(dtypeBytes(dtype)),
        members_(std::move(members)), groupSize_(groupSize), planRank_(std::move(planRank)),
        group_(group) {
    for (const Member &m : members_) {
      inBytes_ += m.inBytes;
      outBytes_ += m.outBytes;
    }
  }

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    send_.resize(size_t(inBytes_));
    recv_.resize(size_t(outBytes_));
    char *send = send_.data(), *recv = recv_.data();
    switch (kind_) {
    case plan::ALL_REDUCE: {
      int64_t at = 0;
      for (size_t m = 0; m < members_.size(); ++m) {
        std::memcpy(send + at, inputs[m], size_t(members_[m].inBytes));
        at += members_[m].inBytes;
      }
      if (!group_->allReduce(send, inBytes_ / elementBytes_, dtype_, reduction_, error))
        return false;
      at = 0;
      for (size_t m = 0; m < members_.size(); ++m) {
        std::memcpy(outputs[m], send + at, size_t(members_[m].outBytes));
        at += members_[m].outBytes;
      }
      return true;
    }
    case plan::ALL_GATHER: {
      int64_t at = 0;
      for (size_t m = 0; m < members_.size(); ++m) {
        std::memcpy(send + at, inputs[m], size_t(members_[m].inBytes));
        at += members_[m].inBytes;
      }
      if (!group_->allGather(send, recv, inBytes_ / elementBytes_, dtype_, error))
        return false;
      for (int64_t k = 0; k < groupSize_; ++k) {
        const char *from = recv + k * inBytes_;
        for (size_t m = 0; m < members_.size(); ++m) {
          putPart(from, members_[m].outView, groupSize_, planRank_[size_t(k)], elementBytes_,
                  static_cast<char *>(outputs[m]));
          from += members_[m].inBytes;
        }
      }
      return true;
    }
    case plan::REDUCE_SCATTER: {
      char *to = send;
      for (int64_t k = 0; k < groupSize_; ++k)
        for (size_t m = 0; m < members_.size(); ++m) {
          takePart(static_cast<const char *>(inputs[m]), members_[m].inView, groupSize_,
                   planRank_[size_t(k)], elementBytes_, to);
          to += members_[m].outBytes;
        }
      if (!group_->reduceScatter(send, recv, outBytes_ / elementBytes_, dtype_, reduction_,
                                 error))
        return false;
      const char *from = recv;
      for (size_t m = 0; m < members_.size(); ++m) {
        std::memcpy(outputs[m], from, size_t(members_[m].outBytes));
        from += members_[m].outBytes;
      }
      return true;
    }
    default:
      error = "a bucket of " + plan::CollectiveKind_Name(kind_) + "s";
      return false;
    }
  }

private:
  plan::CollectiveKind kind_;
  Reduction reduction_;
  plan::DType dtype_;
  int64_t elementBytes_;
  std::vector<Member> members_;
  int64_t groupSize_;
  std::vector<int64_t> planRank_; // [k]: the plan's rank in the group of the group's rank k
  Communicator *group_;
  int64_t inBytes_ = 0, outBytes_ = 0;
  std::vector<char> send_, recv_;
};

/// A tensor to or from one other rank: peers[m mod peers] for micro-batch
/// m (a replicated stage's replicas take turns), or peers[0].
class TransferKernel : public cpu::Kernel {
public:
  TransferKernel(bool send, int64_t bytes, std::vector<int64_t> peers, int tag,
                 Communicator &world, const int64_t *microBatch)
      : send_(send), bytes_(bytes), peers_(std::move(peers)), tag_(tag), world_(world),
        microBatch_(microBatch) {}

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    int64_t turn = peers_.size() > 1 && microBatch_ ? *microBatch_ % int64_t(peers_.size()) : 0;
    int peer = int(peers_[size_t(turn)]);
    return send_ ? world_.send(inputs[0], bytes_, peer, tag_, error)
                 : world_.recv(outputs[0], bytes_, peer, tag_, error);
  }

private:
  bool send_;
  int64_t bytes_;
  std::vector<int64_t> peers_;
  int tag_;
  Communicator &world_;
  const int64_t *microBatch_;
};

} // namespace

std::unique_ptr<cpu::Kernel> makeTransferKernel(bool send, const plan::TensorType &type,
                                                std::vector<int64_t> peers, int64_t self,
                                                int stream, Communicator *world,
                                                std::string &error, const int64_t *microBatch) {
  for (int64_t peer : peers) {
    std::string what = std::string(send ? "send to" : "receive from") + " rank " +
                       std::to_string(peer);
    if (!world) {
      error = what + ": this rank runs alone (run the plan's ranks with dtc run -n N)";
      return nullptr;
    }
    if (peer == self || peer < 0 || peer >= world->size()) {
      error = what + ": rank " + std::to_string(self) + " of " + std::to_string(world->size()) +
              (peer == self ? " cannot send to itself" : " has no such peer");
      return nullptr;
    }
  }
  if (peers.empty()) {
    error = "a transfer with no peer";
    return nullptr;
  }
  // One tag per stream: a pair's messages meet in order within each.
  constexpr int kFirstTag = 7;
  return std::make_unique<TransferKernel>(send, byteSize(type), std::move(peers),
                                          kFirstTag + stream, *world, microBatch);
}

bool communicates(const plan::Collective &collective) {
  return collective.kind() != plan::ALL_SLICE;
}

std::unique_ptr<cpu::Kernel> makeCollectiveKernel(const plan::Collective &collective,
                                                  const std::vector<plan::TensorType> &inputs,
                                                  const std::vector<plan::TensorType> &outputs,
                                                  const std::vector<int64_t> &axisSizes,
                                                  const std::vector<int64_t> &coordinates,
                                                  Communicator *group, std::string &error) {
  const plan::TensorType &input = inputs.front(), &output = outputs.front();
  const plan::MeshAxes &axes = collective.mesh_axes();
  int64_t size = plan::groupSize(axisSizes, collective);
  int64_t part = plan::indexAlong(coordinates, axisSizes, axes);
  // A range of one axis' coordinates (a replicated stage's replicas): the
  // group ranks them in order from the first.
  if (collective.has_coordinates()) {
    part = coordinates[collective.mesh_axes(0)] - collective.coordinates().first();
    if (!group && size != 1) {
      error = "a collective over a stage's replicas needs their communicator";
      return nullptr;
    }
    std::vector<int64_t> planRank(static_cast<size_t>(size));
    for (int64_t k = 0; k < size; ++k)
      planRank[size_t(k)] = k;
    return std::make_unique<CollectiveKernel>(collective, input, output, size,
                                              std::move(planRank), part,
                                              size == 1 ? nullptr : group);
  }
  if (!communicates(collective))
    return std::make_unique<CollectiveKernel>(collective, input, output, size,
                                              std::vector<int64_t>(), part, nullptr);
  std::string what = plan::CollectiveKind_Name(collective.kind());
  if (!group && size != 1) {
    error = what + " over " + std::to_string(size) +
            " ranks needs their communicator; run the plan under MPI (dtc run -n)";
    return nullptr;
  }
  if (group && group->size() != size) {
    error = what + ": group '" + group->name() + "' has " + std::to_string(group->size()) +
            " ranks, the collective's mesh axes " + std::to_string(size);
    return nullptr;
  }
  // The plan ranks a group row-major over its axes as listed, the
  // communicator over the same axes sorted.
  std::vector<uint32_t> sorted(axes.begin(), axes.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> planRank(static_cast<size_t>(size));
  std::vector<int64_t> member(axisSizes.size(), 0); // group rank k's coordinates
  for (int64_t k = 0; k < size; ++k) {
    int64_t rest = k;
    for (size_t i = sorted.size(); i-- > 0;) {
      member[sorted[i]] = rest % axisSizes[sorted[i]];
      rest /= axisSizes[sorted[i]];
    }
    planRank[size_t(k)] = plan::indexAlong(member, axisSizes, axes);
  }
  if (inputs.size() > 1 && size > 1) { // a bucket
    std::vector<BucketKernel::Member> members;
    for (size_t m = 0; m < inputs.size(); ++m) {
      int64_t axis = collective.member_axes_size() ? collective.member_axes(int(m)) : 0;
      int64_t elementBytes = dtypeBytes(inputs[m].dtype());
      members.push_back({elementCount(inputs[m]) * elementBytes,
                         elementCount(outputs[m]) * elementBytes, viewAround(inputs[m], axis),
                         viewAround(outputs[m], axis)});
    }
    return std::make_unique<BucketKernel>(collective.kind(),
                                          reductionOf(collective.reduction()), input.dtype(),
                                          std::move(members), size, std::move(planRank), group);
  }
  if (inputs.size() > 1) { // a group of one: each member's output is its input
    error = "a bucket over a group of one rank";
    return nullptr;
  }
  return std::make_unique<CollectiveKernel>(collective, input, output, size,
                                            std::move(planRank), part,
                                            size == 1 ? nullptr : group);
}

} // namespace dtc::runtime
