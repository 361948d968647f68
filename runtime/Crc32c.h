//===- Crc32c.h - CRC-32C checksums -----------------------------*- C++ -*-===//
//
// CRC-32C (Castagnoli, the polynomial iSCSI, ext4 and most storage formats
// use), which checkpoints carry per tensor and per file. Computed with the
// CPU's crc32 instruction where it has one (x86 SSE 4.2), else by table.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CRC32C_H
#define DTC_RUNTIME_CRC32C_H

#include <cstddef>
#include <cstdint>

namespace dtc::runtime {

/// The CRC-32C of `size` bytes at `data`, continuing `crc` (the CRC of the
/// bytes before them; 0 to start): crc32c(b, crc32c(a)) == crc32c(a + b).
uint32_t crc32c(const void *data, size_t size, uint32_t crc = 0);

/// The same by table, whatever the CPU has (for tests of both paths).
uint32_t crc32cBySoftware(const void *data, size_t size, uint32_t crc = 0);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CRC32C_H
