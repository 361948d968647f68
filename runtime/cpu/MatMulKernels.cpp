//===- MatMulKernels.cpp - matmul through oneDNN, or OpenBLAS sgemm -------===//
//
// oneDNN's matmul primitive runs every f32 matmul it accepts, its weights
// reordered once when they are constant; OpenBLAS runs the rest (empty
// operands, batch patterns oneDNN declines).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Dnnl.h"
#include "runtime/cpu/ElementwiseOps.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>

namespace dtc::runtime::cpu {
namespace {

/// Below this many multiply-adds, OpenBLAS threading one sgemm costs more
/// than it saves: a batch of attention-sized [128,64]x[64,128] products ran
/// faster split over the pool than with each call threaded. Batches of such
/// GEMMs are split over the pool, each sgemm on one thread.
/// OpenBLAS's pthread build (USE_THREAD=1) locks its shared buffers, and its
/// FAQ prescribes exactly this for callers that thread themselves.
constexpr int64_t kSmallGemmWork = int64_t(1) << 22;

/// graph.gelu's tanh form, as the elementwise kernels compute it.
float geluTanh(float x) { return elementwise::GeluTanhOp()(x); }

/// A linear layer's epilogue on rows of `n`: the bias added, then the
/// activation (as graph.relu and graph.gelu's tanh form compute them).
void applyEpilogue(float *out, int64_t rows, int64_t n, const float *bias,
                   plan::Activation activation) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float x = out[r * n + c] + bias[c];
      if (activation == plan::ACTIVATION_RELU)
        x = x > 0 ? x : 0.0f;
      else if (activation == plan::ACTIVATION_GELU_TANH)
        x = geluTanh(x);
      out[r * n + c] = x;
    }
}

class MatMulKernel final : public Kernel {
public:
  MatMulKernel(Gemm gemm, std::vector<std::pair<int64_t, int64_t>> batches, bool bias,
               plan::Activation activation)
      : gemm_(gemm), batches_(std::move(batches)), bias_(bias), activation_(activation) {}

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &) override {
    const float *lhs = static_cast<const float *>(inputs[0]);
    const float *rhs = static_cast<const float *>(inputs[1]);
    float *out = static_cast<float *>(outputs[0]);
    int64_t lhsSize = gemm_.M * gemm_.K, rhsSize = gemm_.K * gemm_.N,
            outSize = gemm_.M * gemm_.N;
    const float *bias = bias_ ? static_cast<const float *>(inputs[2]) : nullptr;
    auto runBatches = [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        gemm_.run(lhs + batches_[b].first * lhsSize, rhs + batches_[b].second * rhsSize,
                  out + b * outSize);
        if (bias)
          applyEpilogue(out + b * outSize, gemm_.M, gemm_.N, bias, activation_);
      }
    };
    int64_t count = int64_t(batches_.size());
    if (pool.threads() > 1 && count >= pool.threads() && gemm_.work() < kSmallGemmWork) {
      SingleThreadedBlas single(pool);
      pool.parallelFor(count, 1, runBatches);
    } else {
      runBatches(0, count);
    }
    return true;
  }

private:
  Gemm gemm_;
  /// Per output matrix, the lhs and rhs matrices it multiplies.
  std::vector<std::pair<int64_t, int64_t>> batches_;
  bool bias_;
  plan::Activation activation_;
};

/// A linear layer that keeps its preactivation (a tanh GELU's input, for
/// its gradient): `inner` writes the biased product into the second
/// output, the GELU of it goes into the first (oneDNN's vectorized
/// eltwise, else a loop of the elementwise kernels' GELU).
class KeepPreactivation final : public Kernel {
public:
  KeepPreactivation(std::unique_ptr<Kernel> inner, int64_t size)
      : inner_(std::move(inner)), size_(size) {
    if (!dnnlAllowed() || size <= 0)
      return;
    try {
      data_ = plainF32({size}, {1});
      gelu_ = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::eltwise_gelu_tanh, *data_, 0.0f, 0.0f),
          dnnlEngine()));
    } catch (const dnnl::error &) {
      gelu_.reset();
    }
  }

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override {
    void *pre = outputs[1];
    if (!inner_->run(inputs, &pre, pool, error))
      return false;
    if (gelu_) {
      executeDnnl(*gelu_,
                  {{DNNL_ARG_SRC, dnnl::memory(*data_, dnnlEngine(), pre)},
                   {DNNL_ARG_DST, dnnl::memory(*data_, dnnlEngine(), outputs[0])}},
                  pool);
      return true;
    }
    const float *x = static_cast<const float *>(pre);
    float *y = static_cast<float *>(outputs[0]);
    pool.parallelFor(size_, kSerialWork, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        y[i] = geluTanh(x[i]);
    });
    return true;
  }
  bool runsAlongsideOthers() const override { return inner_->runsAlongsideOthers(); }

