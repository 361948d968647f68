//===- CheckpointFuzzer.cpp - libFuzzer entry for checkpoint files -------===//
//
// Any bytes in a checkpoint folder must give a message, never a crash or a
// state read from damaged bytes. The first byte picks what the rest is:
// a whole file (framing, lengths and checksums fuzzed too), or a message
// framed here with a right header and checksum (so that mutations reach the
// message's parser and the tensor checks behind the checksum). A file that
// reads is written back and must read back the same.
//
//===----------------------------------------------------------------------===//
#include "runtime/Crc32c.h"
#include "runtime/train/Checkpoint.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  static const std::string dir = [] {
    static char path[] = "/tmp/dtc-checkpoint-fuzz-XXXXXX";
    std::atexit([] { std::filesystem::remove_all(path); });
    return std::string(::mkdtemp(path));
  }();
  if (size == 0)
    return 0;
  std::string file;
  if (data[0] & 1) {
    file.assign(reinterpret_cast<const char *>(data + 1), size - 1);
  } else {
    uint64_t length = size - 1;
    file = std::string("dtc-ckpt") + std::string(reinterpret_cast<const char *>(&length), 8) +
           std::string(reinterpret_cast<const char *>(data + 1), size - 1);
    uint32_t crc = dtc::runtime::crc32c(file.data(), file.size());
    file += std::string(reinterpret_cast<const char *>(&crc), 4);
  }
  std::string path = dir + "/checkpoint.dtck";
  if (FILE *f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(file.data(), 1, file.size(), f);
    std::fclose(f);
  }
  dtc::runtime::train::CheckpointState state;
  std::string error;
  if (!dtc::runtime::train::readCheckpoint(dir, state, error)) {
    if (error.empty())
      __builtin_trap(); // a refusal always says why
    return 0;
  }
  // What reads is consistent: it writes, and reads back the same.
  std::string out = dir + "/again";
  state.mesh.clear();
  state.rank = 0;
  if (!dtc::runtime::train::writeCheckpoint(out, state, error))
    return 0; // over the size limit, say
  dtc::runtime::train::CheckpointState again;
  if (!dtc::runtime::train::readCheckpoint(out, again, error) ||
      again.tensorBytes != state.tensorBytes || again.step != state.step)
    __builtin_trap();
  return 0;
}
