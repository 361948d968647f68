//===- Reshard.cpp - a checkpoint read under another split ----------------===//
#include "runtime/train/Reshard.h"

#include "runtime/TensorSlices.h"
#include "runtime/train/CheckpointFolder.h"
#include "plan/DType.h"
#include "plan/Ranks.h"
#include "plan/Sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

namespace dtc::runtime::train {
namespace {

std::vector<int64_t> shapeOf(const plan::TensorType &type) {
  return {type.shape().begin(), type.shape().end()};
}

/// A part's whole shape and start, with "whole" spelled out.
void spelledOut(const plan::TensorType &type, const TensorPart &part,
                std::vector<int64_t> &whole, std::vector<int64_t> &start) {
  whole = part.wholeShape.empty() ? shapeOf(type) : part.wholeShape;
  start = part.start.empty() ? std::vector<int64_t>(whole.size(), 0) : part.start;
}

/// Whether each dim of `a` is at most b's (same rank).
bool within(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t d = 0; d < a.size(); ++d)
    if (a[d] > b[d])
      return false;
  return true;
}

/// The first element of the part (`bytes`, of `shape`, at `start` in the
/// whole) that lies outside `kept` and is not zero (either zero of a float),
/// as its index in the whole; empty when there is none.
std::vector<int64_t> nonzeroOutside(const std::vector<char> &bytes, plan::DType dtype,
                                    const std::vector<int64_t> &shape,
                                    const std::vector<int64_t> &start,
                                    const std::vector<int64_t> &kept) {
  std::vector<int64_t> end(start.size());
  for (size_t d = 0; d < start.size(); ++d)
    end[d] = start[d] + shape[d];
  if (within(end, kept))
    return {};
  int64_t width = plan::dtypeBytes(dtype), count = int64_t(bytes.size()) / width;
  bool isFloat = dtype == plan::F32 || dtype == plan::F64 || dtype == plan::F16 ||
                 dtype == plan::BF16;
  std::vector<int64_t> index(start);
  for (int64_t i = 0; i < count; ++i) {
    bool outside = false;
    for (size_t d = 0; d < index.size(); ++d)
      outside |= index[d] >= kept[d];
    const char *at = bytes.data() + i * width;
    for (int64_t b = 0; outside && b < width; ++b) {
      // Little-endian: a float's sign is its last byte's top bit.
      char mask = isFloat && b == width - 1 ? char(0x7f) : char(0xff);
      if (at[b] & mask)
        return index;
    }
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < start[d] + shape[d])
        break;
      index[d] = start[d];
    }
  }
  return {};
}

} // namespace

