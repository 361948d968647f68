//===- CheckpointCommand.cpp - dtc checkpoint -----------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "plan/PlanLoader.h"
#include "runtime/train/CheckpointFolder.h"
#include "runtime/train/ConvertCheckpoint.h"

#include <fmt/format.h>

namespace dtc::cli {
namespace {

int inspect(const Args &args) {
  std::string dir;
  OptionParser parser("checkpoint inspect", "checkpoint folder", dir);
  if (int rc = parser.parse(args))
    return rc;
  if (dir.empty())
    return usageError("checkpoint inspect needs a folder: dtc checkpoint inspect DIR (dtc run "
                      "--checkpoint DIR's)");
  runtime::train::CheckpointFolder folder;
  std::string error;
  if (!runtime::train::inspectCheckpointFolder(dir, folder, error))
    return failure(error);
  fmt::print("{}", runtime::train::checkpointFolderText(folder));
  if (!folder.allValid())
    return failure(fmt::format("{}: damaged checkpoint files (listed above)", dir));
  return 0;
}

int convert(const Args &args) {
  std::string dir, planPath, out;
  OptionParser parser("checkpoint convert", "checkpoint folder", dir);
  parser.text("--plan", planPath, "--plan needs the plan to convert for");
  parser.text("-o", out, "-o needs the folder to write");
  if (int rc = parser.parse(args))
    return rc;
  if (dir.empty() || planPath.empty() || out.empty())
    return usageError("checkpoint convert needs a folder, a plan and an output folder: dtc "
                      "checkpoint convert DIR --plan PLAN.dtcp -o OUT");
  plan::Plan plan;
  std::string error;
  if (!plan::loadPlan(planPath, plan, error))
    return failure(error);
  bool ok = runtime::train::convertCheckpoint(
      dir, plan, out, [](const std::string &line) { fmt::print("  {}\n", line); }, error);
  if (!ok)
    return failure(fmt::format("checkpoint convert {} for {}: {}", dir, planPath, error));
  fmt::print("converted {} for {} into {}: dtc run {} --checkpoint {} --resume goes on from "
             "there\n",
             dir, planPath, out, planPath, out);
  return 0;
}

} // namespace

int runCheckpoint(const Args &args) {
  if (!args.empty() && args[0] == "inspect")
    return inspect(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "convert")
    return convert(Args(args.begin() + 1, args.end()));
  return usageError(args.empty()
                        ? "checkpoint needs a subcommand: dtc checkpoint inspect DIR, or dtc "
                          "checkpoint convert DIR --plan PLAN.dtcp -o OUT"
                        : "unknown checkpoint subcommand '" + args[0] +
                              "' (there are: inspect DIR, convert DIR --plan PLAN.dtcp -o OUT)");
}

} // namespace dtc::cli
