//===- Crc32cTest.cpp - CRC-32C checksums ---------------------------------===//
#include "runtime/Crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace dtc::runtime;

TEST(Crc32cTest, KnownValuesAndBothPaths) {
  // RFC 3720, B.4: the CRC-32C test vectors.
  std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xe3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62a8ab43u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  // Every length and alignment: the instruction's path equals the table's,
  // and a CRC continues over pieces.
  std::vector<char> bytes(301);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = char(i * 37 + 16);
  for (size_t from = 0; from < 9; ++from)
    for (size_t size = 0; from + size <= bytes.size(); size += 7) {
      uint32_t whole = crc32c(bytes.data() + from, size);
      EXPECT_EQ(whole, crc32cBySoftware(bytes.data() + from, size));
      size_t half = size / 2;
      EXPECT_EQ(whole, crc32c(bytes.data() + from + half, size - half,
                                       crc32c(bytes.data() + from, half)));
    }
}
