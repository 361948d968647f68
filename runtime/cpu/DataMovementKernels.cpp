//===- DataMovementKernels.cpp - gather, transpose, concat, slice, ... ----===//
//
// These kernels move elements without reading them, so they work on bytes
// and care only about the element size: any dtype is served by one kernel
// per op (templates over 1-, 2-, 4- and 8-byte words where a loop moves
// single elements, memcpy wherever runs are contiguous), except that
// 4-byte transposes of the innermost dim go to oneDNN's JIT reorders.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Dnnl.h"
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <cstring>

namespace dtc::runtime::cpu {
namespace {

/// Element size of a dtype the byte movers take (any valid one).
bool checkMovable(plan::DType dtype, int64_t &bytes, std::string &error) {
  bytes = elementBytes(dtype);
  return bytes != 0 || checkDType(dtype, {}, error);
}

//===----------------------------------------------------------------------===//
// A strided view copied to a dense output: transpose and slice.
//===----------------------------------------------------------------------===//

/// Output element i (a multi-index over `sizes`) is input element
/// base + sum(i[d] * strides[d]); strides count elements and may be negative.
struct StridedView {
  Shape sizes, strides;
  int64_t base = 0;
};

/// Drops size-1 dims and merges dims that step through the input as one
/// (an attention permutation [0,2,1,3] keeps its last dim contiguous, so its
/// rows become memcpy's).
StridedView simplify(const StridedView &view) {
  StridedView out;
  out.base = view.base;
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] == 1)
      continue;
    if (!out.sizes.empty() && out.strides.back() == view.strides[d] * view.sizes[d]) {
      out.sizes.back() *= view.sizes[d];
      out.strides.back() = view.strides[d];
    } else {
      out.sizes.push_back(view.sizes[d]);
      out.strides.push_back(view.strides[d]);
    }
  }
  if (out.sizes.empty()) {
    out.sizes.push_back(1);
    out.strides.push_back(1);
  }
  return out;
}

/// Output rows copied together when the input is read with a stride.
constexpr int64_t kRowTile = 16;

/// Copies `rows` (<= kRowTile) output rows of n Words each; row t reads
/// from input element offsets[t], `stride` elements apart. Walking the rows
/// together, column by column, reads neighbouring input elements together
/// when the rows start at neighbouring offsets, as in a matrix transpose:
/// each input cache line is then used whole instead of once per row. (A
/// tile buffer, to write whole output lines too, measured slower.)
template <class Word>
void copyStridedRows(const char *in, const int64_t *offsets, int64_t rows, char *out,
                     int64_t n, int64_t stride) {
  constexpr int64_t size = sizeof(Word);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t t = 0; t < rows; ++t)
      std::memcpy(out + (t * n + j) * size, in + (offsets[t] + j * stride) * size, size);
}

using StridedRowsCopy = void (*)(const char *, const int64_t *, int64_t, char *, int64_t,
                                 int64_t);

StridedRowsCopy stridedRowsCopyFor(int64_t elementBytes) {
  switch (elementBytes) {
  case 1:
    return copyStridedRows<uint8_t>;
  case 2:
    return copyStridedRows<uint16_t>;
  case 4:
    return copyStridedRows<uint32_t>;
  default:
    return copyStridedRows<uint64_t>;
  }
}

/// Row-major element strides of `shape`.
Shape denseStrides(const Shape &shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

/// A strided view of 4-byte elements as a oneDNN reorder (its JIT
/// reorders transpose in registers), for views that read the innermost dim
/// with a stride: layout changes such as NCHW <-> NHWC, where the
/// strided-rows copy moves one element at a time. Null if oneDNN declines.
std::unique_ptr<Kernel> dnnlTransposeKernel(const StridedView &view) {
  if (view.sizes.size() > DNNL_MAX_NDIMS || product(view.sizes) == 0)
    return nullptr;
  for (int64_t stride : view.strides)
    if (stride <= 0)
      return nullptr;
  dnnl::memory::dims dims(view.sizes.begin(), view.sizes.end());
  Shape dense = denseStrides(view.sizes);
  auto f32 = dnnl::memory::data_type::f32; // only the 4-byte size matters
  try {
    dnnl::memory from(dnnl::memory::desc(dims, f32, dnnl::memory::dims(view.strides.begin(),
                                                                        view.strides.end())),
                      dnnlEngine(), DNNL_MEMORY_NONE);
    dnnl::memory to(dnnl::memory::desc(dims, f32, dnnl::memory::dims(dense.begin(), dense.end())),
                    dnnlEngine(), DNNL_MEMORY_NONE);
    dnnl::reorder reorder(from, to);
    int64_t base = view.base;
    return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                  ThreadPool &pool) mutable {
      from.set_data_handle(const_cast<float *>(static_cast<const float *>(inputs[0]) + base));
      to.set_data_handle(outputs[0]);
      executeDnnl(reorder, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, pool);
    });
  } catch (const dnnl::error &) {
    return nullptr;
  }
}

