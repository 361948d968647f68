//===- PlanFuzzer.cpp - libFuzzer entry for plans and the executor ---------===//
//
// Any bytes handed to `dtc run` as a plan must give a message, never a
// crash: parse, validate, prepare every kernel and run the program with
// zero-filled inputs. Parameters would need a model file, so they are
// dropped (their bytes stay zero) to let every plan reach the kernels.
//
//===----------------------------------------------------------------------===//
#include "runtime/Executor.h"
#include "plan/PlanLoader.h"

#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // Parse failures are expected here; keep protobuf from logging each one.
  static bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  dtc::plan::Plan plan;
  if (!plan.ParseFromArray(data, int(size)))
    return 0;
  std::string error;
  if (!dtc::plan::validatePlan(plan, error))
    return 0;
  for (auto &rank : *plan.mutable_ranks())
    for (auto &buffer : *rank.mutable_buffers())
      buffer.clear_parameter();
  // Keep each input cheap: the arena is allocated for real.
  for (const auto &rank : plan.ranks())
    if (rank.arena_bytes() > (int64_t(64) << 20) || rank.instructions_size() > 4096)
      return 0;
  auto executor = dtc::runtime::Executor::create(plan, 0, "/nonexistent.onnx", 1, error);
  if (!executor)
    return 0;
  for (int i = 0; i < plan.inputs_size(); ++i) {
    dtc::runtime::HostTensor t;
    t.type = plan.inputs(i).type();
    t.bytes.assign(dtc::plan::elementCount(t.type) *
                       dtc::plan::dtypeBytes(t.type.dtype()),
                   0);
    if (!executor->setInput(i, t, error))
      __builtin_trap(); // a validated input type must be accepted
  }
  executor->run(error);
  return 0;
}
