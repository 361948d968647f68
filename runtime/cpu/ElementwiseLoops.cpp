//===- ElementwiseLoops.cpp - the elementwise kernel's compiled loops -----===//
//
// Every loop a step runs: each op's for every compute class, the loads,
// narrowings and stores, each compiled for every instruction set the CPU
// may have, and the choice among them when a kernel is made.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ElementwiseLoops.h"

#include "runtime/cpu/BFloat16.h"
#include "runtime/cpu/ElementwiseKernel.h"
#include "runtime/cpu/ElementwiseOps.h"
#include "runtime/cpu/ElementwiseTypes.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

namespace dtc::runtime::cpu::elementwise {
namespace {

//===----------------------------------------------------------------------===//
// The loops, per instruction set
//===----------------------------------------------------------------------===//

template <class T> T paramOf(const Step &step, int k) {
  if constexpr (kIsInt<T>)
    return step.intParam[k];
  else
    return T(step.param[k]);
}

// Each loop is a Loop::run, compiled three times through the wrappers
// below: for the baseline the build targets (SSE2 on x86-64), for AVX2 with
// FMA and for AVX-512 (4, 8 and 16 floats a step), the widest the CPU has
// chosen when the kernel is made. The transcendental ops gain most.

template <class In, class Out, class F> struct Unary {
  DTC_INLINE static void run(const Step &, const void *const *args, void *out, int64_t n) {
    const In *__restrict x = static_cast<const In *>(args[0]);
    Out *__restrict y = static_cast<Out *>(out);
    F f;
    for (int64_t i = 0; i < n; ++i)
      y[i] = Out(f(x[i]));
  }
};

template <class In, class Out, class F> struct Binary {
  DTC_INLINE static void run(const Step &, const void *const *args, void *out, int64_t n) {
    const In *__restrict a = static_cast<const In *>(args[0]);
    const In *__restrict b = static_cast<const In *>(args[1]);
    Out *__restrict y = static_cast<Out *>(out);
    F f;
    for (int64_t i = 0; i < n; ++i)
      y[i] = Out(f(a[i], b[i]));
  }
};

template <class T> struct Where {
  DTC_INLINE static void run(const Step &, const void *const *args, void *out, int64_t n) {
    const int64_t *__restrict c = static_cast<const int64_t *>(args[0]);
    const T *__restrict a = static_cast<const T *>(args[1]);
    const T *__restrict b = static_cast<const T *>(args[2]);
    T *__restrict y = static_cast<T *>(out);
    for (int64_t i = 0; i < n; ++i)
      y[i] = c[i] ? a[i] : b[i];
  }
};

template <class T> struct Clip {
  DTC_INLINE static void run(const Step &step, const void *const *args, void *out, int64_t n) {
    const T *__restrict x = static_cast<const T *>(args[0]);
    T *__restrict y = static_cast<T *>(out);
    const T lo = paramOf<T>(step, 0), hi = paramOf<T>(step, 1);
    for (int64_t i = 0; i < n; ++i) {
      T v = x[i] < lo ? lo : x[i]; // NaN stays
      y[i] = v > hi ? hi : v;
    }
  }
};

template <class T> struct Constant {
  DTC_INLINE static void run(const Step &step, const void *const *, void *out, int64_t n) {
    std::fill_n(static_cast<T *>(out), n, paramOf<T>(step, 0));
  }
};

template <class Loop>
void baselineLoop(const Step &step, const void *const *args, void *out, int64_t n) {
  Loop::run(step, args, out, n);
}

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#define DTC_X86_LOOPS 1
template <class Loop>
__attribute__((target("avx2,fma"))) void avx2Loop(const Step &step, const void *const *args,
                                                   void *out, int64_t n) {
  Loop::run(step, args, out, n);
}

template <class Loop>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))) void
avx512Loop(const Step &step, const void *const *args, void *out, int64_t n) {
  Loop::run(step, args, out, n);
}

VectorIsa cpuIsa() {
  static const VectorIsa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
      return VectorIsa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return VectorIsa::Avx2;
    return VectorIsa::Baseline;
  }();
  return isa;
}
#endif

std::atomic<VectorIsa> isaLimit{VectorIsa::Avx512};

