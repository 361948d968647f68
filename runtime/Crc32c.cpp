//===- Crc32c.cpp - CRC-32C checksums -------------------------------------===//
#include "runtime/Crc32c.h"

#include <array>
#include <cstring>

namespace dtc::runtime {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78; // 0x1edc6f41 bit-reversed

/// tables[k][b]: the CRC of byte b followed by k zero bytes, for slicing
/// eight bytes at a time.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t;
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i)
        c = (c >> 1) ^ (c & 1 ? kPolynomial : 0);
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (size_t k = 1; k < 8; ++k)
        t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
};

uint32_t bySoftware(const unsigned char *p, size_t n, uint32_t c) {
  static const Tables tables;
  const auto &t = tables.t;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    word ^= c; // little-endian: the CRC meets the first four bytes
    c = t[7][word & 0xff] ^ t[6][(word >> 8) & 0xff] ^ t[5][(word >> 16) & 0xff] ^
        t[4][(word >> 24) & 0xff] ^ t[3][(word >> 32) & 0xff] ^ t[2][(word >> 40) & 0xff] ^
        t[1][(word >> 48) & 0xff] ^ t[0][word >> 56];
  }
  for (; n > 0; ++p, --n)
    c = (c >> 8) ^ t[0][(c ^ *p) & 0xff];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t byInstruction(const unsigned char *p, size_t n,
                                                         uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = __builtin_ia32_crc32di(c64, word);
  }
  c = uint32_t(c64);
  for (; n > 0; ++p, --n)
    c = __builtin_ia32_crc32qi(c, *p);
  return c;
}
#endif

} // namespace

uint32_t crc32c(const void *data, size_t size, uint32_t crc) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the slicing assumes little-endian");
  auto *p = static_cast<const unsigned char *>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  c = hardware ? byInstruction(p, size, c) : bySoftware(p, size, c);
#else
  c = bySoftware(p, size, c);
#endif
  return ~c;
}

/// For the test: the table path whatever the CPU.
uint32_t crc32cBySoftware(const void *data, size_t size, uint32_t crc) {
  return ~bySoftware(static_cast<const unsigned char *>(data), size, ~crc);
}

} // namespace dtc::runtime
