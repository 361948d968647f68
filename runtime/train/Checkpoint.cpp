//===- Checkpoint.cpp - saving and resuming a training run ----------------===//
//
// The file is a 16-byte header, a dtc.train.Checkpoint message and a
// 4-byte trailer:
//
//   "dtc-ckpt"   8 bytes of magic
//   length       u64, little-endian: the message's byte count
//   message      exactly `length` bytes
//   crc32c       u32, little-endian: CRC-32C of the header and the message
//
// A protobuf message cut at a field boundary still parses (as a message with
// fewer tensors), so the length in front is what tells a truncated file from
// a complete one; the trailer catches any other damage (a flipped bit in a
// weight parses as well as the weight did), and each tensor's own CRC-32C
// names the tensors that are damaged. Format version 1 had no checksums.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Checkpoint.h"

#include "runtime/Crc32c.h"
#include "runtime/Files.h"
#include "plan/DType.h"
#include "plan/Version.h"

#include "checkpoint.pb.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::runtime::train {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoints are written in the host's byte order, assumed little-endian");

// The file's message (package dtc.train, as plan.proto's is dtc.plan).
using CheckpointMessage = ::dtc::train::Checkpoint;
using TensorMessage = ::dtc::train::CheckpointTensor;

namespace {

constexpr char kMagic[8] = {'d', 't', 'c', '-', 'c', 'k', 'p', 't'};
constexpr size_t kHeaderBytes = sizeof kMagic + 8;
constexpr size_t kTrailerBytes = 4;

std::string systemError() { return std::strerror(errno); }

constexpr const char *kPreviousSuffix = ".previous";

std::string checkpointPath(const std::string &dir, int64_t rank, int64_t ranks) {
  return (std::filesystem::path(dir) / checkpointFileName(rank, ranks)).string();
}

/// What the folder holds in place of a missing checkpoint file, for the
/// message: another rank count's files, or nothing.
std::string folderContents(const std::string &dir) {
  int64_t rankFiles = 0;
  bool single = false;
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator(dir, ec)) {
    int64_t rank;
    bool previous, perRank;
    if (!parseCheckpointFileName(entry.path().filename().string(), rank, previous, perRank) ||
        previous)
      continue;
    single = single || !perRank;
    rankFiles += perRank;
  }
  if (single)
    return "; the folder holds a single-rank checkpoint (" + std::string(kCheckpointFileName) +
           ")";
  if (rankFiles)
    return "; the folder holds the files of " + std::to_string(rankFiles) +
           (rankFiles == 1 ? " rank" : " ranks") + " (checkpoint.rank-R.dtck)";
  return "";
}

/// Checks one tensor as both the writer and the reader see it: a name, a
/// known dtype, a sane shape and exactly the bytes that type needs.
bool checkTensor(const std::string &label, const std::string &name,
                 const plan::TensorType &type, size_t bytes, std::string &error) {
  if (name.empty()) {
    error = label + ": a tensor has no name";
    return false;
  }
  std::string what = label + ": tensor '" + name + "'";
  int64_t elementBytes = dtypeBytes(type.dtype());
  if (elementBytes == 0) {
    error = what + ": dtype " + std::to_string(int(type.dtype())) +
            " is not a tensor element type";
    return false;
  }
  int64_t count = elementCount(type);
  if (count < 0 || count > INT64_MAX / elementBytes) {
    error = what + ": shape of " + typeToString(type) + " is negative or too large";
    return false;
  }
  if (uint64_t(bytes) != uint64_t(count * elementBytes)) {
    error = what + ": holds " + std::to_string(bytes) + " bytes but " + typeToString(type) +
            " needs " + std::to_string(count * elementBytes);
    return false;
  }
  return true;
}