/// The compiled Loop for this CPU (within isaLimit).
template <class Loop> StepFn loopFn() {
#ifdef DTC_X86_LOOPS
  switch (std::min(cpuIsa(), isaLimit.load())) {
  case VectorIsa::Avx512: return avx512Loop<Loop>;
  case VectorIsa::Avx2: return avx2Loop<Loop>;
  default: break;
  }
#endif
  return baselineLoop<Loop>;
}

template <class S> void roundLoop(void *values, int64_t n) {
  float *v = static_cast<float *>(values);
  for (int64_t i = 0; i < n; ++i)
    v[i] = float(S(v[i]));
}

template <class S> void narrowLoop(void *values, int64_t n) {
  int64_t *v = static_cast<int64_t *>(values);
  for (int64_t i = 0; i < n; ++i)
    v[i] = int64_t(S(v[i]));
}

template <class S, class C>
void loadLoop(const void *src, int64_t offset, bool splat, void *dst, int64_t n) {
  // BOOL bytes are read as bytes: any nonzero byte is true.
  using Raw = std::conditional_t<std::is_same_v<S, bool>, uint8_t, S>;
  auto convert = [](Raw v) {
    if constexpr (std::is_same_v<S, bool>)
      return C(v != 0);
    else
      return C(v);
  };
  const Raw *__restrict in = static_cast<const Raw *>(src) + offset;
  C *__restrict out = static_cast<C *>(dst);
  if (splat) {
    std::fill_n(out, n, convert(*in));
  } else {
    for (int64_t i = 0; i < n; ++i)
      out[i] = convert(in[i]);
  }
}

template <class C, class S> void storeLoop(const void *src, void *dst, int64_t offset, int64_t n) {
  const C *__restrict in = static_cast<const C *>(src);
  if constexpr (std::is_same_v<S, bool>) {
    uint8_t *__restrict out = static_cast<uint8_t *>(dst) + offset;
    for (int64_t i = 0; i < n; ++i)
      out[i] = in[i] != 0;
  } else {
    S *__restrict out = static_cast<S *>(dst) + offset;
    for (int64_t i = 0; i < n; ++i)
      out[i] = S(in[i]);
  }
}

//===----------------------------------------------------------------------===//
// The loop for each op
//===----------------------------------------------------------------------===//

/// The loop for `op` on compute class T (the node's; its arguments' for
/// comparisons); null for an op the class does not have.
template <class T> StepFn opLoopFor(plan::ExprOp op) {
  switch (op) {
  case plan::CONSTANT: return loopFn<Constant<T>>();
  case plan::ADD: return loopFn<Binary<T, T, AddOp>>();
  case plan::SUB: return loopFn<Binary<T, T, SubOp>>();
  case plan::MUL: return loopFn<Binary<T, T, MulOp>>();
  case plan::DIV: return loopFn<Binary<T, T, DivOp>>();
  case plan::POW: return loopFn<Binary<T, T, PowOp>>();
  case plan::MAX: return loopFn<Binary<T, T, MaxOp>>();
  case plan::MIN: return loopFn<Binary<T, T, MinOp>>();
  case plan::NEG: return loopFn<Unary<T, T, NegOp>>();
  case plan::ABS: return loopFn<Unary<T, T, AbsOp>>();
  case plan::RELU: return loopFn<Unary<T, T, ReluOp>>();
  case plan::CLIP: return loopFn<Clip<T>>();
  case plan::WHERE: return loopFn<Where<T>>();
  case plan::EQUAL: return loopFn<Binary<T, int64_t, EqualOp>>();
  case plan::LESS: return loopFn<Binary<T, int64_t, LessOp>>();
  case plan::LESS_EQUAL: return loopFn<Binary<T, int64_t, LessEqualOp>>();
  case plan::GREATER: return loopFn<Binary<T, int64_t, GreaterOp>>();
  case plan::GREATER_EQUAL: return loopFn<Binary<T, int64_t, GreaterEqualOp>>();
  default: break;
  }
  if constexpr (std::is_same_v<T, int64_t>) { // BOOL
    switch (op) {
    case plan::NOT: return loopFn<Unary<T, T, NotOp>>();
    case plan::AND: return loopFn<Binary<T, T, AndOp>>();
    case plan::OR: return loopFn<Binary<T, T, OrOp>>();
    case plan::XOR: return loopFn<Binary<T, T, XorOp>>();
    default: return nullptr;
    }
  } else if constexpr (!kIsInt<T>) {
    switch (op) {
    case plan::EXP: return loopFn<Unary<T, T, ExpOp>>();
    case plan::LOG: return loopFn<Unary<T, T, LogOp>>();
    case plan::SQRT: return loopFn<Unary<T, T, SqrtOp>>();
    case plan::RECIPROCAL: return loopFn<Unary<T, T, ReciprocalOp>>();
    case plan::TANH: return loopFn<Unary<T, T, TanhOp>>();
    case plan::ERF: return loopFn<Unary<T, T, ErfOp>>();
    case plan::SIN: return loopFn<Unary<T, T, SinOp>>();
    case plan::COS: return loopFn<Unary<T, T, CosOp>>();
    case plan::SIGMOID: return loopFn<Unary<T, T, SigmoidOp>>();
    case plan::GELU: return loopFn<Unary<T, T, GeluOp>>();
    case plan::GELU_TANH: return loopFn<Unary<T, T, GeluTanhOp>>();
    default: return nullptr;
    }
  }
  return nullptr;
}

