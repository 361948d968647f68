//===- FormatBytes.h - byte counts for people -------------------*- C++ -*-===//
//
// Header-only: the compiler writes byte counts into a plan's decision notes
// and `dtc plan` prints the plan's own; both say them (and times) the same way.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_FORMATBYTES_H
#define DTC_PLAN_FORMATBYTES_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace dtc::plan {

/// "12.34 MiB", "1.5 KiB", "512 B".
inline std::string formatBytes(int64_t bytes) {
  char text[32];
  if (bytes >= (int64_t(1) << 30))
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / double(int64_t(1) << 30));
  else if (bytes >= (1 << 20))
    std::snprintf(text, sizeof text, "%.2f MiB", bytes / double(1 << 20));
  else if (bytes >= (1 << 10))
    std::snprintf(text, sizeof text, "%.1f KiB", bytes / double(1 << 10));
  else
    std::snprintf(text, sizeof text, "%lld B", (long long)bytes);
  return text;
}

/// "1.23 ms", "45.6 us", "2.1 s": three significant digits.
inline std::string formatSeconds(double s) {
  char text[32];
  if (s >= 1)
    std::snprintf(text, sizeof text, "%.3g s", s);
  else if (s >= 1e-3)
    std::snprintf(text, sizeof text, "%.3g ms", s * 1e3);
  else
    std::snprintf(text, sizeof text, "%.3g us", s * 1e6);
  return text;
}

/// "40GiB", "512 MiB", "1.5GB", "1e9": bytes; nothing if not a size.
/// KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000.
inline std::optional<double> parseByteSize(const std::string &text) {
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(value))
    return std::nullopt;
  std::string unit(end);
  unit.erase(0, unit.find_first_not_of(' '));
  static const struct {
    const char *name;
    double scale;
  } kUnits[] = {{"", 1},         {"B", 1},          {"KiB", 1024.0},   {"MiB", 1048576.0},
                {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},
                {"GB", 1e9},     {"TB", 1e12}};
  for (const auto &u : kUnits)
    if (unit == u.name)
      return value * u.scale;
  return std::nullopt;
}

} // namespace dtc::plan

#endif // DTC_PLAN_FORMATBYTES_H