private:
  std::unique_ptr<Kernel> inner_;
  int64_t size_;
  std::optional<dnnl::memory::desc> data_;
  std::optional<dnnl::eltwise_forward> gelu_;
};

/// A biased product with an addend (its last input, of the output's
/// type): `inner` writes the product as without it, then the addend is
/// added (in f32, as cuBLASLt adds its C before rounding).
class WithAddend final : public Kernel {
public:
  WithAddend(std::unique_ptr<Kernel> inner, size_t addend, int64_t size)
      : inner_(std::move(inner)), addend_(addend), size_(size) {}

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override {
    if (!inner_->run(inputs, outputs, pool, error))
      return false;
    const float *c = static_cast<const float *>(inputs[addend_]);
    float *y = static_cast<float *>(outputs[0]);
    pool.parallelFor(size_, kSerialWork, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        y[i] += c[i];
    });
    return true;
  }
  bool runsAlongsideOthers() const override { return inner_->runsAlongsideOthers(); }

private:
  std::unique_ptr<Kernel> inner_;
  size_t addend_;
  int64_t size_;
};

/// The product x^T dy (inner) and the sum of dy's rows (a bias's
/// gradient, `rows` x `columns`, the second output): each thread sums a
/// block of columns over every row, in row order.
class WithBiasGradient final : public Kernel {
public:
  WithBiasGradient(std::unique_ptr<Kernel> inner, int64_t rows, int64_t columns)
      : inner_(std::move(inner)), rows_(rows), columns_(columns) {}

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override {
    if (!inner_->run(inputs, outputs, pool, error))
      return false;
    const float *dy = static_cast<const float *>(inputs[1]);
    float *sum = static_cast<float *>(outputs[1]);
    pool.parallelFor(columns_, std::max<int64_t>(1, kSerialWork / std::max<int64_t>(1, rows_)),
                     [&](int64_t b, int64_t e) {
                       std::fill(sum + b, sum + e, 0.0f);
                       for (int64_t r = 0; r < rows_; ++r)
                         for (int64_t c = b; c < e; ++c)
                           sum[c] += dy[r * columns_ + c];
                     });
    return true;
  }
  bool runsAlongsideOthers() const override { return inner_->runsAlongsideOthers(); }

private:
  std::unique_ptr<Kernel> inner_;
  int64_t rows_, columns_;
};

/// The product (inner) times tanh GELU's derivative at the third input, as
/// autodiff writes the derivative (dialects/graph/Gradients.cpp) and the
/// elementwise kernels evaluate its tanh.
class WithGeluGradient final : public Kernel {
public:
  WithGeluGradient(std::unique_ptr<Kernel> inner, int64_t size)
      : inner_(std::move(inner)), size_(size) {}

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override {
    if (!inner_->run(inputs, outputs, pool, error))
      return false;
    const float *x = static_cast<const float *>(inputs[2]);
    float *y = static_cast<float *>(outputs[0]);
    const float c = float(std::sqrt(2.0 / M_PI)), ca = float(std::sqrt(2.0 / M_PI) * 0.044715),
                c3a = float(3.0 * 0.044715 * std::sqrt(2.0 / M_PI));
    pool.parallelFor(size_, kSerialWork, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float v = x[i], v2 = v * v, t = elementwise::TanhOp()(v * (c + v2 * ca));
        float left = 0.5f * (1.0f + t), right = (v * 0.5f) * ((1.0f - t * t) * (c + v2 * c3a));
        y[i] *= left + right;
      }
    });
    return true;
  }
  bool runsAlongsideOthers() const override { return inner_->runsAlongsideOthers(); }

private:
  std::unique_ptr<Kernel> inner_;
  int64_t size_;
};