std::unique_ptr<Kernel> stridedViewKernel(const StridedView &original, int64_t elementBytes) {
  StridedView view = simplify(original);
  if (elementBytes == 4 && view.strides.back() != 1 && dnnlAllowed())
    if (auto kernel = dnnlTransposeKernel(view))
      return kernel;
  int64_t inner = view.sizes.back(), innerStride = view.strides.back();
  Shape outerSizes(view.sizes.begin(), view.sizes.end() - 1);
  Shape outerStrides(view.strides.begin(), view.strides.end() - 1);
  int64_t rows = product(outerSizes);
  StridedRowsCopy copyRows = stridedRowsCopyFor(elementBytes);
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const char *in = static_cast<const char *>(inputs[0]);
    char *out = static_cast<char *>(outputs[0]);
    int64_t rowBytes = inner * elementBytes;
    pool.parallelFor(rows, grainFor(inner), [&](int64_t begin, int64_t end) {
      // The input offsets of the rows, by an odometer.
      Odometer rowsAt;
      rowsAt.start(outerSizes.data(), outerStrides.data(), outerSizes.size(), begin);
      int64_t offsets[kRowTile];
      for (int64_t r = begin; r < end;) {
        int64_t tile = std::min(kRowTile, end - r);
        for (int64_t t = 0; t < tile; ++t, rowsAt.next())
          offsets[t] = view.base + rowsAt.offset();
        if (innerStride == 1) // contiguous rows, as attention permutations give
          for (int64_t t = 0; t < tile; ++t)
            std::memcpy(out + (r + t) * rowBytes, in + offsets[t] * elementBytes,
                        size_t(rowBytes));
        else
          copyRows(in, offsets, tile, out + r * rowBytes, inner, innerStride);
        r += tile;
      }
    });
  });
}

} // namespace

std::unique_ptr<Kernel> makeTransposeKernel(const plan::Instruction &inst,
                                            const KernelTypes &types, std::string &error) {
  int64_t bytes;
  if (!checkMovable(types.output.dtype(), bytes, error) || !checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]), y = shapeOf(types.output);
  Shape perm(inst.transpose().perm().begin(), inst.transpose().perm().end());
  std::vector<bool> seen(x.size(), false);
  bool valid = perm.size() == x.size();
  for (size_t d = 0; valid && d < perm.size(); ++d) {
    valid = perm[d] >= 0 && perm[d] < int64_t(x.size()) && !seen[size_t(perm[d])];
    if (valid)
      seen[size_t(perm[d])] = true;
  }
  if (!valid)
    return fail(error, "perm " + shapeString(perm) + " is not a permutation of the " +
                           std::to_string(x.size()) + " dims of input " + shapeString(x));
  Shape inStrides = denseStrides(x);
  StridedView view;
  for (int64_t p : perm) {
    view.sizes.push_back(x[size_t(p)]);
    view.strides.push_back(inStrides[size_t(p)]);
  }
  if (y != view.sizes)
    return fail(error, "output shape " + shapeString(y) + " should be " +
                           shapeString(view.sizes) + " for input " + shapeString(x) +
                           " and perm " + shapeString(perm));
  return stridedViewKernel(view, bytes);
}