/// "'a'", "'a' and 'b'", "'a', 'b', 'c' and 4 more": tensors for a message.
std::string namesText(const std::vector<std::string> &names) {
  size_t shown = names.size() > 4 ? 3 : names.size();
  std::string text;
  for (size_t i = 0; i < shown; ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  if (shown < names.size())
    text += " and " + std::to_string(names.size() - shown) + " more";
  return text;
}

/// Checks that a tensor's part lies inside the whole tensor.
bool checkPart(const std::string &label, const std::string &name, const plan::TensorType &type,
               const TensorPart &part, std::string &error) {
  size_t rank = size_t(type.shape_size());
  bool inside = part.wholeShape.size() == rank && part.start.size() == rank;
  for (size_t d = 0; inside && d < rank; ++d)
    inside = part.start[d] >= 0 && part.wholeShape[d] >= type.shape(int(d)) &&
             part.start[d] <= part.wholeShape[d] - type.shape(int(d));
  if (!inside)
    error = label + ": tensor '" + name + "': its part " + typeToString(type) +
            " does not lie inside the whole tensor it names";
  return inside;
}

/// Syncs folder `dir`, so that entries created or renamed in it survive a
/// crash.
bool syncFolder(const std::string &dir, std::string &error) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    error = "cannot sync folder " + dir + ": " + systemError();
    if (fd >= 0)
      ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

/// Creates `dir` and its missing parents, syncing the folder each new one
/// is made in: a folder that vanished in a crash would take the checkpoint
/// written into it along.
bool makeFolders(const std::filesystem::path &dir, std::string &error) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return true;
    error = "cannot write a checkpoint into " + dir.string() + ": not a folder";
    return false;
  }
  std::filesystem::path parent = dir.parent_path();
  if (parent.empty())
    parent = ".";
  else if (parent != dir && !makeFolders(parent, error))
    return false;
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    error = "cannot create folder " + dir.string() + ": " + systemError();
    return false;
  }
  return syncFolder(parent.string(), error);
}

} // namespace

std::string checkpointFileName(int64_t rank, int64_t ranks) {
  return ranks <= 1 ? std::string(kCheckpointFileName)
                    : "checkpoint.rank-" + std::to_string(rank) + ".dtck";
}

bool parseCheckpointFileName(const std::string &name, int64_t &rank, bool &previous,
                             bool &perRank) {
  std::string base = name;
  const std::string suffix = kPreviousSuffix;
  previous = base.size() > suffix.size() &&
             base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (previous)
    base.resize(base.size() - suffix.size());
  if (base == kCheckpointFileName) {
    rank = 0;
    perRank = false;
    return true;
  }
  const std::string prefix = "checkpoint.rank-", ext = ".dtck"; // checkpointFileName's
  if (base.size() <= prefix.size() + ext.size() || base.rfind(prefix, 0) != 0 ||
      base.compare(base.size() - ext.size(), ext.size(), ext) != 0)
    return false;
  std::string digits = base.substr(prefix.size(), base.size() - prefix.size() - ext.size());
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  rank = std::stoll(digits);
  perRank = true;
  return true;
}

int64_t CheckpointState::ranks() const {
  int64_t count = 1;
  for (int64_t size : mesh)
    count *= size;
  return count;
}

