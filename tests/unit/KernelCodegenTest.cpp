//===- KernelCodegenTest.cpp - generated kernels against the CPU backend --===//
//
// The GPU code generator's numerics, checked on any machine: the kernel IR
// dtc-outline-kernels makes of each op (what dtc-kernels-to-ptx
// lowers for GPUs, with its math expanded the same way: KernelMath.h) is
// lowered for the host, JIT-compiled by MLIR's ExecutionEngine and run on
// random inputs; the CPU backend runs the same instruction as the plan
// states it. fp32 results agree within 1e-4 relative (5e-5 absolute near
// zero), bf16 within one rounding step, moves and the other dtypes exactly.
//
//===----------------------------------------------------------------------===//
#include "compiler/KernelMath.h"
#include "tests/unit/KernelCheck.h"
#include "compiler/PlanEmitter.h"
#include "dialects/graph/AttrNames.h"
#include "compiler/Pipeline.h"
#include "frontends/gpt/GptGenerator.h"
#include "runtime/Device.h"
#include "runtime/Executor.h"
#include "runtime/cpu/BFloat16.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/train/Trainer.h"
#include "tools/Registration.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/CRunnerUtils.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/TargetSelect.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>

using namespace mlir;

namespace {

/// One fused group: the module's @main of `signature` and `body`.
struct Case {
  std::string name, signature, body;
  std::vector<int> positive; // inputs that must be > 0
};

/// f32 to bf16, rounding to nearest even (runtime/cpu/BFloat16.h), as
/// compiler-rt's __truncsfbf2 does: the bf16 in the low 16 bits of the
/// float register a __bf16 is returned in (declared float: a __bf16 result
/// would have clang call __truncsfbf2 here too).
float truncToBf16(float f) {
  uint32_t bits = dtc::runtime::cpu::BFloat16(f).bits;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

/// The host-lowered kernels of `module`'s @dtc_kernels, JIT-compiled.
std::unique_ptr<ExecutionEngine> hostKernels(ModuleOp module) {
  MLIRContext *context = module.getContext();
  auto kernels = module.lookupSymbol<ModuleOp>(dtc::attr::kKernelModule);
  EXPECT_TRUE(kernels);
  if (!kernels)
    return nullptr;
  OwningOpRef<ModuleOp> host = cast<ModuleOp>(kernels->clone());
  (*host)->removeAttr(SymbolTable::getSymbolAttrName());
  for (auto func : host->getOps<func::FuncOp>()) {
    func->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(), UnitAttr::get(context));
    func->removeAttr(dtc::attr::kPtx);
    func->removeAttr(dtc::attr::kPtxEntry);
    func->removeAttr(dtc::attr::kLaunch);
    func->removeAttr(dtc::attr::kParams);
    func->removeAttr(dtc::attr::kThreads);
    func->removeAttr(dtc::attr::kZeroOutputs);
  }
  EXPECT_TRUE(succeeded(dtc::expandKernelMath(*host)));
  PassManager lower(context);
  EXPECT_TRUE(succeeded(parsePassPipeline(
      "func.func(convert-linalg-to-loops),lower-affine,convert-scf-to-cf,"
      "convert-math-to-llvm,expand-strided-metadata,finalize-memref-to-llvm,"
      "convert-arith-to-llvm,convert-index-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,"
      "reconcile-unrealized-casts",
      lower)));
  EXPECT_TRUE(succeeded(lower.run(*host)));
  auto engine = ExecutionEngine::create(*host);
  EXPECT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  if (!engine)
    return nullptr;
  // Where the CPU has no bf16 instructions (an AMD EPYC), LLVM rounds
  // f32 to bf16 by calling __truncsfbf2, which Debian 12's libgcc lacks.
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("__truncsfbf2")] = {llvm::orc::ExecutorAddr::fromPtr(&truncToBf16),
                                         llvm::JITSymbolFlags::Exported};
    return symbols;
  });
  return std::move(*engine);
}

/// A context holding what a CUDA compile and the host lowering load, the
/// native target initialised for the JIT.
std::unique_ptr<MLIRContext> codegenContext() {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  DialectRegistry registry;
  dtc::registerAllDialects(registry);
  dtc::registerAllPasses();
  static bool upstream = (mlir::registerAllPasses(), true);
  (void)upstream;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  auto context = std::make_unique<MLIRContext>(registry);
  context->disableMultithreading();
  return context;
}

/// `source` (a @main of graph ops) with buffers assigned and its ops
/// outlined as kernels, as dtc compile --backend cuda makes them.
OwningOpRef<ModuleOp> outlined(MLIRContext &context, const char *source) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  EXPECT_TRUE(module);
  PassManager pm(&context);
  EXPECT_TRUE(succeeded(parsePassPipeline("func.func(dtc-assign-buffers),dtc-outline-kernels", pm)));
  if (!module || failed(pm.run(*module)))
    return nullptr;
  return module;
}

/// Runs host kernel `name` on flat buffers, each a 1-D memref of `sizes[k]`
/// elements; the kernel's error, if any.
llvm::Error invokeFlat(ExecutionEngine &engine, llvm::StringRef name,
                       const std::vector<void *> &data, const std::vector<int64_t> &sizes) {
  std::vector<StridedMemRefType<char, 1>> d(data.size());
  std::vector<void *> pointers, args;
  for (size_t k = 0; k < data.size(); ++k) {
    d[k].basePtr = d[k].data = static_cast<char *>(data[k]);
    d[k].offset = 0;
    d[k].sizes[0] = sizes[k];
    d[k].strides[0] = 1;
    pointers.push_back(&d[k]);
  }
  for (auto &p : pointers)
    args.push_back(&p);
  return engine.invokePacked(name, args);
}

/// Runs the host-lowered `kernel` on `buffers` (data, elements), each as
/// a 1-D strided memref descriptor (the C interface).
void invoke(ExecutionEngine &engine, const std::string &kernel,
            const std::vector<std::pair<void *, int64_t>> &buffers) {
  std::vector<StridedMemRefType<char, 1>> descriptors;
  for (auto [data, n] : buffers) {
    StridedMemRefType<char, 1> d;
    d.basePtr = d.data = static_cast<char *>(data);
    d.offset = 0;
    d.sizes[0] = n;
    d.strides[0] = 1;
    descriptors.push_back(d);
  }
  std::vector<void *> pointers, args;
  for (auto &d : descriptors)
    pointers.push_back(&d);
  for (auto &p : pointers)
    args.push_back(&p);
  llvm::Error error = engine.invokePacked("_mlir_ciface_" + kernel, args);
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
}

/// Runs instruction `inst` of `program` both ways on random inputs (those
/// in `positive` above 0) and compares (KernelCheck.h: compareOutput).
double compareKernel(ExecutionEngine &engine, const std::string &kernel,
                     const dtc::plan::RankProgram &program, const dtc::plan::Instruction &inst,
                     const std::vector<int> &positive, std::mt19937 &rng) {
  dtc::test::KernelRun run;
  if (!dtc::test::runOnCpu(program, inst, positive, rng, run))
    return -1;
  // Zeros, as a kernel with zero_outputs needs.
  std::vector<std::vector<char>> actual;
  for (const std::vector<char> &expected : run.expected)
    actual.emplace_back(expected.size(), 0);
  std::vector<std::pair<void *, int64_t>> buffers;
  for (size_t i = 0; i < run.inputs.size(); ++i)
    buffers.push_back({run.inputs[i].data(), dtc::test::count(run.inTypes[i])});
  for (size_t o = 0; o < actual.size(); ++o)
    buffers.push_back({actual[o].data(), dtc::test::count(run.outTypes[o])});
  int32_t status = 0; // a gather's: set when an index is out of range
  if (inst.gpu().status())
    buffers.push_back({&status, 1});
  invoke(engine, kernel, buffers);
  EXPECT_EQ(status, 0) << "indices in range set the status word";
  double worst = 0;
  for (size_t o = 0; o < actual.size(); ++o) {
    double w = dtc::test::compareOutput(inst, run, actual[o], o);
    if (w < 0 || std::isinf(w))
      return w;
    worst = std::max(worst, w);
  }
  return worst;
}

