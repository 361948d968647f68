//===- CompileNotes.cpp ---------------------------------------------------===//
#include "compiler/CompileNotes.h"

#include "dialects/graph/AttrNames.h"

#include "mlir/IR/Builders.h"

#include <cstdio>

using namespace mlir;

namespace dtc {

void addNote(func::FuncOp func, const Twine &text) {
  Builder b(func.getContext());
  SmallVector<Attribute> notes;
  if (auto existing = func->getAttrOfType<ArrayAttr>(attr::kNotes))
    notes.append(existing.begin(), existing.end());
  notes.push_back(b.getStringAttr(text));
  func->setAttr(attr::kNotes, b.getArrayAttr(notes));
}

std::vector<std::string> notesOf(func::FuncOp func) {
  std::vector<std::string> notes;
  if (auto existing = func->getAttrOfType<ArrayAttr>(attr::kNotes))
    for (Attribute note : existing)
      if (auto text = dyn_cast<StringAttr>(note))
        notes.push_back(text.str());
  return notes;
}

std::string formatNumber(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

std::string formatCount(int64_t count) {
  if (count < 1000)
    return std::to_string(count);
  const char *units[] = {"k", "M", "B", "T"};
  double value = double(count);
  int unit = -1;
  while (value >= 999.5 && unit < 3) {
    value /= 1000;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g %s", value, units[unit]);
  return buffer;
}

std::string formatSeconds(double s) {
  char buffer[32];
  if (s >= 1)
    std::snprintf(buffer, sizeof buffer, "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buffer, sizeof buffer, "%.2f ms", s * 1e3);
  else
    std::snprintf(buffer, sizeof buffer, "%.1f us", s * 1e6);
  return buffer;
}

std::string locationName(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (std::string name = locationName(inner); !name.empty())
        return name;
  return "";
}

} // namespace dtc