bool writeCheckpoint(const std::string &dir, const CheckpointState &state,
                     std::string &error) {
  std::string path = checkpointPath(dir, state.rank, state.ranks());
  std::string label = "cannot write " + path;
  if (state.tensorTypes.size() != state.tensorBytes.size()) {
    error = label + ": " + std::to_string(state.tensorTypes.size()) + " tensor types but " +
            std::to_string(state.tensorBytes.size()) + " tensors' bytes";
    return false;
  }
  // Copies every tensor once into the message and once more when serializing;
  // fine while a checkpoint must fit protobuf's 2 GiB anyway.
  CheckpointMessage message;
  message.set_format_version(kCheckpointFormatVersion);
  message.set_step(state.step);
  message.set_skipped_steps(state.skippedSteps);
  message.set_local_steps(state.localSteps);
  message.set_seed(state.seed);
  message.set_plan_digest(state.planDigest);
  for (int64_t size : state.mesh)
    message.add_mesh(size);
  message.set_rank(state.rank);
  message.set_dtc_version(kDtcVersion);
  std::set<std::string> names;
  for (size_t i = 0; i < state.tensorTypes.size(); ++i) {
    const auto &[name, type] = state.tensorTypes[i];
    const std::vector<char> &bytes = state.tensorBytes[i];
    if (!checkTensor(label, name, type, bytes.size(), error))
      return false;
    if (!names.insert(name).second) {
      error = label + ": tensor '" + name + "' appears twice";
      return false;
    }
    TensorMessage *tensor = message.add_tensors();
    tensor->set_name(name);
    *tensor->mutable_type() = type;
    tensor->set_data(bytes.data(), bytes.size());
    tensor->set_crc32c(crc32c(bytes.data(), bytes.size()));
    if (i < state.tensorParts.size() && !state.tensorParts[i].wholeShape.empty()) {
      const TensorPart &part = state.tensorParts[i];
      if (!checkPart(label, name, type, part, error))
        return false;
      for (size_t d = 0; d < part.wholeShape.size(); ++d) {
        tensor->add_whole_shape(part.wholeShape[d]);
        tensor->add_start(part.start[d]);
      }
    }
  }
  size_t size = message.ByteSizeLong();
  if (size > size_t(INT_MAX)) {
    error = label + ": the state is " + std::to_string(size) +
            " bytes, over protobuf's 2 GiB message limit";
    return false;
  }
  std::string file(kHeaderBytes + size + kTrailerBytes, '\0');
  std::memcpy(file.data(), kMagic, sizeof kMagic);
  uint64_t length = size;
  std::memcpy(file.data() + sizeof kMagic, &length, 8);
  if (!message.SerializeToArray(file.data() + kHeaderBytes, int(size))) {
    error = label + ": serializing the state failed";
    return false;
  }
  uint32_t sum = crc32c(file.data(), kHeaderBytes + size);
  std::memcpy(file.data() + kHeaderBytes + size, &sum, kTrailerBytes);

  // The old checkpoint stays in place until the rename, which replaces it in
  // one step; the new one is on disk before that, and the folder's entry
  // after it.
  if (!makeFolders(dir, error))
    return false;
  {
    // The file it replaces stays as FILE.previous (a second name for it,
    // made before the new one replaces it): the checkpoint to fall back to
    // when the new one is found damaged, and, with several ranks, which
    // replace their files one by one, the older step that every rank still
    // holds when a run stopped among them leaves files of two steps.
    // No file to replace (the first write, or one set aside as damaged):
    // the previous stays.
    std::string previous = path + kPreviousSuffix;
    struct stat st;
    bool replaces = ::stat(path.c_str(), &st) == 0;
    if (replaces && ::unlink(previous.c_str()) != 0 && errno != ENOENT) {
      error = label + ": cannot remove " + previous + ": " + std::strerror(errno);
      return false;
    }
    if (replaces && ::link(path.c_str(), previous.c_str()) != 0 && errno != ENOENT) {
      error = label + ": cannot keep the previous checkpoint as " + previous + ": " +
              std::strerror(errno);
      return false;
    }
  }
  return writeFileAtomically(path, path + ".tmp", {file}, error) && syncFolder(dir, error);
}

bool setAsideDamaged(const std::string &dir, int64_t rank, int64_t ranks, std::string &error) {
  std::string path = checkpointPath(dir, rank, ranks), aside = path + ".damaged";
  if (std::rename(path.c_str(), aside.c_str()) != 0) {
    error = "cannot rename the damaged " + path + " to " + aside + ": " + systemError();
    return false;
  }
  return syncFolder(dir, error);
}

bool readCheckpoint(const std::string &dir, CheckpointState &state, std::string &error) {
  return readCheckpoint(dir, 0, 1, state, error);
}

bool readCheckpoint(const std::string &dir, int64_t rank, int64_t ranks,
                    CheckpointState &state, std::string &error, bool previous) {
  std::string path = checkpointPath(dir, rank, ranks) + (previous ? kPreviousSuffix : "");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) {
    error = "cannot open " + path + ": no " + (previous ? "previous checkpoint" : "checkpoint") +
            " of " +
            (ranks > 1 ? "rank " + std::to_string(rank) + " of " + std::to_string(ranks)
                       : std::string("a single-rank run")) +
            (previous ? "" : folderContents(dir));
    return false;
  }
  CheckpointState read;
  if (!readCheckpointFile(path, read, error))
    return false;
  if (ranks > 1 && read.rank != rank) {
    error = path + ": the file holds rank " + std::to_string(read.rank) +
            "'s parameters, not rank " + std::to_string(rank) + "'s";
    return false;
  }
  state = std::move(read);
  return true;
}

