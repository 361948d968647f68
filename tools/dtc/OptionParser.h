//===- OptionParser.h - a command's flags, declared once ---------*- C++ -*-===//
//
// Each dtc command declares its options (a name, what the value must be,
// where it goes) and its one positional argument; parsing is the same for
// every command: `--flag VALUE` or `--flag=VALUE`, a flag at the end
// without its value, an unknown option, a second positional argument, each
// a usage error that names it.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TOOLS_DTC_OPTIONPARSER_H
#define DTC_TOOLS_DTC_OPTIONPARSER_H

#include "tools/dtc/Commands.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtc::cli {

class OptionParser {
public:
  /// Takes an option's value: "" when taken, else the usage message.
  using Take = std::function<std::string(const std::string &value)>;

  /// `command` ("run") and its positional argument: what it is ("plan")
  /// and where it goes (left empty when not given).
  OptionParser(std::string command, std::string positionalName, std::string &positional)
      : command_(std::move(command)), positionalName_(std::move(positionalName)),
        positional_(positional) {}

  /// `name` alone. A stopping flag ends parsing where it stands (--list-ops).
  void flag(const std::string &name, std::function<void()> set, bool stops = false);
  void flag(const std::string &name, bool &out) {
    flag(name, [&out] { out = true; });
  }

  /// `name VALUE`; `missing` is the message when no value follows (default:
  /// "NAME needs a value").
  void value(const std::string &name, Take take, std::string missing = "");
  void text(const std::string &name, std::string &out, std::string missing = "") {
    value(name, [&out](const std::string &v) { out = v; return std::string(); },
          std::move(missing));
  }

  /// Parses `args`: 0, or 1 after printing a usage error.
  int parse(const Args &args);
  /// Whether a stopping flag ended the parse.
  bool stopped() const { return stopped_; }

private:
  struct Option {
    std::string name;
    bool takesValue = false, stops = false;
    std::function<void()> set;
    Take take;
    std::string missing;
  };
  std::string command_, positionalName_;
  std::string &positional_;
  std::vector<Option> options_;
  bool stopped_ = false;
};

/// Value checks the commands share, with the messages they have always had.
/// A finite number ("--lr needs a number, got 'x'").
OptionParser::Take realNumber(const std::string &name, double &out);
/// A finite whole number ("--warmup needs an integer").
OptionParser::Take integerNumber(const std::string &name, int64_t &out);
/// A whole number of at least `least` ("--dp needs a whole number of at least 1, got '0'").
OptionParser::Take countAtLeast(const std::string &name, int64_t &out, int64_t least);
/// A non-negative int ("--threads needs a non-negative integer, got 'many'").
OptionParser::Take nonNegative(const std::string &name, int &out);

} // namespace dtc::cli

#endif // DTC_TOOLS_DTC_OPTIONPARSER_H