StepFn castFnFor(plan::DType from, plan::DType to) {
  return visitOpType(from, [&](auto f) -> StepFn {
    using From = decltype(f);
    if (to == plan::BOOL)
      return loopFn<Unary<From, int64_t, NonZeroOp>>();
    return visitOpType(to, [](auto t) -> StepFn {
      using To = decltype(t);
      return loopFn<Unary<From, To, CastOp<To>>>();
    });
  });
}

} // namespace

NarrowFn narrowFnFor(plan::ExprOp op, plan::DType dtype) {
  if (dtype == plan::F16)
    return roundLoop<_Float16>;
  if (dtype == plan::BF16)
    return roundLoop<BFloat16>;
  switch (op) {
  case plan::ADD: case plan::SUB: case plan::MUL: case plan::DIV: case plan::POW:
  case plan::NEG: case plan::ABS: case plan::CAST:
    break;
  default:
    return nullptr; // results within the arguments' range, or BOOL
  }
  switch (dtype) {
  case plan::I32: return narrowLoop<int32_t>;
  case plan::I16: return narrowLoop<int16_t>;
  case plan::I8: return narrowLoop<int8_t>;
  case plan::U8: return narrowLoop<uint8_t>;
  case plan::U16: return narrowLoop<uint16_t>;
  case plan::U32: return narrowLoop<uint32_t>;
  default: return nullptr; // I64, and U64 kept as its bits
  }
}

LoadFn loadFnFor(plan::DType dtype) {
  return visitStorage(dtype, [](auto st) -> LoadFn {
    using S = decltype(st);
    return loadLoop<S, ComputeOf<S>>;
  });
}

StepFn stepFnFor(const plan::Elementwise &expr, int i) {
  const plan::ExprNode &node = expr.nodes(i);
  const plan::DType argDType = node.args_size() ? expr.nodes(int(node.args(0))).dtype()
                                                : node.dtype();
  switch (kOps[node.op()].rule) {
  case Rule::Compare:
    return visitOpType(argDType, [&](auto t) { return opLoopFor<decltype(t)>(node.op()); });
  case Rule::Cast:
    return castFnFor(argDType, node.dtype());
  default:
    break;
  }
  // x^2 and x^3 as multiplies.
  if (node.op() == plan::POW) {
    const plan::ExprNode &exponent = expr.nodes(int(node.args(1)));
    if (exponent.op() == plan::CONSTANT && (exponent.value() == 2 || exponent.value() == 3))
      return visitOpType(node.dtype(), [&](auto t) -> StepFn {
        using T = decltype(t);
        return exponent.value() == 2 ? loopFn<Unary<T, T, SquareOp>>()
                                     : loopFn<Unary<T, T, CubeOp>>();
      });
  }
  return visitOpType(node.dtype(), [&](auto t) { return opLoopFor<decltype(t)>(node.op()); });
}

StoreFn storeFnFor(plan::DType dtype) {
  return visitStorage(dtype, [](auto st) -> StoreFn {
    using S = decltype(st);
    return storeLoop<ComputeOf<S>, S>;
  });
}

} // namespace dtc::runtime::cpu::elementwise

namespace dtc::runtime::cpu {

void limitElementwiseIsa(VectorIsa isa) { elementwise::isaLimit.store(isa); }

} // namespace dtc::runtime::cpu