/// A launch batch (dtc-batch-kernels): the kernel of instructions
/// [last + 1 - batch, last] of `program` run on the host against the CPU
/// backend's run of each, on random inputs (a buffer several read, the
/// same); `operands` is the kernel function's dtc.batch_operands. The
/// worst comparison, as compareKernel's.
double compareBatch(ExecutionEngine &engine, const std::string &kernel,
                    ArrayRef<int64_t> operands, const dtc::plan::RankProgram &program, int last,
                    std::mt19937 &rng) {
  dtc::test::KernelRun run;
  if (!dtc::test::runBatchOnCpu(program, last, rng, run))
    return -1;
  std::vector<std::vector<char>> actual;
  for (const std::vector<char> &expected : run.expected)
    actual.emplace_back(expected.size(), 0);
  // The function's arguments: some of the batch's operands.
  std::vector<std::pair<void *, int64_t>> buffers;
  for (size_t k : operands) {
    if (k < run.inputs.size())
      buffers.push_back({run.inputs[k].data(), dtc::test::count(run.inTypes[k])});
    else
      buffers.push_back({actual.at(k - run.inputs.size()).data(),
                         dtc::test::count(run.outTypes[k - run.inputs.size()])});
  }
  invoke(engine, kernel, buffers);
  double worst = 0;
  for (size_t o = 0; o < actual.size(); ++o) {
    double w = dtc::test::compareOutput(program.instructions(last), run, actual[o], o);
    if (w < 0 || std::isinf(w))
      return w;
    worst = std::max(worst, w);
  }
  return worst;
}

/// The kernel function an instruction's PTX entry point was made of.
std::string kernelOf(const dtc::plan::Instruction &inst) {
  std::string entry = inst.gpu().entry();
  return entry.substr(0, entry.size() - std::string("_kernel").size());
}

/// Compiles `c` as dtc compile --backend cuda would (fused groups, buffers,
/// kernels, PTX for sm_90) and compares each of its kernels on the host
/// with the CPU backend's run of its instruction; returns how many.
int checkCase(const Case &c) {
  SCOPED_TRACE(c.name);
  DialectRegistry registry;
  dtc::registerAllDialects(registry);
  dtc::registerAllPasses();
  static bool upstream = (mlir::registerAllPasses(), true); // the host lowering's
  (void)upstream;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  MLIRContext context(registry);
  std::string text = "func.func @main" + c.signature + " {\n" + c.body + "\n}";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  EXPECT_TRUE(module) << text;
  if (!module)
    return 0;
  PassManager pm(&context);
  EXPECT_TRUE(succeeded(parsePassPipeline(
      "func.func(dtc-fuse-elementwise,dtc-assign-buffers),dtc-outline-kernels,"
      "dtc-batch-kernels,dtc-kernels-to-ptx{chips=sm_90}",
      pm)));
  EXPECT_TRUE(succeeded(pm.run(*module)));
  dtc::plan::Plan plan;
  EXPECT_TRUE(succeeded(dtc::emitPlan(*module, plan)));
  auto engine = hostKernels(*module);
  EXPECT_TRUE(engine);
  if (!engine)
    return 0;
  auto kernelModule = module->lookupSymbol<ModuleOp>(dtc::attr::kKernelModule);
  std::mt19937 rng(7);
  int kernels = 0;
  double worst = 0;
  const dtc::plan::RankProgram &program = plan.ranks(0);
  for (int i = 0; i < program.instructions_size(); ++i) {
    const dtc::plan::Instruction &inst = program.instructions(i);
    if (!inst.has_gpu() || inst.gpu().batched())
      continue;
    auto func = kernelModule.lookupSymbol<func::FuncOp>(kernelOf(inst));
    auto operands =
        func ? func->getAttrOfType<DenseI64ArrayAttr>(dtc::attr::kBatchOperands) : nullptr;
    double w = inst.gpu().batch() > 1 && operands
                   ? compareBatch(*engine, kernelOf(inst), operands.asArrayRef(), program, i, rng)
                   : compareKernel(*engine, kernelOf(inst), program, inst, c.positive, rng);
    EXPECT_GE(w, 0) << "the integer, bool or moved results differ";
    EXPECT_LE(w, 1e-4) << "worst relative error";
    worst = std::max(worst, w);
    ++kernels;
  }
  EXPECT_GT(kernels, 0) << "no instruction has a kernel";
  std::printf("%-28s %d kernel%s, worst relative error %.2e\n", c.name.c_str(), kernels,
              kernels == 1 ? "" : "s", worst);
  return kernels;
}

TEST(KernelCodegen, EveryElementwiseOpAgainstTheCpuBackend) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  const std::string unaryF32 = "(%x: tensor<4x300xf32>) -> tensor<4x300xf32>";
  auto unary = [&](const std::string &op) {
    return "%y = graph." + op + " %x : (tensor<4x300xf32>) -> tensor<4x300xf32>\n"
           "%z = graph.add %y, %x : (tensor<4x300xf32>, tensor<4x300xf32>) -> tensor<4x300xf32>\n"
           "return %z : tensor<4x300xf32>";
  };
  std::vector<Case> cases;
  for (std::string op : {"exp", "tanh", "erf", "sigmoid", "relu", "neg", "abs", "sin", "cos"})
    cases.push_back({op, unaryF32, unary(op), {}});
  for (std::string op : {"log", "sqrt", "reciprocal"})
    cases.push_back({op, unaryF32, unary(op), {0}});
  cases.push_back({"gelu erf", unaryF32, unary("gelu"), {}});
  cases.push_back({"gelu tanh", unaryF32,
                   "%y = graph.gelu %x {approximate = \"tanh\"} : (tensor<4x300xf32>) -> tensor<4x300xf32>\n"
                   "return %y : tensor<4x300xf32>", {}});
  cases.push_back({"clip", unaryF32,
                   "%y = graph.clip %x {min = -1.0 : f64, max = 2.0 : f64} : (tensor<4x300xf32>) -> tensor<4x300xf32>\n"
                   "%z = graph.mul %y, %x : (tensor<4x300xf32>, tensor<4x300xf32>) -> tensor<4x300xf32>\n"
                   "return %z : tensor<4x300xf32>", {}});
  // Binary ops with broadcasting: a row, a column, a scalar constant.
  for (std::string op : {"add", "sub", "mul", "div", "max", "min", "pow"})
    cases.push_back(
        {op, "(%x: tensor<2x3x40xf32>, %b: tensor<40xf32>, %c: tensor<3x1xf32>) -> tensor<2x3x40xf32>",
         "%y = graph." + op + " %x, %b : (tensor<2x3x40xf32>, tensor<40xf32>) -> tensor<2x3x40xf32>\n"
         "%z = graph.add %y, %c : (tensor<2x3x40xf32>, tensor<3x1xf32>) -> tensor<2x3x40xf32>\n"
         "return %z : tensor<2x3x40xf32>",
         op == "pow" ? std::vector<int>{0} : std::vector<int>{}});
  // Comparisons, boolean logic and where, casts both ways.
  cases.push_back({"where of comparisons",
                   "(%x: tensor<8x33xf32>, %y: tensor<8x33xf32>, %m: tensor<33xi1>) -> tensor<8x33xf32>",
                   "%a = graph.less %x, %y : (tensor<8x33xf32>, tensor<8x33xf32>) -> tensor<8x33xi1>\n"
                   "%b = graph.greater_equal %x, %y : (tensor<8x33xf32>, tensor<8x33xf32>) -> tensor<8x33xi1>\n"
                   "%n = graph.not %m : (tensor<33xi1>) -> tensor<33xi1>\n"
                   "%o = graph.or %a, %n : (tensor<8x33xi1>, tensor<33xi1>) -> tensor<8x33xi1>\n"
                   "%p = graph.and %o, %b : (tensor<8x33xi1>, tensor<8x33xi1>) -> tensor<8x33xi1>\n"
                   "%q = graph.xor %p, %a : (tensor<8x33xi1>, tensor<8x33xi1>) -> tensor<8x33xi1>\n"
                   "%r = graph.where %q, %x, %y : (tensor<8x33xi1>, tensor<8x33xf32>, tensor<8x33xf32>) -> tensor<8x33xf32>\n"
                   "return %r : tensor<8x33xf32>", {}});
  cases.push_back({"casts", "(%x: tensor<64xf32>, %i: tensor<64xi64>) -> tensor<64xf32>",
                   "%a = graph.cast %x : (tensor<64xf32>) -> tensor<64xi64>\n"
                   "%b = graph.add %a, %i : (tensor<64xi64>, tensor<64xi64>) -> tensor<64xi64>\n"
                   "%c = graph.cast %b : (tensor<64xi64>) -> tensor<64xf32>\n"
                   "%d = graph.cast %x : (tensor<64xf32>) -> tensor<64xbf16>\n"
                   "%e = graph.cast %d : (tensor<64xbf16>) -> tensor<64xf32>\n"
                   "%f = graph.add %c, %e : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>\n"
                   "return %f : tensor<64xf32>", {}});
  cases.push_back({"integers", "(%i: tensor<5x7xi64>, %j: tensor<7xi64>) -> tensor<5x7xi64>",
                   "%a = graph.mul %i, %j : (tensor<5x7xi64>, tensor<7xi64>) -> tensor<5x7xi64>\n"
                   "%b = graph.sub %a, %i : (tensor<5x7xi64>, tensor<5x7xi64>) -> tensor<5x7xi64>\n"
                   "%c = graph.max %b, %j : (tensor<5x7xi64>, tensor<7xi64>) -> tensor<5x7xi64>\n"
                   "%d = graph.neg %c : (tensor<5x7xi64>) -> tensor<5x7xi64>\n"
                   "return %d : tensor<5x7xi64>", {}});
  // One kernel writing several results of two element types, as an
  // optimizer's writes the moment, the weight and the weight's bf16 copy.
  cases.push_back({"several results, f32 and bf16",
                   "(%m: tensor<4x300xf32>, %g: tensor<4x300xf32>, %p: tensor<4x300xf32>) -> "
                   "(tensor<4x300xf32>, tensor<4x300xf32>, tensor<4x300xbf16>)",
                   "%a = graph.mul %m, %g : (tensor<4x300xf32>, tensor<4x300xf32>) -> tensor<4x300xf32>\n"
                   "%b = graph.add %a, %g : (tensor<4x300xf32>, tensor<4x300xf32>) -> tensor<4x300xf32>\n"
                   "%c = graph.sub %p, %b : (tensor<4x300xf32>, tensor<4x300xf32>) -> tensor<4x300xf32>\n"
                   "%d = graph.cast %c : (tensor<4x300xf32>) -> tensor<4x300xbf16>\n"
                   "return %b, %c, %d : tensor<4x300xf32>, tensor<4x300xf32>, tensor<4x300xbf16>", {}});
  for (const Case &c : cases)
    EXPECT_EQ(checkCase(c), 1) << c.name << ": one kernel";
}


