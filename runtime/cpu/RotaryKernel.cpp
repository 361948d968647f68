//===- RotaryKernel.cpp - a rotary position embedding ---------------------===//
//
// Over the last dim (D even, h = D / 2): out = x cos + rotate_half(x) sin,
// rotate_half(x)[i] = -x[i + h] for i < h and x[i - h] after; backward,
// out = x cos - rotate_half(x sin). A row of D at a time, rows split over
// the threads; cos and sin broadcast to x (their offset per row from the
// row's coordinates, a dim of 1 contributing none). f32 here: 16-bit
// inputs and outputs are widened and narrowed around it (Kernels.cpp).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>

namespace dtc::runtime::cpu {
namespace {

/// Where each row's part of a table broadcast to x starts: its offset for
/// x's row r (x's leading dims' coordinates, the table's dims aligned from
/// the right, a dim of 1 read at 0).
std::vector<int64_t> tableRows(const Shape &x, const Shape &table) {
  int64_t rows = product(x, 0, x.size() - 1), d = x.back();
  std::vector<int64_t> at(size_t(rows), 0);
  size_t lead = x.size() - table.size();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, stride = d, offset = 0;
    for (size_t k = x.size() - 1; k-- > 0;) {
      int64_t digit = rest % x[k];
      rest /= x[k];
      if (k >= lead) {
        int64_t n = table[k - lead];
        if (n != 1)
          offset += digit * stride;
        stride *= n;
      }
    }
    at[size_t(r)] = offset;
  }
  return at;
}

} // namespace

std::unique_ptr<Kernel> makeRotaryKernel(const plan::Instruction &inst, const KernelTypes &types,
                                         std::string &error) {
  const plan::TensorType &x = types.inputs[0];
  Shape shape = shapeOf(x);
  if (x.dtype() != plan::F32 || shape.empty() || shape.back() % 2)
    return fail(error, "x must be a float tensor with an even last dim, got " + shapeString(x));
  for (size_t t : {1, 2}) {
    Shape table = shapeOf(types.inputs[t]);
    bool fits = types.inputs[t].dtype() == plan::F32 && !table.empty() &&
                table.size() <= shape.size() && table.back() == shape.back();
    for (size_t k = 0; fits && k < table.size(); ++k)
      fits = table[k] == 1 || table[k] == shape[shape.size() - table.size() + k];
    if (!fits)
      return fail(error, std::string(t == 1 ? "cos " : "sin ") + shapeString(types.inputs[t]) +
                             " does not broadcast to x " + shapeString(x) +
                             " with its last dim");
  }
  if (types.outputs[0].dtype() != plan::F32 || shapeOf(types.outputs[0]) != shape)
    return fail(error, "the output must have x's type");
  std::vector<int64_t> cosAt = tableRows(shape, shapeOf(types.inputs[1])),
                       sinAt = tableRows(shape, shapeOf(types.inputs[2]));
  int64_t d = shape.back(), h = d / 2, rows = product(shape, 0, shape.size() - 1);
  bool backward = inst.rotary().backward();
  return makeFunctionKernel([=](const void *const *in, void *const *outs, ThreadPool &pool) {
    const float *xs = static_cast<const float *>(in[0]), *cs = static_cast<const float *>(in[1]),
                *ss = static_cast<const float *>(in[2]);
    float *out = static_cast<float *>(outs[0]);
    pool.parallelFor(rows, std::max<int64_t>(1, 4096 / d), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float *row = xs + r * d, *c = cs + cosAt[size_t(r)], *s = ss + sinAt[size_t(r)];
        float *o = out + r * d;
        for (int64_t i = 0; i < d; ++i) {
          int64_t j = i < h ? i + h : i - h; // the partner
          float sign = i < h ? -1.f : 1.f;
          // forward: x c + r(x) s; backward: x c - r(x s).
          float rotated = backward ? -sign * row[j] * s[j] : sign * row[j] * s[i];
          o[i] = row[i] * c[i] + rotated;
        }
      }
    });
  });
}

} // namespace dtc::runtime::cpu
