//===- main.cpp - dtc-run: `dtc run` without the compiler ------------------===//
//
// The same command as `dtc run` (tools/dtc/RunCommand.cpp), in an
// executable that links neither MLIR nor LLVM's shared library, so that
// it and the few libraries it needs can be carried to a machine without
// them: a GPU machine that runs plans compiled elsewhere
// (scripts/gpu_bundle.sh). A leading "run" is skipped: the ranks it starts
// under mpirun are given dtc's arguments.
//
//===----------------------------------------------------------------------===//
#include "tools/dtc/Commands.h"

#include <cstdio>

int main(int argc, char **argv) {
  using namespace dtc::cli;
  Args args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "run")
    args.erase(args.begin());
  for (const std::string &arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: dtc-run PLAN [dtc run's options]\n"
                  "`dtc run` without the compiler: dtc --help lists the options.\n");
      return 0;
    }
  setHelpCommand("dtc run --help");
  return runRun(args);
}