/// The kernels that are not elementwise (LoopKernels.h): reductions over
/// every kind of axis set, softmax rows along the last and a middle axis,
/// layer norm with and without bias, moves, concatenation, split, gather
/// and scatter-add, pooling and its gradients, batch norm, trilu, top-k,
/// in f32, bf16 and integers.
TEST(KernelCodegen, EveryLoopKernelAgainstTheCpuBackend) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto op = [](const std::string &in, const std::string &line, const std::string &out) {
    return Case{"", "(" + in + ") -> " + out, line + "\nreturn %y : " + out, {}};
  };
  std::vector<Case> cases;
  auto add = [&](const std::string &name, Case c) {
    c.name = name;
    cases.push_back(c);
  };
  const std::string x3 = "%x: tensor<6x20x70xf32>";
  for (std::string kind : {"sum", "mean", "max", "min"})
    add("reduce_" + kind + " last axis",
        op(x3, "%y = graph.reduce_" + kind + " %x {axes = array<i64: 2>} : (tensor<6x20x70xf32>) -> tensor<6x20x1xf32>",
           "tensor<6x20x1xf32>"));
  add("reduce_sum leading axes (a bias)",
      op(x3, "%y = graph.reduce_sum %x {axes = array<i64: 0, 1>} : (tensor<6x20x70xf32>) -> tensor<1x1x70xf32>",
         "tensor<1x1x70xf32>"));
  add("reduce_mean middle, no keepdims",
      op(x3, "%y = graph.reduce_mean %x {axes = array<i64: 1>, keepdims = false} : (tensor<6x20x70xf32>) -> tensor<6x70xf32>",
         "tensor<6x70xf32>"));
  add("reduce_max outer and inner",
      op(x3, "%y = graph.reduce_max %x {axes = array<i64: 0, 2>} : (tensor<6x20x70xf32>) -> tensor<1x20x1xf32>",
         "tensor<1x20x1xf32>"));
  add("reduce_sum split over threads",
      op("%x: tensor<3000x40xf32>", "%y = graph.reduce_sum %x {axes = array<i64: 0>} : (tensor<3000x40xf32>) -> tensor<1x40xf32>",
         "tensor<1x40xf32>"));
  // Two of them side by side: one launch (dtc-batch-kernels), its
  // outputs all zeroed first.
  add("two sums split over threads",
      op("%x: tensor<3000x40xf32>",
         "%s = graph.reduce_sum %x {axes = array<i64: 0>} : (tensor<3000x40xf32>) -> tensor<1x40xf32>\n"
         "%t = graph.reduce_mean %x {axes = array<i64: 0>} : (tensor<3000x40xf32>) -> tensor<1x40xf32>\n"
         "%y = graph.concat %s, %t {axis = 0 : i64} : (tensor<1x40xf32>, tensor<1x40xf32>) -> tensor<2x40xf32>",
         "tensor<2x40xf32>"));
  add("reduce_mean split over threads",
      op("%x: tensor<2x1500x24xf32>", "%y = graph.reduce_mean %x {axes = array<i64: 0, 1>} : (tensor<2x1500x24xf32>) -> tensor<1x1x24xf32>",
         "tensor<1x1x24xf32>"));
  add("reduce_sum long row",
      op("%x: tensor<3x5000xf32>", "%y = graph.reduce_sum %x {axes = array<i64: 1>} : (tensor<3x5000xf32>) -> tensor<3x1xf32>",
         "tensor<3x1xf32>"));
  add("reduce_sum bf16",
      op("%x: tensor<8x300xbf16>", "%y = graph.reduce_sum %x {axes = array<i64: 1>} : (tensor<8x300xbf16>) -> tensor<8x1xbf16>",
         "tensor<8x1xbf16>"));
  add("reduce_sum bf16 into f32, split over threads (a mixed-precision bias's gradient)",
      op("%x: tensor<2x1500x24xbf16>", "%y = graph.reduce_sum %x {axes = array<i64: 0, 1>} : (tensor<2x1500x24xbf16>) -> tensor<1x1x24xf32>",
         "tensor<1x1x24xf32>"));
  add("reduce_mean bf16 into f32, long row",
      op("%x: tensor<3x700xbf16>", "%y = graph.reduce_mean %x {axes = array<i64: 1>} : (tensor<3x700xbf16>) -> tensor<3x1xf32>",
         "tensor<3x1xf32>"));
  add("reduce_sum i64",
      op("%x: tensor<4x9x5xi64>", "%y = graph.reduce_sum %x {axes = array<i64: 1>} : (tensor<4x9x5xi64>) -> tensor<4x1x5xi64>",
         "tensor<4x1x5xi64>"));
  add("reduce_min i64",
      op("%x: tensor<4x9xi64>", "%y = graph.reduce_min %x {axes = array<i64: 0>} : (tensor<4x9xi64>) -> tensor<1x9xi64>",
         "tensor<1x9xi64>"));
  add("softmax last axis",
      op(x3, "%y = graph.softmax %x {axis = 2 : i64} : (tensor<6x20x70xf32>) -> tensor<6x20x70xf32>",
         "tensor<6x20x70xf32>"));
  add("softmax middle axis",
      op(x3, "%y = graph.softmax %x {axis = 1 : i64} : (tensor<6x20x70xf32>) -> tensor<6x20x70xf32>",
         "tensor<6x20x70xf32>"));
  add("log_softmax long row",
      op("%x: tensor<4x3000xf32>", "%y = graph.log_softmax %x {axis = 1 : i64} : (tensor<4x3000xf32>) -> tensor<4x3000xf32>",
         "tensor<4x3000xf32>"));
  add("softmax bf16",
      op("%x: tensor<4x2x64xbf16>", "%y = graph.softmax %x {axis = 2 : i64} : (tensor<4x2x64xbf16>) -> tensor<4x2x64xbf16>",
         "tensor<4x2x64xbf16>"));
  // Rotary embeddings: a thread per element reading its partner half a row
  // away, the tables broadcast (f32 tables beside bf16 x too).
  add("rotary, tables broadcast",
      op("%x: tensor<2x7x3x16xf32>, %c: tensor<1x7x1x16xf32>, %s: tensor<7x1x16xf32>",
         "%y = graph.rotary %x, %c, %s : (tensor<2x7x3x16xf32>, tensor<1x7x1x16xf32>, "
         "tensor<7x1x16xf32>) -> tensor<2x7x3x16xf32>",
         "tensor<2x7x3x16xf32>"));
  add("rotary backward, bf16 x, f32 tables",
      op("%x: tensor<2x3x7x16xbf16>, %c: tensor<7x16xf32>, %s: tensor<7x16xf32>",
         "%y = graph.rotary %x, %c, %s {backward} : (tensor<2x3x7x16xbf16>, tensor<7x16xf32>, "
         "tensor<7x16xf32>) -> tensor<2x3x7x16xbf16>",
         "tensor<2x3x7x16xbf16>"));
  add("layer_norm with bias",
      op(x3 + ", %s: tensor<70xf32>, %b: tensor<70xf32>",
         "%y = graph.layer_norm %x, %s, %b {axis = 2 : i64} : (tensor<6x20x70xf32>, tensor<70xf32>, tensor<70xf32>) -> tensor<6x20x70xf32>",
         "tensor<6x20x70xf32>"));
  add("layer_norm two axes, no bias",
      op(x3 + ", %s: tensor<20x70xf32>",
         "%y = graph.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-3 : f64} : (tensor<6x20x70xf32>, tensor<20x70xf32>) -> tensor<6x20x70xf32>",
         "tensor<6x20x70xf32>"));
  add("layer_norm bf16",
      op("%x: tensor<8x96xbf16>, %s: tensor<96xbf16>, %b: tensor<96xbf16>",
         "%y = graph.layer_norm %x, %s, %b {axis = 1 : i64} : (tensor<8x96xbf16>, tensor<96xbf16>, tensor<96xbf16>) -> tensor<8x96xbf16>",
         "tensor<8x96xbf16>"));
  add("layer_norm_backward (a thread per row)",
      Case{"", "(%x: tensor<6x20x40xf32>, %s: tensor<40xf32>, %d: tensor<6x20x40xf32>) -> (tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>)",
           "%y:3 = graph.layer_norm_backward %x, %s, %d {axis = 2 : i64} : (tensor<6x20x40xf32>, tensor<40xf32>, tensor<6x20x40xf32>) -> (tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>)\n"
           "return %y#0, %y#1, %y#2 : tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>", {}});
  add("layer_norm_backward bf16, a block per row",
      Case{"", "(%x: tensor<8x96xbf16>, %s: tensor<96xbf16>, %d: tensor<8x96xbf16>) -> (tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>)",
           "%y:3 = graph.layer_norm_backward %x, %s, %d {axis = 1 : i64} : (tensor<8x96xbf16>, tensor<96xbf16>, tensor<8x96xbf16>) -> (tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>)\n"
           "return %y#0, %y#1, %y#2 : tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>", {}});
  add("layer_norm_backward with a residual (a thread per row)",
      Case{"", "(%x: tensor<6x20x40xf32>, %s: tensor<40xf32>, %d: tensor<6x20x40xf32>, %r: tensor<6x20x40xf32>) -> (tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>)",
           "%y:3 = graph.layer_norm_backward %x, %s, %d, %r {axis = 2 : i64} : (tensor<6x20x40xf32>, tensor<40xf32>, tensor<6x20x40xf32>, tensor<6x20x40xf32>) -> (tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>)\n"
           "return %y#0, %y#1, %y#2 : tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>", {}});
  add("rms layer_norm_backward bf16 with a residual, a block per row",
      Case{"", "(%x: tensor<8x96xbf16>, %s: tensor<96xbf16>, %d: tensor<8x96xbf16>, %r: tensor<8x96xbf16>) -> (tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>)",
           "%y:3 = graph.layer_norm_backward %x, %s, %d, %r {axis = 1 : i64, rms} : (tensor<8x96xbf16>, tensor<96xbf16>, tensor<8x96xbf16>, tensor<8x96xbf16>) -> (tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>)\n"
           "return %y#0, %y#1, %y#2 : tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>", {}});
  add("rms layer_norm (a thread per row)",
      op(x3 + ", %s: tensor<70xf32>",
         "%y = graph.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-6 : f64, rms} : (tensor<6x20x70xf32>, tensor<70xf32>) -> tensor<6x20x70xf32>",
         "tensor<6x20x70xf32>"));
  add("rms layer_norm bf16, a block per row",
      op("%x: tensor<8x96xbf16>, %s: tensor<96xbf16>",
         "%y = graph.layer_norm %x, %s {axis = 1 : i64, rms} : (tensor<8x96xbf16>, tensor<96xbf16>) -> tensor<8x96xbf16>",
         "tensor<8x96xbf16>"));
  add("rms layer_norm_backward (a thread per row)",
      Case{"", "(%x: tensor<6x20x40xf32>, %s: tensor<40xf32>, %d: tensor<6x20x40xf32>) -> (tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>)",
           "%y:3 = graph.layer_norm_backward %x, %s, %d {axis = 2 : i64, rms} : (tensor<6x20x40xf32>, tensor<40xf32>, tensor<6x20x40xf32>) -> (tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>)\n"
           "return %y#0, %y#1, %y#2 : tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>", {}});
  add("rms layer_norm_backward bf16, a block per row",
      Case{"", "(%x: tensor<8x96xbf16>, %s: tensor<96xbf16>, %d: tensor<8x96xbf16>) -> (tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>)",
           "%y:3 = graph.layer_norm_backward %x, %s, %d {axis = 1 : i64, rms} : (tensor<8x96xbf16>, tensor<96xbf16>, tensor<8x96xbf16>) -> (tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>)\n"
           "return %y#0, %y#1, %y#2 : tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>", {}});
  // The weights' partial sums per group of rows: 120 rows in 16 groups of
  // 8 (the last empty), a thread per group; 8 rows in 3 groups of 3 (the
  // last of 2), a block per group; bf16 and RMSNorm.
  add("layer_norm_backward summing scale and bias gradients (a thread per group)",
      Case{"", "(%x: tensor<6x20x40xf32>, %s: tensor<40xf32>, %d: tensor<6x20x40xf32>) -> (tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<16x1x40xf32>, tensor<16x1x40xf32>)",
           "%y:5 = graph.layer_norm_backward %x, %s, %d {axis = 2 : i64, scale_gradient, bias_gradient} : (tensor<6x20x40xf32>, tensor<40xf32>, tensor<6x20x40xf32>) -> (tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<6x20x1xf32>, tensor<16x1x40xf32>, tensor<16x1x40xf32>)\n"
           "return %y#0, %y#2, %y#3, %y#4 : tensor<6x20x40xf32>, tensor<6x20x1xf32>, tensor<16x1x40xf32>, tensor<16x1x40xf32>", {}});
  add("layer_norm_backward bf16 with a residual summing scale and bias gradients, a block per group",
      Case{"", "(%x: tensor<8x96xbf16>, %s: tensor<96xbf16>, %d: tensor<8x96xbf16>, %r: tensor<8x96xbf16>) -> (tensor<8x96xbf16>, tensor<8x1xf32>, tensor<3x96xf32>, tensor<3x96xf32>)",
           "%y:5 = graph.layer_norm_backward %x, %s, %d, %r {axis = 1 : i64, scale_gradient, bias_gradient} : (tensor<8x96xbf16>, tensor<96xbf16>, tensor<8x96xbf16>, tensor<8x96xbf16>) -> (tensor<8x96xbf16>, tensor<8x1xf32>, tensor<8x1xf32>, tensor<3x96xf32>, tensor<3x96xf32>)\n"
           "return %y#0, %y#1, %y#3, %y#4 : tensor<8x96xbf16>, tensor<8x1xf32>, tensor<3x96xf32>, tensor<3x96xf32>", {}});
  add("rms layer_norm_backward summing the scale gradient, a block per group",
      Case{"", "(%x: tensor<8x96xf32>, %s: tensor<96xf32>, %d: tensor<8x96xf32>) -> (tensor<8x96xf32>, tensor<3x96xf32>)",
           "%y:4 = graph.layer_norm_backward %x, %s, %d {axis = 1 : i64, rms, scale_gradient} : (tensor<8x96xf32>, tensor<96xf32>, tensor<8x96xf32>) -> (tensor<8x96xf32>, tensor<8x1xf32>, tensor<8x1xf32>, tensor<3x96xf32>)\n"
           "return %y#0, %y#3 : tensor<8x96xf32>, tensor<3x96xf32>", {}});
  add("cross_entropy (a thread per row)",
      Case{"", "(%x: tensor<6x20x40xf32>, %l: tensor<6x20xi64>) -> (tensor<6x20xf32>, tensor<6x20xf32>)",
           "%y:2 = graph.cross_entropy %x, %l : (tensor<6x20x40xf32>, tensor<6x20xi64>) -> (tensor<6x20xf32>, tensor<6x20xf32>)\n"
           "return %y#0, %y#1 : tensor<6x20xf32>, tensor<6x20xf32>", {}});
  add("cross_entropy bf16 i32 labels, a block per row",
      Case{"", "(%x: tensor<8x3000xbf16>, %l: tensor<8xi32>) -> (tensor<8xf32>, tensor<8xf32>)",
           "%y:2 = graph.cross_entropy %x, %l : (tensor<8x3000xbf16>, tensor<8xi32>) -> (tensor<8xf32>, tensor<8xf32>)\n"
           "return %y#0, %y#1 : tensor<8xf32>, tensor<8xf32>", {}});
  add("cross_entropy writing the logits' gradient (a thread per row)",
      Case{"", "(%x: tensor<6x20x40xf32>, %l: tensor<6x20xi64>, %f: tensor<6x20xf32>) -> (tensor<6x20xf32>, tensor<6x20xf32>, tensor<6x20x40xf32>)",
           "%y:3 = graph.cross_entropy %x, %l, %f : (tensor<6x20x40xf32>, tensor<6x20xi64>, tensor<6x20xf32>) -> (tensor<6x20xf32>, tensor<6x20xf32>, tensor<6x20x40xf32>)\n"
           "return %y#0, %y#1, %y#2 : tensor<6x20xf32>, tensor<6x20xf32>, tensor<6x20x40xf32>", {}});
  add("cross_entropy bf16 writing the logits' gradient, a block per row",
      Case{"", "(%x: tensor<8x3000xbf16>, %l: tensor<8xi32>, %f: tensor<8xf32>) -> (tensor<8xf32>, tensor<8x3000xbf16>)",
           "%y:3 = graph.cross_entropy %x, %l, %f : (tensor<8x3000xbf16>, tensor<8xi32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8x3000xbf16>)\n"
           "return %y#0, %y#2 : tensor<8xf32>, tensor<8x3000xbf16>", {}});
  add("transpose 4-D",
      op("%x: tensor<2x5x3x7xf32>", "%y = graph.transpose %x {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x5x3x7xf32>) -> tensor<2x3x7x5xf32>",
         "tensor<2x3x7x5xf32>"));
  add("transpose bf16",
      op("%x: tensor<9x17xbf16>", "%y = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<9x17xbf16>) -> tensor<17x9xbf16>",
         "tensor<17x9xbf16>"));
  add("slice strided and reversed",
      op("%x: tensor<6x20xf32>", "%y = graph.slice %x {offsets = array<i64: 1, 19>, sizes = array<i64: 2, 7>, strides = array<i64: 2, -3>} : (tensor<6x20xf32>) -> tensor<2x7xf32>",
         "tensor<2x7xf32>"));
  add("concat three along axis 1",
      op("%a: tensor<3x2x5xf32>, %b: tensor<3x4x5xf32>, %c: tensor<3x1x5xf32>",
         "%y = graph.concat %a, %b, %c {axis = 1 : i64} : (tensor<3x2x5xf32>, tensor<3x4x5xf32>, tensor<3x1x5xf32>) -> tensor<3x7x5xf32>",
         "tensor<3x7x5xf32>"));
  add("concat i64",
      op("%a: tensor<4xi64>, %b: tensor<3xi64>",
         "%y = graph.concat %a, %b {axis = 0 : i64} : (tensor<4xi64>, tensor<3xi64>) -> tensor<7xi64>",
         "tensor<7xi64>"));
  add("split in three",
      Case{"", "(%x: tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)",
           "%y:3 = graph.split %x {axis = 2 : i64, sizes = array<i64: 64, 64, 64>} : (tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)\n"
           "return %y#0, %y#1, %y#2 : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>", {}});
  add("gather rows (embedding)",
      op("%e: tensor<50x24xf32>, %i: tensor<4x6xi64>",
         "%y = graph.gather %e, %i {axis = 0 : i64} : (tensor<50x24xf32>, tensor<4x6xi64>) -> tensor<4x6x24xf32>",
         "tensor<4x6x24xf32>"));
  add("gather middle axis, i32",
      op("%e: tensor<3x10x4xf32>, %i: tensor<5xi32>",
         "%y = graph.gather %e, %i {axis = 1 : i64} : (tensor<3x10x4xf32>, tensor<5xi32>) -> tensor<3x5x4xf32>",
         "tensor<3x5x4xf32>"));
  add("scatter_add (embedding gradient)",
      op("%u: tensor<4x6x24xf32>, %i: tensor<4x6xi64>",
         "%y = graph.scatter_add %u, %i {axis = 0 : i64} : (tensor<4x6x24xf32>, tensor<4x6xi64>) -> tensor<10x24xf32>",
         "tensor<10x24xf32>"));
  add("scatter_add bf16 into f32 (a mixed-precision embedding's gradient)",
      op("%u: tensor<4x6x24xbf16>, %i: tensor<4x6xi64>",
         "%y = graph.scatter_add %u, %i {axis = 0 : i64} : (tensor<4x6x24xbf16>, tensor<4x6xi64>) -> tensor<10x24xf32>",
         "tensor<10x24xf32>"));
  add("scatter_add bf16 from a few indices, middle axis (no atomics)",
      op("%u: tensor<3x7x4xbf16>, %i: tensor<7xi64>",
         "%y = graph.scatter_add %u, %i {axis = 1 : i64} : (tensor<3x7x4xbf16>, tensor<7xi64>) -> tensor<3x5x4xbf16>",
         "tensor<3x5x4xbf16>"));
  // skip_outside (a block of a vocabulary split over ranks): indices past
  // the block on either side take zeros or drop their updates.
  add("gather skip_outside (a vocabulary block)",
      op("%e: tensor<50x24xf32>, %i: tensor<4x6xi64>",
         "%y = graph.gather %e, %i {axis = 0 : i64, skip_outside} : (tensor<50x24xf32>, tensor<4x6xi64>) -> tensor<4x6x24xf32>",
         "tensor<4x6x24xf32>"));
  add("gather skip_outside middle axis, bf16, i32",
      op("%e: tensor<3x10x4xbf16>, %i: tensor<5xi32>",
         "%y = graph.gather %e, %i {axis = 1 : i64, skip_outside} : (tensor<3x10x4xbf16>, tensor<5xi32>) -> tensor<3x5x4xbf16>",
         "tensor<3x5x4xbf16>"));
  add("gather skip_outside i64",
      op("%e: tensor<7x3xi64>, %i: tensor<9xi64>",
         "%y = graph.gather %e, %i {axis = 0 : i64, skip_outside} : (tensor<7x3xi64>, tensor<9xi64>) -> tensor<9x3xi64>",
         "tensor<9x3xi64>"));
  add("scatter_add skip_outside (a vocabulary block's gradient)",
      op("%u: tensor<4x6x24xf32>, %i: tensor<4x6xi64>",
         "%y = graph.scatter_add %u, %i {axis = 0 : i64, skip_outside} : (tensor<4x6x24xf32>, tensor<4x6xi64>) -> tensor<10x24xf32>",
         "tensor<10x24xf32>"));
  add("scatter_add skip_outside bf16 from a few indices, middle axis (no atomics)",
      op("%u: tensor<3x7x4xbf16>, %i: tensor<7xi32>",
         "%y = graph.scatter_add %u, %i {axis = 1 : i64, skip_outside} : (tensor<3x7x4xbf16>, tensor<7xi32>) -> tensor<3x5x4xbf16>",
         "tensor<3x5x4xbf16>"));
  // Without a status word they batch (dtc-batch-kernels): two tables'
  // blocks gathered in one launch, two gradients scattered in another.
  add("two gathers skip_outside side by side",
      op("%e: tensor<50x24xf32>, %f: tensor<50x24xf32>, %i: tensor<4x6xi64>",
         "%a = graph.gather %e, %i {axis = 0 : i64, skip_outside} : (tensor<50x24xf32>, tensor<4x6xi64>) -> tensor<4x6x24xf32>\n"
         "%b = graph.gather %f, %i {axis = 0 : i64, skip_outside} : (tensor<50x24xf32>, tensor<4x6xi64>) -> tensor<4x6x24xf32>\n"
         "%y = graph.concat %a, %b {axis = 0 : i64} : (tensor<4x6x24xf32>, tensor<4x6x24xf32>) -> tensor<8x6x24xf32>",
         "tensor<8x6x24xf32>"));
  add("two scatter_adds skip_outside side by side",
      op("%u: tensor<4x6x24xf32>, %v: tensor<4x6x24xf32>, %i: tensor<4x6xi64>",
         "%a = graph.scatter_add %u, %i {axis = 0 : i64, skip_outside} : (tensor<4x6x24xf32>, tensor<4x6xi64>) -> tensor<10x24xf32>\n"
         "%b = graph.scatter_add %v, %i {axis = 0 : i64, skip_outside} : (tensor<4x6x24xf32>, tensor<4x6xi64>) -> tensor<10x24xf32>\n"
         "%y = graph.concat %a, %b {axis = 0 : i64} : (tensor<10x24xf32>, tensor<10x24xf32>) -> tensor<20x24xf32>",
         "tensor<20x24xf32>"));
  // Pooling (padding never wins a max, an average counts what its
  // attributes say, ceil_mode's windows past the padded input), its
  // gradients (overlapping windows, gathered in the CPU's order), in f32
  // and bf16, batch norm, trilu.
  const std::string pool = "kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, "
                           "pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>";
  add("max_pool2d 3x3 stride 2 padded",
      op("%x: tensor<2x3x9x9xf32>", "%y = graph.max_pool2d %x {" + pool + "} : (tensor<2x3x9x9xf32>) -> tensor<2x3x5x5xf32>",
         "tensor<2x3x5x5xf32>"));
  add("avg_pool2d padded, pads not counted",
      op("%x: tensor<2x3x9x9xf32>", "%y = graph.avg_pool2d %x {" + pool + "} : (tensor<2x3x9x9xf32>) -> tensor<2x3x5x5xf32>",
         "tensor<2x3x5x5xf32>"));
  add("avg_pool2d ceil_mode, pads counted",
      op("%x: tensor<1x2x8x8xf32>", "%y = graph.avg_pool2d %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 0, 1, 0>, dilations = array<i64: 1, 1>, ceil_mode = true, count_include_pad = true} : (tensor<1x2x8x8xf32>) -> tensor<1x2x5x4xf32>",
         "tensor<1x2x5x4xf32>"));
  add("max_pool2d channels-last",
      op("%x: tensor<2x9x9x3xf32>", "%y = graph.max_pool2d %x {" + pool + ", channels_last} : (tensor<2x9x9x3xf32>) -> tensor<2x5x5x3xf32>",
         "tensor<2x5x5x3xf32>"));
  add("max_pool2d dilated",
      op("%x: tensor<1x2x10x10xf32>", "%y = graph.max_pool2d %x {kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 2, 2, 2, 2>, dilations = array<i64: 2, 2>} : (tensor<1x2x10x10xf32>) -> tensor<1x2x10x10xf32>",
         "tensor<1x2x10x10xf32>"));
  add("max_pool2d_backward overlapping windows",
      op("%x: tensor<2x3x9x9xf32>, %d: tensor<2x3x5x5xf32>",
         "%y = graph.max_pool2d_backward %x, %d {" + pool + "} : (tensor<2x3x9x9xf32>, tensor<2x3x5x5xf32>) -> tensor<2x3x9x9xf32>",
         "tensor<2x3x9x9xf32>"));
  add("avg_pool2d_backward, pads counted",
      op("%d: tensor<2x3x5x5xf32>",
         "%y = graph.avg_pool2d_backward %d {" + pool + ", count_include_pad = true} : (tensor<2x3x5x5xf32>) -> tensor<2x3x9x9xf32>",
         "tensor<2x3x9x9xf32>"));
  add("max_pool2d_backward dilated, stride 1 (each input in many windows)",
      op("%x: tensor<1x2x10x10xf32>, %d: tensor<1x2x10x10xf32>",
         "%y = graph.max_pool2d_backward %x, %d {kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 2, 2, 2, 2>, dilations = array<i64: 2, 2>} : (tensor<1x2x10x10xf32>, tensor<1x2x10x10xf32>) -> tensor<1x2x10x10xf32>",
         "tensor<1x2x10x10xf32>"));
  add("avg_pool2d_backward ceil_mode, pads not counted",
      op("%d: tensor<1x2x5x4xf32>",
         "%y = graph.avg_pool2d_backward %d {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 0, 1, 0>, dilations = array<i64: 1, 1>, ceil_mode = true} : (tensor<1x2x5x4xf32>) -> tensor<1x2x8x8xf32>",
         "tensor<1x2x8x8xf32>"));
  add("max_pool2d bf16",
      op("%x: tensor<2x3x9x9xbf16>", "%y = graph.max_pool2d %x {" + pool + "} : (tensor<2x3x9x9xbf16>) -> tensor<2x3x5x5xbf16>",
         "tensor<2x3x5x5xbf16>"));
  add("avg_pool2d bf16",
      op("%x: tensor<2x3x9x9xbf16>", "%y = graph.avg_pool2d %x {" + pool + "} : (tensor<2x3x9x9xbf16>) -> tensor<2x3x5x5xbf16>",
         "tensor<2x3x5x5xbf16>"));
  add("max_pool2d_backward bf16 (summed in f32, rounded once)",
      op("%x: tensor<2x3x9x9xbf16>, %d: tensor<2x3x5x5xbf16>",
         "%y = graph.max_pool2d_backward %x, %d {" + pool + "} : (tensor<2x3x9x9xbf16>, tensor<2x3x5x5xbf16>) -> tensor<2x3x9x9xbf16>",
         "tensor<2x3x9x9xbf16>"));
  add("avg_pool2d_backward bf16",
      op("%d: tensor<2x3x5x5xbf16>",
         "%y = graph.avg_pool2d_backward %d {" + pool + "} : (tensor<2x3x5x5xbf16>) -> tensor<2x3x9x9xbf16>",
         "tensor<2x3x9x9xbf16>"));
  add("batch_norm (inference)",
      Case{"", "(%x: tensor<4x6x5x5xf32>, %s: tensor<6xf32>, %b: tensor<6xf32>, %m: tensor<6xf32>, %v: tensor<6xf32>) -> tensor<4x6x5x5xf32>",
           "%y = graph.batch_norm %x, %s, %b, %m, %v {epsilon = 1.0e-3 : f64} : (tensor<4x6x5x5xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<4x6x5x5xf32>\n"
           "return %y : tensor<4x6x5x5xf32>", {4}});
  add("trilu upper, k = 1",
      op("%x: tensor<2x5x7xf32>", "%y = graph.trilu %x {upper = true, k = 1 : i64} : (tensor<2x5x7xf32>) -> tensor<2x5x7xf32>",
         "tensor<2x5x7xf32>"));
  add("trilu lower, k = -1, i64",
      op("%x: tensor<6x4xi64>", "%y = graph.trilu %x {upper = false, k = -1 : i64} : (tensor<6x4xi64>) -> tensor<6x4xi64>",
         "tensor<6x4xi64>"));
  add("top_k largest 3 along the last axis",
      op("%x: tensor<4x50xf32>", "%y = graph.top_k %x {axis = 1 : i64, k = 3 : i64, largest = true} : (tensor<4x50xf32>) -> tensor<4x3xi64>",
         "tensor<4x3xi64>"));
  add("top_k smallest 4 along a middle axis, i64 with ties",
      op("%x: tensor<3x9x2xi64>", "%y = graph.top_k %x {axis = 1 : i64, k = 4 : i64, largest = false} : (tensor<3x9x2xi64>) -> tensor<3x4x2xi64>",
         "tensor<3x4x2xi64>"));
  int kernels = 0;
  for (const Case &c : cases)
    kernels += checkCase(c);
  // The split's three pieces; the two sums', gathers' and scatter-adds'
  // launches and their concats.
  EXPECT_EQ(kernels, int(cases.size()) + 5);
}

