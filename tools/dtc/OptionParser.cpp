//===- OptionParser.cpp ---------------------------------------------------===//
#include "tools/dtc/OptionParser.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace dtc::cli {

void OptionParser::flag(const std::string &name, std::function<void()> set, bool stops) {
  Option o;
  o.name = name;
  o.set = std::move(set);
  o.stops = stops;
  options_.push_back(std::move(o));
}

void OptionParser::value(const std::string &name, Take take, std::string missing) {
  Option o;
  o.name = name;
  o.takesValue = true;
  o.take = std::move(take);
  o.missing = missing.empty() ? name + " needs a value" : std::move(missing);
  options_.push_back(std::move(o));
}

int OptionParser::parse(const Args &args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    const Option *match = nullptr;
    std::string value;
    bool hasValue = false;
    for (const Option &o : options_) {
      if (arg == o.name) {
        match = &o;
        break;
      }
      if (o.takesValue && arg.size() > o.name.size() + 1 &&
          arg.compare(0, o.name.size(), o.name) == 0 && arg[o.name.size()] == '=') {
        match = &o;
        value = arg.substr(o.name.size() + 1);
        hasValue = true;
        break;
      }
    }
    if (!match) {
      if (!arg.empty() && arg[0] == '-' && arg != "-")
        return usageError(command_ + ": unknown option '" + arg + "'");
      if (!positional_.empty())
        return usageError(command_ + " takes one " + positionalName_ + ", got '" + positional_ +
                          "' and '" + arg + "'");
      positional_ = arg;
      continue;
    }
    if (!match->takesValue) {
      match->set();
      if (match->stops) {
        stopped_ = true;
        return 0;
      }
      continue;
    }
    if (!hasValue) {
      if (i + 1 >= args.size())
        return usageError(match->missing);
      value = args[++i];
    }
    if (std::string problem = match->take(value); !problem.empty())
      return usageError(problem);
  }
  return 0;
}

OptionParser::Take realNumber(const std::string &name, double &out) {
  return [name, &out](const std::string &v) -> std::string {
    char *end = nullptr;
    double value = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !std::isfinite(value))
      return name + " needs a number, got '" + v + "'";
    out = value;
    return "";
  };
}

OptionParser::Take integerNumber(const std::string &name, int64_t &out) {
  return [name, &out](const std::string &v) -> std::string {
    double value = 0;
    if (std::string problem = realNumber(name, value)(v); !problem.empty())
      return problem;
    if (value != std::floor(value))
      return name + " needs an integer";
    out = int64_t(value);
    return "";
  };
}

OptionParser::Take countAtLeast(const std::string &name, int64_t &out, int64_t least) {
  return [name, &out, least](const std::string &v) -> std::string {
    char *end = nullptr;
    long long value = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || value < least)
      return fmt::format("{} needs a whole number of at least {}, got '{}'", name, least, v);
    out = value;
    return "";
  };
}

OptionParser::Take nonNegative(const std::string &name, int &out) {
  return [name, &out](const std::string &v) -> std::string {
    try {
      size_t used = 0;
      int value = std::stoi(v, &used);
      if (used != v.size() || value < 0)
        throw std::invalid_argument(v);
      out = value;
      return "";
    } catch (const std::exception &) {
      return name + " needs a non-negative integer, got '" + v + "'";
    }
  };
}

} // namespace dtc::cli