bool readCheckpointFile(const std::string &path, CheckpointState &state, std::string &error) {
  std::string data;
  if (!readWholeFile(path, data, error))
    return false;
  if (data.size() < kHeaderBytes) {
    error = path + ": truncated checkpoint (" + std::to_string(data.size()) +
            " bytes, shorter than its " + std::to_string(kHeaderBytes) + "-byte header)";
    return false;
  }
  if (std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) {
    error = path + ": not a dtc checkpoint (no 'dtc-ckpt' magic)";
    return false;
  }
  uint64_t length;
  std::memcpy(&length, data.data() + sizeof kMagic, 8);
  uint64_t have = data.size() - kHeaderBytes;
  CheckpointMessage message;
  auto parses = [&] {
    return length <= uint64_t(INT_MAX) &&
           message.ParseFromArray(data.data() + kHeaderBytes, int(length));
  };
  // Format version 1 had no trailer.
  if (have == length && parses() && message.format_version() == 1) {
    error = path + ": checkpoint format version 1 (an older dtc's, without checksums) is not "
                   "supported (this runtime reads " +
            std::to_string(kCheckpointFormatVersion) + ")";
    return false;
  }
  if (length > UINT64_MAX - kTrailerBytes || have != length + kTrailerBytes) {
    bool shorter = length <= UINT64_MAX - kTrailerBytes && have < length + kTrailerBytes;
    error = path + ": " + (shorter ? "truncated checkpoint" : "corrupt checkpoint") +
            " (the header says " + std::to_string(length) + " bytes and a " +
            std::to_string(kTrailerBytes) + "-byte checksum follow, the file has " +
            std::to_string(have) + ")";
    return false;
  }
  uint32_t stored;
  std::memcpy(&stored, data.data() + kHeaderBytes + length, kTrailerBytes);
  if (crc32c(data.data(), kHeaderBytes + length) != stored) {
    // Which tensors: where the message still parses, their own checksums.
    std::vector<std::string> damaged;
    if (parses())
      for (const TensorMessage &tensor : message.tensors())
        if (crc32c(tensor.data().data(), tensor.data().size()) != tensor.crc32c())
          damaged.push_back("'" + tensor.name() + "'");
    error = path + ": corrupt checkpoint (its checksum does not match: the file was changed " +
            "after it was written" +
            (damaged.empty() ? std::string() : "; damaged: " + namesText(damaged)) + ")";
    return false;
  }
  if (!parses()) {
    error = path + ": corrupt checkpoint (its message does not parse)";
    return false;
  }
  if (message.format_version() != kCheckpointFormatVersion) {
    error = path + ": checkpoint format version " + std::to_string(message.format_version()) +
            " is not supported (this runtime reads " +
            std::to_string(kCheckpointFormatVersion) + ")";
    return false;
  }
  if (message.step() < 0) {
    error = path + ": negative step count " + std::to_string(message.step());
    return false;
  }
  CheckpointState read;
  read.step = message.step();
  read.skippedSteps = message.skipped_steps();
  read.localSteps = message.local_steps();
  read.seed = message.seed();
  read.planDigest = message.plan_digest();
  read.mesh.assign(message.mesh().begin(), message.mesh().end());
  read.rank = message.rank();
  read.dtcVersion = message.dtc_version();
  std::set<std::string> names;
  for (const TensorMessage &tensor : message.tensors()) {
    if (!checkTensor(path, tensor.name(), tensor.type(), tensor.data().size(), error))
      return false;
    if (!names.insert(tensor.name()).second) {
      error = path + ": tensor '" + tensor.name() + "' appears twice";
      return false;
    }
    if (crc32c(tensor.data().data(), tensor.data().size()) != tensor.crc32c()) {
      error = path + ": corrupt checkpoint (tensor '" + tensor.name() +
              "' does not match its checksum)";
      return false;
    }
    TensorPart part;
    part.wholeShape.assign(tensor.whole_shape().begin(), tensor.whole_shape().end());
    part.start.assign(tensor.start().begin(), tensor.start().end());
    if ((!part.wholeShape.empty() || !part.start.empty()) &&
        !checkPart(path, tensor.name(), tensor.type(), part, error))
      return false;
    read.tensorParts.push_back(std::move(part));
    read.tensorTypes.emplace_back(tensor.name(), tensor.type());
    read.tensorBytes.emplace_back(tensor.data().begin(), tensor.data().end());
  }
  state = std::move(read);
  return true;
}

std::string planDigest(const plan::Plan &plan, const plan::RankProgram &program) {
  uint64_t h = 1469598103934665603ull;
  for (const std::string &part :
       {program.SerializeAsString(), plan.training().SerializeAsString()})
    for (unsigned char c : part)
      h = (h ^ c) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

} // namespace dtc::runtime::train
