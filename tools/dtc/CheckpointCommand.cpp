//===- CheckpointCommand.cpp - dtc checkpoint -----------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "runtime/train/CheckpointFolder.h"

#include <fmt/format.h>

namespace dtc::cli {

int runCheckpoint(const Args &args) {
  if (args.empty() || args[0] != "inspect")
    return usageError(args.empty() ? "checkpoint needs a subcommand: dtc checkpoint inspect DIR"
                                   : "unknown checkpoint subcommand '" + args[0] +
                                         "' (there is: inspect DIR)");
  std::string dir;
  OptionParser parser("checkpoint inspect", "checkpoint folder", dir);
  if (int rc = parser.parse(Args(args.begin() + 1, args.end())))
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

} // namespace dtc::cli
