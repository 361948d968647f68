//===- Commands.h - the dtc subcommands -------------------------*- C++ -*-===//
#ifndef DTC_TOOLS_DTC_COMMANDS_H
#define DTC_TOOLS_DTC_COMMANDS_H

#include <optional>
#include <string>
#include <vector>

namespace dtc::cli {

using Args = std::vector<std::string>;

int runImport(const Args &args);   // ImportCommands.cpp
int runCompile(const Args &args);  // ImportCommands.cpp
int runPlan(const Args &args);     // PlanCommand.cpp
int runRun(const Args &args);      // RunCommand.cpp
int runSimulate(const Args &args); // SimulateCommand.cpp
int runCalibrate(const Args &args); // CalibrateCommand.cpp
int runReport(const Args &args);   // ReportCommand.cpp
int runCheckpoint(const Args &args); // CheckpointCommand.cpp

/// The command usage errors point to ("dtc run --help").
void setHelpCommand(const std::string &command);

/// Prints "dtc: MESSAGE" and a pointer to --help; returns 1.
int usageError(const std::string &message);

/// Prints "error: MESSAGE"; returns 1.
int failure(const std::string &message);

/// While `into` is set, usageError and failure add their text to it instead
/// of printing it: a rank of a job holds its errors for RankJob::finish,
/// which prints each once for the job (naming the rank where they differ).
void holdErrors(std::vector<std::string> *into);

/// Writes `bytes` to `path` atomically (a temporary file renamed into
/// place), or to stdout for "-"; returns 0, or 1 after printing why not.
int writeOutput(const std::string &path, const std::string &bytes);

// Each command declares its flags to an OptionParser (OptionParser.h).

} // namespace dtc::cli

#endif // DTC_TOOLS_DTC_COMMANDS_H
