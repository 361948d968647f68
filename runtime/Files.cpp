//===- Files.cpp - whole files in and out ---------------------------------===//
#include "runtime/Files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::runtime {

namespace {

std::string systemError() { return std::strerror(errno); }

} // namespace

bool readWholeFile(const std::string &path, std::string &data,
                   std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + path + ": " + systemError();
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "cannot read " + path + ": not a regular file";
    ::close(fd);
    return false;
  }
  data.resize(size_t(st.st_size));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      error = "cannot read " + path + ": " +
              (n < 0 ? systemError() : "file shrank while reading");
      ::close(fd);
      return false;
    }
    done += size_t(n);
  }
  ::close(fd);
  return true;
}

bool writeFileAtomically(const std::string &path, const std::string &tmp,
                         std::initializer_list<std::string_view> pieces, std::string &error) {
  return writeFileAtomically(path, tmp, std::vector<std::string_view>(pieces), error);
}

bool writeFileAtomically(const std::string &path, const std::string &tmp,
                         const std::vector<std::string_view> &pieces, std::string &error) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = "cannot write " + path + ": cannot create " + tmp + ": " + systemError();
    return false;
  }
  auto fail = [&](const std::string &what) {
    error = what + ": " + systemError();
    ::close(fd);
    std::remove(tmp.c_str());
    return false;
  };
  for (std::string_view piece : pieces) {
    size_t done = 0;
    while (done < piece.size()) {
      ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return fail("cannot write " + tmp);
      done += size_t(n);
    }
  }
  if (::fsync(fd) != 0)
    return fail("cannot sync " + tmp);
  if (::close(fd) != 0) {
    error = "cannot write " + tmp + ": " + systemError();
    std::remove(tmp.c_str());
    return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + tmp + " to " + path + ": " + systemError();
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

} // namespace dtc::runtime