/// An index out of range does not read outside the table: it sets the
/// kernel's status word, by which the runtime stops the run with a message.
TEST(KernelCodegen, AGatherIndexOutOfRangeSetsTheStatusWord) {
  std::unique_ptr<MLIRContext> context = codegenContext();
  OwningOpRef<ModuleOp> module = outlined(*context,
      "func.func @main(%e: tensor<5x2xf32>, %i: tensor<3xi64>) -> tensor<3x2xf32> {\n"
      "%y = graph.gather %e, %i {axis = 0 : i64} : (tensor<5x2xf32>, tensor<3xi64>) -> tensor<3x2xf32>\n"
      "return %y : tensor<3x2xf32>\n}");
  ASSERT_TRUE(module);
  auto engine = hostKernels(*module);
  ASSERT_TRUE(engine);
  float table[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, out[6] = {};
  auto gather = [&](std::vector<int64_t> indices) {
    int32_t status = 0;
    llvm::Error error = invokeFlat(*engine, "_mlir_ciface_kernel_0",
                                   {table, indices.data(), out, &status}, {10, 3, 6, 1});
    EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
    return status;
  };
  EXPECT_EQ(gather({4, -5, 0}), 0);
  EXPECT_EQ(out[0], 8); // row 4
  EXPECT_EQ(out[2], 0); // row -5 = 0
  EXPECT_EQ(gather({1, 5, 0}), 1);
  EXPECT_EQ(gather({-6, 0, 0}), 1);
}

/// skip_outside: an index outside the block, negative or past it, takes
/// zeros (none wraps) and is no error: the kernel has no status word.
TEST(KernelCodegen, AGatherSkippingOutsideTakesZeros) {
  std::unique_ptr<MLIRContext> context = codegenContext();
  OwningOpRef<ModuleOp> module = outlined(*context,
      "func.func @main(%e: tensor<5x2xf32>, %i: tensor<4xi64>) -> tensor<4x2xf32> {\n"
      "%y = graph.gather %e, %i {axis = 0 : i64, skip_outside} : (tensor<5x2xf32>, tensor<4xi64>) -> tensor<4x2xf32>\n"
      "return %y : tensor<4x2xf32>\n}");
  ASSERT_TRUE(module);
  auto kernels = module->lookupSymbol<ModuleOp>(dtc::attr::kKernelModule);
  ASSERT_TRUE(kernels);
  auto func = kernels.lookupSymbol<func::FuncOp>("kernel_0");
  ASSERT_TRUE(func);
  EXPECT_FALSE(func->hasAttr(dtc::attr::kStatus));
  EXPECT_EQ(func.getNumArguments(), 3u);
  auto engine = hostKernels(*module);
  ASSERT_TRUE(engine);
  // -1 and 5 are outside; -2 would be row 3 without skip_outside.
  float table[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, out[8];
  std::fill(std::begin(out), std::end(out), 99.0f);
  int64_t indices[4] = {4, -1, 5, -2};
  llvm::Error error = invokeFlat(*engine, "_mlir_ciface_kernel_0", {table, indices, out},
                                 {10, 4, 8});
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  EXPECT_EQ(std::vector<float>(out, out + 8), (std::vector<float>{8, 9, 0, 0, 0, 0, 0, 0}));
}

/// Every kernel of a GPT training step (AdamW, bf16 compute, dp x tp) as
/// dtc compile --backend cuda makes it, each on random inputs against the
/// CPU backend's run of its instruction.

/// A 1-layer GPT's bf16 training step compiled for the CUDA backend on
/// dp x tp ranks into `plan`; its module (null, with a failure, when it
/// does not compile).
OwningOpRef<ModuleOp> compileGptStep(MLIRContext &context, int64_t dp, int64_t tp,
                                     dtc::plan::Plan &plan) {
  std::string error;
  auto config =
      dtc::gpt::parseGptSpec("gpt:layers=1,hidden=64,heads=4,seq=16,vocab=96,batch=4", error);
  EXPECT_TRUE(config) << error;
  if (!config)
    return nullptr;
  OwningOpRef<ModuleOp> module = dtc::gpt::buildGpt(context, *config);
  dtc::CompileOptions options;
  options.training = dtc::TrainingOptions{};
  options.training->precision = "bf16";
  options.training->recompute = "none";
  options.parallel.backend = "cuda";
  options.parallel.dataParallel = dp;
  options.parallel.tensorParallel = tp;
  options.parallel.zero = 0;
  bool compiled = module && succeeded(dtc::compileToPlan(*module, plan, options));
  EXPECT_TRUE(compiled);
  return compiled ? std::move(module) : nullptr;
}

TEST(KernelCodegen, EveryKernelOfAGptTrainingStep) {
  auto context = codegenContext();
  dtc::plan::Plan plan;
  OwningOpRef<ModuleOp> module = compileGptStep(*context, 2, 2, plan);
  ASSERT_TRUE(module);
  auto engine = hostKernels(*module);
  ASSERT_TRUE(engine);
  std::mt19937 rng(11);
  auto kernelModule = module->lookupSymbol<ModuleOp>(dtc::attr::kKernelModule);
  ASSERT_TRUE(kernelModule);
  int kernels = 0, batches = 0;
  double worst = 0;
  for (const dtc::plan::RankProgram &program : plan.ranks()) {
    std::vector<int64_t> sizes; // launches' batches; the optimizer's the largest
    for (const auto *list : {&program.prologue(), &program.instructions()})
      for (int i = 0; i < list->size(); ++i) {
        const dtc::plan::Instruction &inst = (*list)[i];
        if (!inst.has_gpu() || inst.gpu().batched())
          continue;
        std::string kernel = kernelOf(inst);
        SCOPED_TRACE(kernel);
        double w = 0;
        if (inst.gpu().batch() > 1) { // the optimizer's updates, or neighbours
          ASSERT_EQ(list, &program.instructions());
          sizes.push_back(inst.gpu().batch());
          auto func = kernelModule.lookupSymbol<func::FuncOp>(kernel);
          ASSERT_TRUE(func);
          auto operands = func->getAttrOfType<DenseI64ArrayAttr>(dtc::attr::kBatchOperands);
          ASSERT_TRUE(operands);
          w = compareBatch(*engine, kernel, operands.asArrayRef(), program, i, rng);
          ++batches;
        } else {
          w = compareKernel(*engine, kernel, program, inst, {}, rng);
        }
        EXPECT_GE(w, 0) << kernel << ": the integer or bool results differ";
        EXPECT_LE(w, 1e-4) << kernel;
        worst = std::max(worst, w);
        ++kernels;
      }
    // The GPT's 21 weights updated in one launch, or two where the search
    // updates some on shards over tp (their masters split, their bf16
    // copies gathered; 6 of them here) and the rest whole.
    llvm::sort(sizes, std::greater<int64_t>());
    ASSERT_GE(sizes.size(), 2u);
    EXPECT_TRUE(sizes[0] == 21 || sizes[0] + sizes[1] == 21)
        << "each rank's optimizer is one launch, or one for the updates on shards and one for "
           "the rest: "
        << sizes[0] << " and " << sizes[1];
  }
  EXPECT_GT(kernels, 20);
  EXPECT_GE(batches, plan.ranks_size());
  std::printf("%d kernels of the GPT training step (%d of them launch batches), worst relative "
              "error %.2e\n", kernels, batches, worst);
}

/// A device on the host that runs each instruction's generated kernel
/// (host-lowered and JIT-compiled, what the CUDA backend runs as PTX) on
/// the operands the Executor gives it, and the CPU backend's kernel where
/// the plan has none: the Executor's device path (an arena of its own,
/// launch batches run by their last instruction on all their operands)
/// checked without a GPU.
class GeneratedKernelsOnHost final : public dtc::runtime::Device {
public:
  /// `operands`: per kernel function, which of its instruction's (or
  /// batch's) operands each argument is.
  /// What it ran (the test's: the Executor owns the device).
  struct Counts {
    int launches = 0, batches = 0;
  };
  GeneratedKernelsOnHost(ExecutionEngine &engine,
                         std::map<std::string, std::vector<int64_t>> operands, Counts &counts)
      : engine_(engine), operands_(std::move(operands)), counts_(counts) {}

  std::string name() const override { return "generated kernels on the host"; }
  char *allocate(size_t bytes, std::string &) override {
    arena_.assign(bytes, 0);
    return arena_.data();
  }
  bool upload(char *to, const void *from, size_t bytes, std::string &) override {
    std::memcpy(to, from, bytes);
    return true;
  }
  bool download(void *to, const char *from, size_t bytes, std::string &) override {
    std::memcpy(to, from, bytes);
    return true;
  }
  bool copy(char *to, const char *from, size_t bytes, std::string &) override {
    std::memmove(to, from, bytes);
    return true;
  }
  bool zero(char *at, size_t bytes, std::string &) override {
    std::memset(at, 0, bytes);
    return true;
  }
  bool synchronize(std::string &) override { return true; }
  bool load(const dtc::plan::Plan &, std::string &) override { return true; }
  bool connect(dtc::runtime::MeshGroups &, const std::vector<std::vector<int>> &,
               std::string &) override {
    return true;
  }
  std::unique_ptr<dtc::runtime::cpu::Kernel>
  kernelFor(const dtc::plan::Instruction &inst, const std::vector<dtc::plan::TensorType> &inputs,
            const std::vector<dtc::plan::TensorType> &outputs,
            std::unique_ptr<dtc::runtime::cpu::Kernel> host, dtc::plan::Stream,
            std::string &error) override {
    if (!inst.has_gpu())
      return host;
    auto it = operands_.find(kernelOf(inst));
    if (it == operands_.end() || inst.gpu().batched()) {
      error = "no kernel function for '" + inst.gpu().entry() + "'";
      return nullptr;
    }
    counts_.batches += inst.gpu().batch() > 1;
    return std::make_unique<Launch>(*this, it->first, it->second, inputs, outputs,
                                    inst.gpu().zero_outputs());
  }
  std::unique_ptr<dtc::runtime::cpu::Kernel>
  transferKernel(bool, const dtc::plan::TensorType &, std::vector<int64_t>, int, const int64_t *,
                 std::unique_ptr<dtc::runtime::cpu::Kernel> host, std::string &) override {
    return host;
  }
  bool connectTransfers(std::string &) override { return true; }
  bool communicationStreams() const override { return false; }
  std::string hostStagedSummary() const override { return {}; }

private:
  class Launch final : public dtc::runtime::cpu::Kernel {
  public:
    Launch(GeneratedKernelsOnHost &device, std::string function, std::vector<int64_t> operands,
           const std::vector<dtc::plan::TensorType> &inputs,
           const std::vector<dtc::plan::TensorType> &outputs, bool zero)
        : device_(device), function_(std::move(function)), operands_(std::move(operands)),
          inputs_(inputs.size()), zero_(zero) {
      for (const auto &t : inputs)
        counts_.push_back(dtc::test::count(t));
      for (const auto &t : outputs) {
        counts_.push_back(dtc::test::count(t));
        outputBytes_.push_back(size_t(counts_.back() * dtc::test::bytesOf(t.dtype())));
      }
    }
    bool run(const void *const *inputs, void *const *outputs, dtc::runtime::cpu::ThreadPool &,
             std::string &error) override {
      for (size_t o = 0; zero_ && o < outputBytes_.size(); ++o)
        std::memset(outputs[o], 0, outputBytes_[o]);
      int32_t status = 0;
      std::vector<std::pair<void *, int64_t>> buffers;
      for (int64_t k : operands_) {
        if (k < int64_t(inputs_))
          buffers.push_back({const_cast<void *>(inputs[k]), counts_[size_t(k)]});
        else if (k < int64_t(counts_.size()))
          buffers.push_back({outputs[size_t(k) - inputs_], counts_[size_t(k)]});
        else
          buffers.push_back({&status, 1});
      }
      invoke(device_.engine_, function_, buffers);
      ++device_.counts_.launches;
      if (status)
        error = function_ + " set its status word";
      return status == 0;
    }

  private:
    GeneratedKernelsOnHost &device_;
    std::string function_;
    std::vector<int64_t> operands_, counts_;
    size_t inputs_;
    std::vector<size_t> outputBytes_;
    bool zero_;
  };

  ExecutionEngine &engine_;
  std::map<std::string, std::vector<int64_t>> operands_;
  Counts &counts_;
  std::vector<char> arena_;
};

/// A GPT training step (AdamW, bf16) compiled for the CUDA backend, its
/// generated kernels run on the host through the Executor's device path
/// (the optimizer's updates one launch batch, each layer norm's gradient
/// sums another), trains as the CPU backend does: the same losses, step by
/// step.
TEST(KernelCodegen, AGptStepOnItsGeneratedKernelsTrainsAsTheCpuBackendDoes) {
  auto context = codegenContext();
  dtc::plan::Plan plan;
  OwningOpRef<ModuleOp> module = compileGptStep(*context, 1, 1, plan);
  ASSERT_TRUE(module);
  std::string error;
  auto engine = hostKernels(*module);
  ASSERT_TRUE(engine);
  // Each kernel function's arguments: a batch's say which operands; the
  // others are their instruction's inputs, outputs and status word.
  std::map<std::string, std::vector<int64_t>> operands;
  auto kernels = module->lookupSymbol<ModuleOp>(dtc::attr::kKernelModule);
  for (auto func : kernels.getOps<func::FuncOp>()) {
    std::vector<int64_t> &list = operands[func.getName().str()];
    if (auto batch = func->getAttrOfType<DenseI64ArrayAttr>(dtc::attr::kBatchOperands))
      list.assign(batch.asArrayRef().begin(), batch.asArrayRef().end());
    else
      for (unsigned k = 0; k < func.getNumArguments(); ++k)
        list.push_back(k);
  }
  // Tokens 0..95 in a pattern the model can learn a little of.
  std::string data = ::testing::TempDir() + "generated_step_tokens.bin";
  {
    std::ofstream out(data, std::ios::binary);
    for (int i = 0; i < 4096; ++i) {
      uint16_t token = uint16_t((i * 7 + i / 13) % 96);
      out.write(reinterpret_cast<const char *>(&token), sizeof token);
    }
  }
  std::vector<double> profile; // the generated kernels' run's, per instruction
  auto train = [&](std::unique_ptr<dtc::runtime::Device> device, std::vector<double> &losses) {
    bool onDevice = bool(device);
    auto executor = dtc::runtime::Executor::create(plan, 0, "", 1, error, nullptr,
                                                   std::move(device));
    ASSERT_TRUE(executor) << error;
    if (onDevice)
      executor->enableProfile();
    auto keepProfile = llvm::make_scope_exit([&] {
      if (onDevice)
        profile = executor->profileSeconds();
    });
    dtc::runtime::train::Trainer trainer(plan, *executor, nullptr, [&](const std::string &line) {
      double loss = 0;
      long long step = 0;
      if (std::sscanf(line.c_str(), "step %lld loss %lf", &step, &loss) == 2)
        losses.push_back(loss);
    });
    dtc::runtime::train::TrainOptions run;
    run.data = data;
    run.steps = 4;
    run.shuffle = false;
    ASSERT_TRUE(trainer.run(run, error)) << error;
  };
  std::vector<double> cpu, generated;
  train(nullptr, cpu);
  GeneratedKernelsOnHost::Counts counts;
  train(std::make_unique<GeneratedKernelsOnHost>(*engine, operands, counts), generated);
  ASSERT_EQ(cpu.size(), 4u);
  ASSERT_EQ(generated.size(), cpu.size());
  EXPECT_GE(counts.batches, 2) << "the optimizer's updates are one launch, a layer norm's "
                                  "gradient sums another";
  EXPECT_GT(counts.launches, 4 * 15);
  for (size_t s = 0; s < cpu.size(); ++s) {
    std::printf("step %zu: loss %.6f on the CPU backend, %.6f on the generated kernels\n", s + 1,
                cpu[s], generated[s]);
    EXPECT_NEAR(generated[s], cpu[s], 1e-4 * std::abs(cpu[s])) << "step " << s + 1;
  }
  EXPECT_LT(cpu.back(), cpu.front()) << "the model learns";
  // Profiled, a batch's time (measured on its last instruction, which
  // launches it) is shared among its members by the bytes each moves.
  const dtc::plan::RankProgram &program = plan.ranks(0);
  ASSERT_EQ(profile.size(), size_t(program.instructions_size()));
  int shared = 0;
  for (int last = 0; last < program.instructions_size(); ++last) {
    uint32_t batch = program.instructions(last).gpu().batch();
    if (batch < 2)
      continue;
    int first = last + 1 - int(batch);
    double total = 0, bytes = 0;
    for (int m = first; m <= last; ++m)
      total += profile[size_t(m)], bytes += program.instructions(m).cost().bytes();
    ASSERT_GT(total, 0);
    for (int m = first; m <= last; ++m)
      EXPECT_NEAR(profile[size_t(m)] / total, program.instructions(m).cost().bytes() / bytes, 1e-4)
          << "instruction " << m << " of the batch ending at " << last;
    ++shared;
  }
  EXPECT_EQ(shared, counts.batches);
}

} // namespace

namespace {

/// With --recompute auto a second compile runs on another thread, and
/// loading a dialect then races with the first (a crash found under load:
/// lower-affine loading `vector` and outlining `dlti` mid-compile). So
/// every dialect a CUDA compile meets must be among those its pipeline
/// declares, loaded before the threads start.
TEST(KernelCodegen, ACudaCompileLoadsNoDialectItsPipelineDoesNotDeclare) {
  DialectRegistry registry;
  dtc::registerAllDialects(registry);
  dtc::registerAllPasses();
  MLIRContext context(registry);
  context.disableMultithreading();
  std::string error;
  auto config =
      dtc::gpt::parseGptSpec("gpt:layers=1,hidden=32,heads=2,seq=8,vocab=64,batch=4", error);
  ASSERT_TRUE(config) << error;
  OwningOpRef<ModuleOp> module = dtc::gpt::buildGpt(context, *config);
  ASSERT_TRUE(module);
  dtc::CompileOptions options;
  options.training = dtc::TrainingOptions{};
  options.training->recompute = "none";
  options.parallel.backend = "cuda";
  options.parallel.dataParallel = 2;
  PassManager pm(&context);
  dtc::buildCompilePipeline(pm, options);
  DialectRegistry declared;
  pm.getDependentDialects(declared);
  context.appendDialectRegistry(declared);
  context.loadAllAvailableDialects();
  std::set<std::string> before;
  for (Dialect *d : context.getLoadedDialects())
    before.insert(d->getNamespace().str());
  dtc::plan::Plan plan;
  ASSERT_TRUE(succeeded(dtc::compileToPlan(*module, plan, options)));
  for (Dialect *d : context.getLoadedDialects())
    EXPECT_TRUE(before.count(d->getNamespace().str()))
        << "the compile loaded '" << d->getNamespace().str() << "', which no pass declares";
}

} // namespace
