//===- TestFiles.h - scratch folders and files for tests --------*- C++ -*-===//
#ifndef DTC_TESTS_UNIT_TESTFILES_H
#define DTC_TESTS_UNIT_TESTFILES_H

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
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

inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace dtc::testsupport

#endif // DTC_TESTS_UNIT_TESTFILES_H
