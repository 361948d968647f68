//===- NpyFile.h - NumPy .npy files -----------------------------*- C++ -*-===//
//
// The .npy format as NumPy writes it (versions 1.0, 2.0 and 3.0; C order;
// little-endian or byte-order-free dtypes). Every size in a file is checked
// before it is used.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_NPYFILE_H
#define DTC_RUNTIME_NPYFILE_H

#include "runtime/HostTensor.h"

#include <string>

namespace dtc::runtime {

/// Reads the .npy file `path` whose bytes are `data` into `tensor`; false
/// with `error` naming the file.
bool readNpy(const std::string &path, const std::string &data, HostTensor &tensor,
             std::string &error);

/// The header NumPy's np.save writes for `descr` ('<f4', ...) and `type`'s
/// shape, byte for byte; the elements follow it.
std::string npyHeader(const char *descr, const plan::TensorType &type);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_NPYFILE_H
