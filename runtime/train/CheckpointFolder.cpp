//===- CheckpointFolder.cpp - what a checkpoint folder holds --------------===//
#include "runtime/train/CheckpointFolder.h"

#include "runtime/train/Checkpoint.h"
#include "plan/FormatBytes.h"
#include "plan/Ranks.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

namespace dtc::runtime::train {
namespace {

} // namespace

bool CheckpointFolder::allValid() const {
  return std::all_of(files.begin(), files.end(), [](const CheckpointFile &f) { return f.valid; });
}

bool inspectCheckpointFolder(const std::string &dir, CheckpointFolder &folder,
                             std::string &error) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    error = "'" + dir + "' is not a folder";
    return false;
  }
  CheckpointFolder read;
  read.dir = dir;
  std::set<bool> kinds; // single-rank, per-rank
  for (const auto &entry : fs::directory_iterator(dir, ec)) {
    CheckpointFile file;
    file.name = entry.path().filename().string();
    bool perRank = false;
    if (!entry.is_regular_file(ec) || !parseCheckpointFileName(file.name, file.rank, file.previous, perRank))
      continue;
    kinds.insert(perRank);
    file.bytes = int64_t(entry.file_size(ec));
    CheckpointState state;
    file.valid = readCheckpointFile(entry.path().string(), state, file.problem);
    if (file.valid && perRank && state.rank != file.rank) {
      file.valid = false;
      file.problem = fmt::format("holds rank {}'s parameters, not rank {}'s", state.rank,
                                 file.rank);
    }
    if (file.valid) {
      file.step = state.step;
      file.tensors = int64_t(state.tensorTypes.size());
      file.mesh = state.mesh;
      file.planDigest = state.planDigest;
      file.dtcVersion = state.dtcVersion;
    } else if (file.problem.rfind(entry.path().string() + ": ", 0) == 0) {
      file.problem.erase(0, entry.path().string().size() + 2); // the line names the file
    }
    read.files.push_back(std::move(file));
  }
  if (ec) {
    error = "cannot list '" + dir + "': " + ec.message();
    return false;
  }
  if (read.files.empty()) {
    error = "'" + dir + "' holds no checkpoint (checkpoint.dtck, or checkpoint.rank-R.dtck "
                        "per rank)";
    return false;
  }
  if (kinds.size() > 1) {
    error = "'" + dir + "' holds both a single-rank checkpoint (checkpoint.dtck) and per-rank "
                        "files (checkpoint.rank-R.dtck): a folder holds one run's";
    return false;
  }
  std::sort(read.files.begin(), read.files.end(),
            [](const CheckpointFile &a, const CheckpointFile &b) {
              return std::make_pair(a.rank, a.previous) < std::make_pair(b.rank, b.previous);
            });
  // The ranks: the run's mesh as a valid file records it, else the names.
  int64_t ranks = 0;
  for (const CheckpointFile &f : read.files) {
    ranks = std::max(ranks, f.rank + 1);
    if (f.valid) {
      int64_t meshRanks = 1;
      for (int64_t size : f.mesh)
        meshRanks *= size;
      ranks = std::max(ranks, meshRanks);
    }
  }
  read.ranks = ranks;
  // The newest step every rank has a valid file of.
  std::map<int64_t, std::set<int64_t>> ranksAt; // step -> ranks with it
  for (const CheckpointFile &f : read.files)
    if (f.valid)
      ranksAt[f.step].insert(f.rank);
  for (const auto &[step, have] : ranksAt)
    if (int64_t(have.size()) == ranks)
      read.resumableStep = std::max(read.resumableStep, step);
  folder = std::move(read);
  return true;
}

std::string checkpointFolderText(const CheckpointFolder &folder) {
  std::string text;
  const CheckpointFile *any = nullptr;
  for (const CheckpointFile &f : folder.files)
    if (f.valid && (!any || f.step > any->step))
      any = &f;
  text += fmt::format("{}: checkpoint of {}{}\n", folder.dir, plan::rankCount(folder.ranks),
                      any && folder.ranks > 1 && !any->mesh.empty()
                          ? " (mesh " + plan::meshString(any->mesh) + ")"
                          : "");
  size_t width = 4;
  for (const CheckpointFile &f : folder.files)
    width = std::max(width, f.name.size());
  text += fmt::format("  {:<{}}  {:>6}  {:>7}  {:>10}  {:<7}  {}\n", "file", width, "step",
                      "tensors", "size", "dtc", "plan");
  std::set<std::string> digests;
  for (const CheckpointFile &f : folder.files) {
    if (f.valid) {
      digests.insert(f.planDigest);
      std::string digest = f.planDigest.size() > 16 ? f.planDigest.substr(0, 16) : f.planDigest;
      bool printable = std::all_of(digest.begin(), digest.end(),
                                   [](char c) { return c >= 0x20 && c < 0x7f; });
      text += fmt::format("  {:<{}}  {:>6}  {:>7}  {:>10}  {:<7}  {}  checksums ok\n", f.name,
                          width, f.step, f.tensors, plan::formatBytes(f.bytes),
                          f.dtcVersion.empty() ? "?" : f.dtcVersion,
                          printable ? digest : "(binary)");
    } else {
      text += fmt::format("  {:<{}}  {:>6}  {:>7}  {:>10}  DAMAGED: {}\n", f.name, width, "-",
                          "-", plan::formatBytes(f.bytes), f.problem);
    }
  }
  // A pipeline's stages and parameter servers run programs of their own;
  // files of two plans
  // differ alike (without the plan, the folder cannot tell which).
  if (digests.size() > 1)
    text += fmt::format("  the files hold {} different programs: a pipeline's stages or "
                        "parameter servers, or files of different plans (which do not resume "
                        "together)\n",
                        digests.size());
  int64_t damaged = std::count_if(folder.files.begin(), folder.files.end(),
                                  [](const CheckpointFile &f) { return !f.valid; });
  if (folder.resumableStep < 0)
    text += "no step that every rank holds a valid file of: this folder cannot be resumed\n";
  else
    text += fmt::format("a resume starts from step {}{}\n", folder.resumableStep,
                        damaged ? fmt::format(" ({} damaged {} left out)", damaged,
                                              damaged == 1 ? "file" : "files")
                                : "");
  return text;
}

} // namespace dtc::runtime::train