std::unique_ptr<Kernel> makeSliceKernel(const plan::Instruction &inst,
                                        const KernelTypes &types, std::string &error) {
  const plan::Slice &op = inst.slice();
  int64_t bytes;
  if (!checkMovable(types.output.dtype(), bytes, error) || !checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]), y = shapeOf(types.output);
  if (y.size() != x.size() || op.offsets_size() != int(x.size()) ||
      op.strides_size() != int(x.size()))
    return fail(error, "input " + shapeString(x) + ", output " + shapeString(y) + ", " +
                           std::to_string(op.offsets_size()) + " offsets and " +
                           std::to_string(op.strides_size()) +
                           " strides should all have the same rank");
  Shape inStrides = denseStrides(x);
  StridedView view;
  view.sizes = y;
  for (size_t d = 0; d < x.size(); ++d) {
    int64_t offset = op.offsets(int(d)), stride = op.strides(int(d));
    int64_t last = offset + (y[d] - 1) * stride;
    if (y[d] > 0 && (stride == 0 || offset < 0 || offset >= x[d] || last < 0 || last >= x[d]))
      return fail(error, "dim " + std::to_string(d) + ": " + std::to_string(y[d]) +
                             " elements from offset " + std::to_string(offset) +
                             " with stride " + std::to_string(stride) +
                             " leave the input's size " + std::to_string(x[d]));
    view.base += offset * inStrides[d];
    view.strides.push_back(stride * inStrides[d]);
  }
  if (product(y) == 0)
    return makeFunctionKernel([](const void *const *, void *const *, ThreadPool &) {});
  return stridedViewKernel(view, bytes);
}

namespace {

/// Gather's geometry (scatter_add shares it): data [outer, dim, inner...]
/// indexed along `axis` by `count` indices.
struct GatherGeometry {
  int64_t axis = 0, outer = 0, dim = 0, count = 0, inner = 0;
  bool wide = false; // int64 indices
  bool skipOutside = false; // indices outside [0, dim) select nothing (row -1)
};

/// Checks data, indices and gathered shapes (`gathered` is what gather
/// returns and scatter_add adds) and reads the geometry.
bool readGatherGeometry(int64_t axis, const Shape &data, const plan::TensorType &indices,
                        const Shape &gathered, const char *gatheredName, GatherGeometry &g,
                        std::string &error) {
  plan::DType indexType = indices.dtype();
  if (indexType != plan::I64 && indexType != plan::I32) {
    error = "indices of dtype " + plan::DType_Name(indexType) + " are not supported (I64 or I32)";
    return false;
  }
  if (axis < 0 || axis >= int64_t(data.size())) {
    error = "axis " + std::to_string(axis) + " out of range for data " + shapeString(data);
    return false;
  }
  Shape indexShape = shapeOf(indices);
  Shape expected(data.begin(), data.begin() + axis);
  expected.insert(expected.end(), indexShape.begin(), indexShape.end());
  expected.insert(expected.end(), data.begin() + axis + 1, data.end());
  if (gathered != expected) {
    error = std::string(gatheredName) + " shape " + shapeString(gathered) + " should be " +
            shapeString(expected) + " for data " + shapeString(data) + ", indices " +
            shapeString(indexShape) + " and axis " + std::to_string(axis);
    return false;
  }
  g.axis = axis;
  g.outer = product(data, 0, size_t(axis));
  g.dim = data[size_t(axis)];
  g.count = product(indexShape);
  g.inner = product(data, size_t(axis) + 1, data.size());
  g.wide = indexType == plan::I64;
  return true;
}

/// The indices as rows in [0, dim) (negative ones count from the end);
/// false with a message naming `op` and the element when one is out of range.
/// With skip_outside, an index outside [0, dim) is row -1 (no wrap, no error).
bool readRows(const GatherGeometry &g, const void *indices, const char *op,
              std::vector<int64_t> &rows, std::string &error) {
  rows.resize(size_t(g.count));
  for (int64_t i = 0; i < g.count; ++i) {
    int64_t index = g.wide ? static_cast<const int64_t *>(indices)[i]
                           : static_cast<const int32_t *>(indices)[i];
    if (g.skipOutside) {
      rows[size_t(i)] = index >= 0 && index < g.dim ? index : -1;
      continue;
    }
    int64_t row = index < 0 ? index + g.dim : index;
    if (row < 0 || row >= g.dim) {
      error = std::string(op) + ": index " + std::to_string(index) + " (element " +
              std::to_string(i) + " of the indices) is out of range for axis " +
              std::to_string(g.axis) + " of size " + std::to_string(g.dim) +
              "; valid indices are " + std::to_string(-g.dim) + " to " +
              std::to_string(g.dim - 1);
      return false;
    }
    rows[size_t(i)] = row;
  }
  return true;
}

} // namespace