/// A matmul as one oneDNN primitive over strided views of the buffers.
class DnnlMatMulKernel final : public Kernel {
public:
  DnnlMatMulKernel(dnnl::matmul::primitive_desc pd, dnnl::memory src, dnnl::memory weights,
                   dnnl::memory dst, bool constantWeights, std::optional<dnnl::memory> bias)
      : primitive_(pd), src_(std::move(src)), weights_(std::move(weights)),
        dst_(std::move(dst)), constantWeights_(constantWeights), bias_(std::move(bias)) {}

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &) override {
    src_.set_data_handle(const_cast<void *>(inputs[0]));
    if (!constantWeights_)
      weights_.set_data_handle(const_cast<void *>(inputs[1]));
    dst_.set_data_handle(outputs[0]);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_}};
    if (bias_) {
      bias_->set_data_handle(const_cast<void *>(inputs[2]));
      args.emplace(DNNL_ARG_BIAS, *bias_);
    }
    executeDnnl(primitive_, args, pool);
    return true;
  }

private:
  dnnl::matmul primitive_;
  dnnl::memory src_, weights_, dst_;
  bool constantWeights_;
  std::optional<dnnl::memory> bias_; // the epilogue's, [1.., N]
};

/// Dense row-major strides of `shape`.
dnnl::memory::dims denseStrides(const Shape &shape) {
  dnnl::memory::dims strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    strides[i - 1] = strides[i] * std::max<int64_t>(shape[i], 1);
  return strides;
}