bool readResharded(const std::string &dir, std::vector<WantedPart> &wanted, Resharded &read,
                   std::string &error, int64_t step,
                   const std::function<bool(int64_t)> &fromRank) {
  CheckpointFolder folder;
  if (!inspectCheckpointFolder(dir, folder, error))
    return false;
  if (folder.resumableStep < 0 && step < 0) {
    error = dir + ": no step that every rank of the checkpoint (" +
            plan::rankCount(folder.ranks) + ") holds a valid file of";
    return false;
  }
  std::map<std::string, size_t> byName;
  for (size_t w = 0; w < wanted.size(); ++w)
    byName[wanted[w].name] = w;
  // Per wanted part, the elements filled so far, from distinct source parts
  // (replicas hold the same part: counted once).
  std::vector<int64_t> filled(wanted.size(), 0), need(wanted.size(), -1);
  std::vector<std::set<std::vector<int64_t>>> sourcesSeen(wanted.size());
  read = {};
  read.step = step >= 0 ? step : folder.resumableStep;
  read.files = folder.ranks;
  std::vector<char> piece;
  for (int64_t r = 0; r < folder.ranks; ++r) {
    if (fromRank && !fromRank(r))
      continue;
    CheckpointState state;
    // Its last file when of the step, else its previous one.
    std::string lastError;
    bool ok = readCheckpoint(dir, r, folder.ranks, state, lastError) &&
              state.step == read.step;
    if (!ok && !readCheckpoint(dir, r, folder.ranks, state, error, true))
      return false;
    if (state.step != read.step) {
      error = fmt::format("{}: rank {} holds no file of step {}", dir, r, read.step);
      return false;
    }
    read.seed = state.seed;
    read.skippedSteps = state.skippedSteps;
    read.mesh = state.mesh;
    for (size_t t = 0; t < state.tensorTypes.size(); ++t) {
      const auto &[name, type] = state.tensorTypes[t];
      auto it = byName.find(name);
      if (it == byName.end())
        continue; // another rank's (a pipeline stage's) or not needed here
      WantedPart &want = wanted[it->second];
      std::vector<int64_t> fromWhole, fromStart, toWhole, toStart;
      spelledOut(type, t < state.tensorParts.size() ? state.tensorParts[t] : TensorPart(),
                 fromWhole, fromStart);
      spelledOut(want.type, want.part, toWhole, toStart);
      // A checkpoint from before the plan padded the tensor, or from a
      // padded plan into an unpadded one (checked below, part by part).
      bool pads = fromWhole != toWhole && fromWhole == want.modelShape &&
                  within(fromWhole, toWhole);
      bool crops = fromWhole != toWhole && !pads && within(toWhole, fromWhole);
      if (type.dtype() != want.type.dtype() || (fromWhole != toWhole && !pads && !crops)) {
        plan::TensorType was = type, is = want.type;
        *was.mutable_shape() = {fromWhole.begin(), fromWhole.end()};
        *is.mutable_shape() = {toWhole.begin(), toWhole.end()};
        error = fmt::format("{}: tensor '{}' is {} in the checkpoint but {} in this plan: a "
                            "checkpoint of another model",
                            dir, name, plan::typeToString(was), plan::typeToString(is));
        return false;
      }
      if (!sourcesSeen[it->second].insert(fromStart).second)
        continue; // a replica of a part already read
      if (crops) {
        std::vector<int64_t> at = nonzeroOutside(state.tensorBytes[t], type.dtype(),
                                                 shapeOf(type), fromStart, toWhole);
        if (!at.empty()) {
          plan::TensorType was = type, is = want.type;
          *was.mutable_shape() = {fromWhole.begin(), fromWhole.end()};
          *is.mutable_shape() = {toWhole.begin(), toWhole.end()};
          error = fmt::format("{}: tensor '{}' is {} in the checkpoint but {} in this plan, "
                              "and what lies past the plan's is not zero (at [{}]): not a "
                              "padding to drop",
                              dir, name, plan::typeToString(was), plan::typeToString(is),
                              fmt::join(at, ","));
          return false;
        }
      }
      if (pads && need[it->second] < 0) {
        // Only the part inside the checkpoint's tensor comes from it; the
        // padding is zeros.
        std::memset(want.into, 0, size_t(plan::byteSize(want.type)));
        need[it->second] = 1;
        for (size_t d = 0; d < toStart.size(); ++d)
          need[it->second] *= std::max<int64_t>(
              0, std::min(toStart[d] + want.type.shape(int(d)), fromWhole[d]) - toStart[d]);
      }
      // The box both parts share, copied from the one into the other.
      std::vector<int64_t> from = shapeOf(type), to = shapeOf(want.type);
      std::vector<int64_t> lo(from.size()), size(from.size());
      int64_t count = 1;
      for (size_t d = 0; d < from.size(); ++d) {
        lo[d] = std::max(fromStart[d], toStart[d]);
        size[d] = std::min(fromStart[d] + from[d], toStart[d] + to[d]) - lo[d];
        count *= std::max<int64_t>(0, size[d]);
      }
      if (count == 0)
        continue;
      std::vector<int64_t> inFrom(from.size()), inTo(from.size());
      for (size_t d = 0; d < from.size(); ++d) {
        inFrom[d] = lo[d] - fromStart[d];
        inTo[d] = lo[d] - toStart[d];
      }
      int64_t width = plan::dtypeBytes(type.dtype());
      piece.resize(size_t(count * width));
      copySlice(state.tensorBytes[t].data(), from, inFrom, size, width, piece.data());
      pasteSlice(piece.data(), to, inTo, size, width, want.into);
      filled[it->second] += count;
    }
  }
  for (size_t w = 0; w < wanted.size(); ++w) {
    int64_t needed = need[w] >= 0 ? need[w] : plan::elementCount(wanted[w].type);
    if (filled[w] != needed) {
      error = fmt::format("{}: the checkpoint holds {} of the {} values of '{}' this rank needs{}",
                          dir, filled[w], needed, wanted[w].name,
                          filled[w] == 0 ? " (no such tensor: a checkpoint of another model?)"
                                         : "");
      return false;
    }
  }
  return true;
}

TensorPart partOfBuffer(const plan::Buffer &buffer, const std::vector<int64_t> &axisSizes,
                        const std::vector<int64_t> &coordinates) {
  TensorPart part;
  if (buffer.sharding_size() == 0)
    return part;
  std::vector<int64_t> parts = plan::shardParts(buffer, axisSizes);
  for (int d = 0; d < buffer.type().shape_size(); ++d)
    part.wholeShape.push_back(buffer.type().shape(d) * parts[size_t(d)]);
  part.start = plan::shardStarts(buffer, axisSizes, coordinates);
  return part;
}


} // namespace dtc::runtime::train
