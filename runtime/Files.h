//===- Files.h - whole files in and out -------------------------*- C++ -*-===//
#ifndef DTC_RUNTIME_FILES_H
#define DTC_RUNTIME_FILES_H

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace dtc::runtime {

/// Writes `pieces` to `tmp`, syncs it to disk and renames it over `path`:
/// a reader (or a crash) never sees half a file. The caller syncs the
/// folder when the new entry itself must survive a crash.
bool writeFileAtomically(const std::string &path, const std::string &tmp,
                         std::initializer_list<std::string_view> pieces, std::string &error);

bool writeFileAtomically(const std::string &path, const std::string &tmp,
                         const std::vector<std::string_view> &pieces, std::string &error);

/// Reads all of a regular file into `data`; false with a message naming it.
bool readWholeFile(const std::string &path, std::string &data, std::string &error);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_FILES_H
