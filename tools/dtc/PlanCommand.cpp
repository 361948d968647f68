//===- PlanCommand.cpp - dtc plan -----------------------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "plan/PlanLoader.h"
#include "plan/PlanPrinter.h"

namespace dtc::cli {

int runPlan(const Args &args) {
  std::string path, output = "-", format = "text";
  OptionParser parser("plan", "plan file", path);
  parser.text("-o", output);
  parser.text("--format", format);
  if (int rc = parser.parse(args))
    return rc;
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
