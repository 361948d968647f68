//===- TempDirs.h - scratch folders for tests -------------------*- C++ -*-===//
#ifndef DTC_TESTS_UNIT_TEMPDIRS_H
#define DTC_TESTS_UNIT_TEMPDIRS_H

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace dtc::testsupport {

/// A fresh folder under the test temp dir, named `prefix`.XXXXXX; removed
/// with all it holds when the test program exits.
inline std::string makeTempDir(const std::string &prefix) {
  static struct Cleanup {
    std::vector<std::string> dirs;
    ~Cleanup() {
      std::error_code ignored;
      for (const std::string &d : dirs)
        std::filesystem::remove_all(d, ignored);
    }
  } cleanup;
  std::string pattern = testing::TempDir() + "/" + prefix + ".XXXXXX";
  char *dir = mkdtemp(pattern.data());
  EXPECT_NE(dir, nullptr);
  cleanup.dirs.push_back(pattern);
  return pattern;
}

} // namespace dtc::testsupport

#endif // DTC_TESTS_UNIT_TEMPDIRS_H
