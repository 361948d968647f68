//===- PlanCommand.cpp - dtc plan -----------------------------------------===//
#include "tools/dtc/Commands.h"

#include "plan/PlanLoader.h"
#include "plan/PlanPrinter.h"

namespace dtc::cli {

int runPlan(const Args &args) {
  std::string path, output = "-", format = "text";
  for (size_t i = 0; i < args.size(); ++i) {
    bool missing = false;
    if (auto v = flagValue(args, i, "-o", missing)) {
      output = *v;
    } else if (auto v = flagValue(args, i, "--format", missing)) {
      format = *v;
    } else if (missing) {
      return usageError(args[i] + " needs a value");
    } else if (!args[i].empty() && args[i][0] == '-') {
      return usageError("plan: unknown option '" + args[i] + "'");
    } else if (!path.empty()) {
      return usageError("plan takes one plan file, got '" + path + "' and '" + args[i] + "'");
    } else {
      path = args[i];
    }
  }
  if (path.empty())
    return usageError("plan needs a plan file: dtc plan PLAN.dtcp");
  if (format != "text")
    return usageError("plan: --format " + format + " is not supported (text is)");
  plan::Plan plan;
  std::string error;
  if (!plan::loadPlan(path, plan, error))
    return failure(error);
  return writeOutput(output, printPlan(plan));
}

} // namespace dtc::cli