std::unique_ptr<Kernel> makeGatherKernel(const plan::Instruction &inst,
                                         const KernelTypes &types, std::string &error) {
  int64_t bytes;
  if (!checkMovable(types.output.dtype(), bytes, error))
    return nullptr;
  if (types.inputs[0].dtype() != types.output.dtype())
    return fail(error, "data has dtype " + plan::DType_Name(types.inputs[0].dtype()) +
                           " but the output has " + plan::DType_Name(types.output.dtype()));
  GatherGeometry g;
  if (!readGatherGeometry(inst.gather().axis(), shapeOf(types.inputs[0]), types.inputs[1],
                          shapeOf(types.output), "output", g, error))
    return nullptr;
  g.skipOutside = inst.gather().skip_outside();
  int64_t sliceBytes = g.inner * bytes;
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool, std::string &error) {
    const char *in = static_cast<const char *>(inputs[0]);
    char *out = static_cast<char *>(outputs[0]);
    // Indices are data: checked on every run, before anything is written.
    std::vector<int64_t> rows;
    if (!readRows(g, inputs[1], "gather", rows, error))
      return false;
    pool.parallelFor(g.outer * g.count, grainFor(g.inner), [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        int64_t o = item / g.count, row = rows[size_t(item % g.count)];
        if (row < 0) // skipped: another rank's row
          std::memset(out + item * sliceBytes, 0, size_t(sliceBytes));
        else
          std::memcpy(out + item * sliceBytes, in + (o * g.dim + row) * sliceBytes,
                      size_t(sliceBytes));
      }
    });
    return true;
  });
}

// Rows sharing an index add up, so threads split the columns of each row
// (not the indices) and never write the same element.
std::unique_ptr<Kernel> makeScatterAddKernel(const plan::Instruction &inst,
                                             const KernelTypes &types, std::string &error) {
  if (!checkDType(types.output.dtype(), {plan::F32}, error))
    return nullptr;
  if (types.inputs[0].dtype() != plan::F32)
    return fail(error, "updates have dtype " + plan::DType_Name(types.inputs[0].dtype()) +
                           " but the output has F32");
  GatherGeometry g;
  if (!readGatherGeometry(inst.scatter_add().axis(), shapeOf(types.output), types.inputs[1],
                          shapeOf(types.inputs[0]), "updates", g, error))
    return nullptr;
  g.skipOutside = inst.scatter_add().skip_outside();
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool, std::string &error) {
    const float *updates = static_cast<const float *>(inputs[0]);
    float *out = static_cast<float *>(outputs[0]);
    std::vector<int64_t> rows;
    if (!readRows(g, inputs[1], "scatter_add", rows, error))
      return false;
    pool.parallelFor(g.outer * g.inner, grainFor(g.count + g.dim),
                     [&](int64_t b, int64_t e) {
      // Columns [b, e) of the flattened [outer, inner] space, as runs per outer.
      while (b < e) {
        int64_t o = b / g.inner, c0 = b % g.inner, c1 = std::min(g.inner, c0 + (e - b));
        float *base = out + o * g.dim * g.inner;
        for (int64_t r = 0; r < g.dim; ++r)
          std::fill(base + r * g.inner + c0, base + r * g.inner + c1, 0.0f);
        const float *source = updates + o * g.count * g.inner;
        for (int64_t i = 0; i < g.count; ++i) {
          if (rows[size_t(i)] < 0) // skipped: another rank's row
            continue;
          float *dst = base + rows[size_t(i)] * g.inner;
          const float *src = source + i * g.inner;
          for (int64_t c = c0; c < c1; ++c)
            dst[c] += src[c];
        }
        b += c1 - c0;
      }
    });
    return true;
  });
}

