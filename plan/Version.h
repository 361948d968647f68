//===- Version.h - dtc's version --------------------------------*- C++ -*-===//
//
// Plans (their `producer`), checkpoints and `dtc --version` say which dtc
// wrote them.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_VERSION_H
#define DTC_PLAN_VERSION_H

namespace dtc {

constexpr const char *kDtcVersion = "0.1.0";

} // namespace dtc

#endif // DTC_PLAN_VERSION_H