/// An operand stored as `stored` (batch dims padded with leading 1s to
/// `rank`), seen as its logical [..., rows, cols]: the last two dims swap
/// when `transposed`.
dnnl::memory::desc operandDesc(Shape stored, size_t rank, bool transposed) {
  stored.insert(stored.begin(), rank - stored.size(), 1);
  dnnl::memory::dims dims(stored.begin(), stored.end()), strides = denseStrides(stored);
  if (transposed) {
    std::swap(dims[rank - 1], dims[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
  }
  return plainF32(dims, strides);
}

/// The oneDNN matmul for `gemm` over operands of the given shapes, or null
/// when oneDNN declines it. `collapsed`: the lhs batch is folded into M.
std::unique_ptr<Kernel> makeDnnlMatMul(const Gemm &gemm, const Shape &lhs, const Shape &rhs,
                                       const Shape &out, bool collapsed,
                                       const void *constantRhs, const plan::MatMul &op) {
  if (!dnnlAllowed() || gemm.M == 0 || gemm.N == 0 || gemm.K == 0)
    return nullptr;
  dnnl::memory::desc src, weights, dst;
  if (collapsed) {
    src = operandDesc({gemm.M, gemm.K}, 2, false);
    // The rhs's batch dims are all 1 (or absent): its last two are the matrix.
    weights = operandDesc(Shape(rhs.end() - 2, rhs.end()), 2, gemm.transB);
    dst = operandDesc({gemm.M, gemm.N}, 2, false);
  } else {
    size_t rank = out.size();
    src = operandDesc(lhs, rank, gemm.transA);
    weights = operandDesc(rhs, rank, gemm.transB);
    dst = operandDesc(out, rank, false);
  }
  try {
    // The epilogue: the bias as [1.., N] broadcast over the rows, the
    // activation a post-op.
    dnnl::primitive_attr attr;
    std::optional<dnnl::memory::desc> bias;
    if (op.bias()) {
      dnnl::memory::dims dims(collapsed ? 2 : out.size(), 1);
      dims.back() = gemm.N;
      bias = plainF32(dims, denseStrides(Shape(dims.begin(), dims.end())));
      dnnl::post_ops ops;
      if (op.activation() == plan::ACTIVATION_RELU)
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      if (op.activation() == plan::ACTIVATION_GELU_TANH)
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    auto desc = bias ? dnnl::matmul::desc(src, weightsRequest(weights, constantRhs), *bias, dst)
                     : dnnl::matmul::desc(src, weightsRequest(weights, constantRhs), dst);
    dnnl::matmul::primitive_desc pd(desc, attr, dnnlEngine());
    std::optional<dnnl::memory> biasMemory;
    if (bias)
      biasMemory = dnnl::memory(*bias, dnnlEngine(), DNNL_MEMORY_NONE);
    return std::make_unique<DnnlMatMulKernel>(
        pd, dnnl::memory(src, dnnlEngine(), DNNL_MEMORY_NONE),
        weightsMemory(weights, constantRhs, pd.weights_desc()),
        dnnl::memory(dst, dnnlEngine(), DNNL_MEMORY_NONE), constantRhs != nullptr,
        std::move(biasMemory));
  } catch (const dnnl::error &) {
    return nullptr;
  }
}

} // namespace

std::unique_ptr<Kernel> makeMatMulKernel(const plan::Instruction &inst,
                                         const KernelTypes &types, std::string &error) {
  const plan::MatMul &op = inst.matmul();
  if (op.addend()) {
    if (op.activation() != plan::ACTIVATION_NONE || op.keep_preactivation() ||
        op.gelu_gradient() || op.bias_gradient())
      return fail(error, "only a matmul without an activation or epilogue output takes an "
                         "addend");
    size_t at = op.bias() ? 3 : 2; // after the operands and the bias
    if (types.inputs.size() != at + 1 || types.inputs[at].dtype() != types.output.dtype() ||
        shapeOf(types.inputs[at]) != shapeOf(types.output))
      return fail(error, "the addend must be a last input like the output");
    plan::Instruction plain = inst;
    plain.mutable_matmul()->set_addend(false);
    std::vector<plan::TensorType> operands(types.inputs.begin(), types.inputs.end() - 1);
    KernelTypes plainTypes{operands, types.output, types.constants, types.outputs};
    std::unique_ptr<Kernel> inner = makeMatMulKernel(plain, plainTypes, error);
    if (!inner)
      return nullptr;
    return std::make_unique<WithAddend>(std::move(inner), at, product(shapeOf(types.output)));
  }
  if (op.gelu_gradient()) {
    if (op.bias() || op.activation() != plan::ACTIVATION_NONE || op.addend() ||
        op.keep_preactivation() || op.bias_gradient())
      return fail(error, "only a plain product is multiplied by a GELU's derivative");
    if (types.inputs.size() != 3 || shapeOf(types.inputs[2]) != shapeOf(types.output))
      return fail(error, "the GELU's input must be a third input of the output's shape");
    plan::Instruction plain = inst;
    plain.mutable_matmul()->set_gelu_gradient(false);
    std::vector<plan::TensorType> two(types.inputs.begin(), types.inputs.end() - 1);
    KernelTypes plainTypes{two, types.output, types.constants, types.outputs};
    std::unique_ptr<Kernel> inner = makeMatMulKernel(plain, plainTypes, error);
    if (!inner)
      return nullptr;
    return std::make_unique<WithGeluGradient>(std::move(inner), product(shapeOf(types.output)));
  }
  if (op.bias_gradient()) {
    if (op.bias() || op.activation() != plan::ACTIVATION_NONE || op.addend() ||
        op.keep_preactivation() || !op.transpose_lhs() || op.transpose_rhs())
      return fail(error, "only a plain x^T dy product sums its rhs's rows");
    Shape rhs = types.inputs.size() == 2 ? shapeOf(types.inputs[1]) : Shape{};
    if (rhs.size() != 2 || shapeOf(types.inputs[0]).size() != 2 || types.outputs.size() != 2 ||
        product(shapeOf(types.outputs[1])) != rhs[1])
      return fail(error, "the rows' sum needs 2-D operands and a second output of the rhs's "
                         "columns");
    plan::Instruction plain = inst;
    plain.mutable_matmul()->set_bias_gradient(false);
    std::vector<plan::TensorType> one{types.output};
    KernelTypes plainTypes{types.inputs, types.output, types.constants, one};
    std::unique_ptr<Kernel> inner = makeMatMulKernel(plain, plainTypes, error);
    if (!inner)
      return nullptr;
    return std::make_unique<WithBiasGradient>(std::move(inner), rhs[0], rhs[1]);
  }
  if (op.keep_preactivation()) {
    if (!op.bias() || op.activation() != plan::ACTIVATION_GELU_TANH)
      return fail(error, "only a matmul with a bias and a tanh GELU keeps its preactivation");
    if (types.outputs.size() != 2 || types.outputs[1].dtype() != types.output.dtype() ||
        shapeOf(types.outputs[1]) != shapeOf(types.output))
      return fail(error, "the preactivation must be a second output like the first");
    plan::Instruction biased = inst;
    biased.mutable_matmul()->set_activation(plan::ACTIVATION_NONE);
    biased.mutable_matmul()->set_keep_preactivation(false);
    std::vector<plan::TensorType> one{types.output};
    KernelTypes biasedTypes{types.inputs, types.output, types.constants, one};
    std::unique_ptr<Kernel> inner = makeMatMulKernel(biased, biasedTypes, error);
    if (!inner)
      return nullptr;
    return std::make_unique<KeepPreactivation>(std::move(inner), product(shapeOf(types.output)));
  }
  if (!checkDType(types.output.dtype(), {plan::F32}, error) ||
      !checkSameDType(types, error))
    return nullptr;
  if (int64_t(types.inputs.size()) != (op.bias() ? 3 : 2))
    return fail(error, op.bias() ? "a matmul with a bias takes 3 inputs"
                                 : "a matmul without a bias takes 2 inputs");
  Shape lhs = shapeOf(types.inputs[0]), rhs = shapeOf(types.inputs[1]),
        out = shapeOf(types.output);
  auto operands = [&] { return "lhs " + shapeString(lhs) + ", rhs " + shapeString(rhs); };
  if (lhs.size() < 2 || rhs.size() < 2)
    return fail(error, "operands need rank >= 2: " + operands());
  size_t lr = lhs.size(), rr = rhs.size();
  Gemm gemm;
  gemm.transA = op.transpose_lhs();
  gemm.transB = op.transpose_rhs();
  gemm.M = lhs[lr - (gemm.transA ? 1 : 2)];
  gemm.K = lhs[lr - (gemm.transA ? 2 : 1)];
  int64_t rhsK = rhs[rr - (gemm.transB ? 1 : 2)];
  gemm.N = rhs[rr - (gemm.transB ? 2 : 1)];
  gemm.lda = lhs[lr - 1];
  gemm.ldb = rhs[rr - 1];
  if (gemm.K != rhsK)
    return fail(error, "contraction sizes differ: " + operands() +
                           (gemm.transA || gemm.transB ? " (after transposes)" : ""));

  // NumPy broadcasting of the batch dims, right-aligned.
  size_t batchRank = std::max(lr, rr) - 2;
  Shape batch(batchRank), lhsStride(batchRank, 0), rhsStride(batchRank, 0);
  int64_t lhsCount = 1, rhsCount = 1;
  for (size_t i = batchRank; i-- > 0;) {
    size_t fromEnd = batchRank - i; // 1 for the innermost batch dim
    int64_t l = fromEnd <= lr - 2 ? lhs[lr - 2 - fromEnd] : 1;
    int64_t r = fromEnd <= rr - 2 ? rhs[rr - 2 - fromEnd] : 1;
    if (l != r && l != 1 && r != 1)
      return fail(error, "batch dims do not broadcast: " + operands());
    batch[i] = l == 1 ? r : l;
    lhsStride[i] = l == 1 ? 0 : lhsCount;
    rhsStride[i] = r == 1 ? 0 : rhsCount;
    lhsCount *= l;
    rhsCount *= r;
  }
  Shape expected = batch;
  expected.push_back(gemm.M);
  expected.push_back(gemm.N);
  if (out != expected)
    return fail(error, "output shape " + shapeString(out) + " should be " +
                           shapeString(expected) + " for " + operands());

  std::vector<std::pair<int64_t, int64_t>> batches;
  bool collapsed = rhsCount == 1 && !gemm.transA;
  if (collapsed) {
    // x[B,T,K] @ W[K,N]: the lhs matrices are stacked rows of one matrix.
    gemm.M *= lhsCount;
    batches.push_back({0, 0});
  } else {
    int64_t count = product(batch);
    Shape index(batchRank, 0);
    for (int64_t b = 0; b < count; ++b) {
      int64_t l = 0, r = 0;
      for (size_t i = 0; i < batchRank; ++i) {
        l += index[i] * lhsStride[i];
        r += index[i] * rhsStride[i];
      }
      batches.push_back({l, r});
      for (size_t i = batchRank; i-- > 0;) {
        if (++index[i] < batch[i])
          break;
        index[i] = 0;
      }
    }
  }
  if (op.bias() && shapeOf(types.inputs[2]) != Shape{gemm.N})
    return fail(error, "the bias is " + shapeString(types.inputs[2]) + ", not [" +
                           std::to_string(gemm.N) + "] (the product's columns)");
  if (auto kernel = makeDnnlMatMul(gemm, lhs, rhs, out, collapsed, types.constant(1), op))
    return kernel;
  if (!fitsBlas({gemm.M, gemm.N, gemm.K, gemm.lda, gemm.ldb}))
    return fail(error, "a matrix dim exceeds OpenBLAS's 32-bit sizes: " + operands());
  return std::make_unique<MatMulKernel>(gemm, std::move(batches), op.bias(), op.activation());
}

} // namespace dtc::runtime::cpu
