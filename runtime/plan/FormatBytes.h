//===- FormatBytes.h - byte counts for people -------------------*- C++ -*-===//
//
// Header-only: the compiler writes byte counts into a plan's decision notes
// and `dtc plan` prints the plan's own; both say them the same way.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_PLAN_FORMATBYTES_H
#define DTC_RUNTIME_PLAN_FORMATBYTES_H

#include <cstdint>
#include <cstdio>
#include <string>

namespace dtc {

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

} // namespace dtc

#endif // DTC_RUNTIME_PLAN_FORMATBYTES_H