std::unique_ptr<Kernel> makeConcatKernel(const plan::Instruction &inst,
                                         const KernelTypes &types, std::string &error) {
  int64_t bytes;
  if (!checkMovable(types.output.dtype(), bytes, error) || !checkSameDType(types, error))
    return nullptr;
  Shape y = shapeOf(types.output);
  int64_t axis = inst.concat().axis();
  if (axis < 0 || axis >= int64_t(y.size()))
    return fail(error, "axis " + std::to_string(axis) + " out of range for output " +
                           shapeString(y));
  // Each input is `outer` blocks of blockBytes[i], interleaved in the output.
  std::vector<int64_t> blockBytes, blockOffsets;
  int64_t total = 0, inner = product(y, size_t(axis) + 1, y.size()) * bytes;
  for (const plan::TensorType &type : types.inputs) {
    Shape x = shapeOf(type);
    Shape expected = y;
    if (x.size() == y.size())
      expected[size_t(axis)] = x[size_t(axis)];
    if (x != expected)
      return fail(error, "input " + shapeString(x) + " should match the output " +
                             shapeString(y) + " except along axis " + std::to_string(axis));
    blockOffsets.push_back(total);
    blockBytes.push_back(x[size_t(axis)] * inner);
    total += x[size_t(axis)];
  }
  if (total != y[size_t(axis)])
    return fail(error, "the inputs' sizes along axis " + std::to_string(axis) + " add up to " +
                           std::to_string(total) + ", but the output has " +
                           std::to_string(y[size_t(axis)]));
  for (int64_t &offset : blockOffsets)
    offset *= inner;
  int64_t outer = product(y, 0, size_t(axis)), outBlock = total * inner;
  int64_t pieces = int64_t(types.inputs.size());
  int64_t averageBytes = outBlock / pieces;
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    char *out = static_cast<char *>(outputs[0]);
    pool.parallelFor(outer * pieces, grainFor(averageBytes / bytes), [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        int64_t o = item / pieces, i = item % pieces;
        std::memcpy(out + o * outBlock + blockOffsets[i],
                    static_cast<const char *>(inputs[i]) + o * blockBytes[i],
                    size_t(blockBytes[i]));
      }
    });
  });
}

std::unique_ptr<Kernel> makeCopyKernel(const plan::Instruction &inst,
                                       const KernelTypes &types, std::string &error) {
  int64_t inBytes, outBytes;
  if (!checkMovable(types.inputs[0].dtype(), inBytes, error) ||
      !checkMovable(types.output.dtype(), outBytes, error))
    return nullptr;
  inBytes *= product(shapeOf(types.inputs[0]));
  outBytes *= product(shapeOf(types.output));
  if (inBytes != outBytes)
    return fail(error, "input " + shapeString(types.inputs[0]) + " has " +
                           std::to_string(inBytes) + " bytes but output " +
                           shapeString(types.output) + " has " + std::to_string(outBytes));
  int64_t elementSize = elementBytes(types.output.dtype());
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const char *in = static_cast<const char *>(inputs[0]);
    char *out = static_cast<char *>(outputs[0]);
    if (in == out)
      return;
    pool.parallelFor(outBytes, kSerialWork * elementSize, [&](int64_t b, int64_t e) {
      std::memcpy(out + b, in + b, size_t(e - b));
    });
  });
}

std::unique_ptr<Kernel> makeTriluKernel(const plan::Instruction &inst,
                                        const KernelTypes &types, std::string &error) {
  int64_t bytes;
  if (!checkMovable(types.output.dtype(), bytes, error) || !checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]);
  if (x.size() < 2)
    return fail(error, "input must have rank >= 2, got " + shapeString(x));
  if (!checkSameShape(types, error))
    return nullptr;
  int64_t rowsPerMatrix = x[x.size() - 2], cols = x.back();
  int64_t rows = product(x, 0, x.size() - 1);
  bool upper = inst.trilu().upper();
  int64_t k = inst.trilu().k();
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const char *in = static_cast<const char *>(inputs[0]);
    char *out = static_cast<char *>(outputs[0]);
    pool.parallelFor(rows, grainFor(cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        // Row i keeps columns j with j - i >= k (upper) or j - i <= k
        // (lower); zero bytes are zero in every dtype.
        int64_t i = r % rowsPerMatrix;
        int64_t keepBegin = upper ? std::clamp<int64_t>(i + k, 0, cols) : 0;
        int64_t keepEnd = upper ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
        char *dst = out + r * cols * bytes;
        const char *src = in + r * cols * bytes;
        std::memset(dst, 0, size_t(keepBegin * bytes));
        if (src != dst)
          std::memcpy(dst + keepBegin * bytes, src + keepBegin * bytes,
                      size_t((keepEnd - keepBegin) * bytes));
        std::memset(dst + keepEnd * bytes, 0, size_t((cols - keepEnd) * bytes));
      }
    });
  });
}

} // namespace dtc::runtime::cpu
