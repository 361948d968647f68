//===- KernelsToPtx.cpp - the kernel functions as PTX for NVIDIA GPUs -----===//
//
// dtc-outline-kernels' functions (@dtc_kernels), lowered on a copy for each
// target chip: math functions expanded into arithmetic (KernelMath.h: no
// device library needed), the linalg loop over the result's elements becomes a
// parallel loop, tiled by 256 (a block of threads) and mapped onto blocks
// and threads, outlined into a gpu.module and lowered through NVVM to PTX
// by LLVM's NVPTX back end (bare pointers: a kernel's parameters are its
// buffers' device addresses; what NVVM lowers to calls, like sqrt, comes
// from the CUDA toolkit's libdevice). Each
// kernel function gets its PTX per chip (`dtc.ptx`: chip -> text), which
// the plan carries and the CUDA runtime loads (cuModuleLoadData), its
// launch (`dtc.launch`: grid, block, from `dtc.threads`) and its
// parameters' buffers (`dtc.params`: outlining orders a kernel's parameters
// by first use, not as the function lists them). No GPU is needed here.
// Why: docs/gpu-kernels.md.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/KernelMath.h"
#include "compiler/LoopKernels.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"

#include "plan/FormatBytes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cstdlib>

#include <mutex>

namespace dtc {
#define GEN_PASS_DEF_KERNELSTOPTX
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

namespace dtc {
namespace {

/// The CUDA toolkit: $CUDA_HOME, $CUDA_PATH, the folder above nvcc's, or
/// /usr/local/cuda; "" when none has libdevice.
std::string cudaToolkit() {
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *path = std::getenv(var); path && *path)
      return path;
  if (auto nvcc = llvm::sys::findProgramByName("nvcc"))
    return llvm::sys::path::parent_path(llvm::sys::path::parent_path(*nvcc)).str();
  return llvm::sys::fs::exists("/usr/local/cuda") ? "/usr/local/cuda" : "";
}

/// What gpu-kernel-outlining appends to a function's name for its kernel.
constexpr llvm::StringLiteral kOutlinedSuffix = "_kernel";

/// The PTX ISA version a chip's kernels declare: 7.0 (CUDA 11.0) for sm_80
/// to sm_89, 7.8 (CUDA 11.8) for sm_90; 0 for a chip that is not sm_80 or
/// later (LLVM 19's NVPTX back end goes to sm_90).
int ptxVersion(llvm::StringRef chip) {
  unsigned arch = 0;
  if (!chip.consume_front("sm_") || chip.consumeInteger(10, arch) ||
      (!chip.empty() && chip != "a") || arch < 80 || arch > 90)
    return 0;
  return arch >= 90 ? 78 : 70;
}

/// The first half of the lowering: each kernel's loops tiled onto blocks
/// of threads and outlined as a gpu.module.
void mapOntoThreads(OpPassManager &pm) {
  OpPassManager &funcs = pm.nest<func::FuncOp>();
  funcs.addPass(createRowsToGpu()); // a block per row where rows are long
  funcs.addPass(createConvertLinalgToParallelLoopsPass());
  funcs.addPass(createParallelLoopTilingPass({kThreadsPerBlock}));
  funcs.addPass(createGpuMapParallelLoopsPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createParallelLoopToGpuPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createCanonicalizerPass());
  // Constants and index arithmetic into the kernel: its parameters are
  // its buffers alone.
  pm.addPass(createGpuLauchSinkIndexComputationsPass());
  pm.addPass(createGpuKernelOutliningPass());
}

/// NVPTX's 64-bit data layout (LLVM 19's NVPTXTargetMachine).
constexpr const char *kNvptxDataLayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64";

/// sqrt as LLVM's intrinsic, which NVPTX makes `sqrt.rn` (IEEE, as the
/// host's; precise sqrt is NVPTX's default): NVVM's lowering would call
/// libdevice's __nv_sqrtf, which picks `sqrt.approx` unless
/// __nvvm_reflect("__CUDA_PREC_SQRT") says otherwise, and LLVM's
/// NVVMReflect answers 0 for it. rsqrt the same way, as 1 / sqrt (`rcp`'s
/// approximation otherwise). The host test then checks the GPU's
/// arithmetic to the bit, and AdamW's denominator is PyTorch's.
void correctlyRoundedSqrt(Operation *root) {
  root->walk([](Operation *op) {
    Type type = op->getNumResults() ? op->getResult(0).getType() : Type();
    if (!isa<math::SqrtOp, math::RsqrtOp>(op) || !(type.isF32() || type.isF64()))
      return;
    OpBuilder b(op);
    Value x = op->getOperand(0);
    // Called by name: NVVM's conversion takes llvm.intr.sqrt for
    // libdevice's too.
    Value r = b.create<LLVM::CallIntrinsicOp>(op->getLoc(), x.getType(),
                                              type.isF32() ? "llvm.sqrt.f32" : "llvm.sqrt.f64",
                                              ValueRange{x})
                  .getResult(0);
    if (isa<math::RsqrtOp>(op))
      r = b.create<arith::DivFOp>(
          op->getLoc(), b.create<arith::ConstantOp>(op->getLoc(), b.getFloatAttr(x.getType(), 1)),
          r);
    op->getResult(0).replaceAllUsesWith(r);
    op->erase();
  });
}

/// The second half: each gpu.module through NVVM to PTX for `chip`. sqrt,
/// fabs and what else NVVM lowers to calls come from the CUDA toolkit's
/// libdevice, linked in.
void lowerToPtx(OpPassManager &pm, const std::string &chip, const std::string &toolkit,
                const std::string &libdevice) {
  GpuNVVMAttachTargetOptions target;
  target.chip = chip;
  target.features = "+ptx" + std::to_string(ptxVersion(chip));
  target.optLevel = 3;
  std::vector<std::string> libs{libdevice};
  target.linkLibs = libs;
  pm.addPass(createGpuNVVMAttachTarget(target));
  pm.addPass(createConvertSCFToCFPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  OpPassManager &gpu = pm.nest<gpu::GPUModuleOp>();
  gpu.addPass(createStripDebugInfoPass());
  ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.useBarePtrCallConv = true;
  nvvm.indexBitwidth = 64;
  gpu.addPass(createConvertGpuOpsToNVVMOps(nvvm));
  gpu.addPass(createCanonicalizerPass());
  gpu.addPass(createCSEPass());
  gpu.addPass(createReconcileUnrealizedCastsPass());
  GpuModuleToBinaryPassOptions binary;
  binary.toolkitPath = toolkit;
  binary.compilationTarget = "isa"; // PTX text
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

struct KernelsToPtx : impl::KernelsToPtxBase<KernelsToPtx> {
  using KernelsToPtxBase::KernelsToPtxBase;

  void getDependentDialects(DialectRegistry &registry) const override {
    KernelsToPtxBase::getDependentDialects(registry);
    // And every dialect the two halves' passes load (vector for
    // lower-affine, DLTI for outlining, ...): loaded up front, none while
    // another thread compiles (--recompute auto).
    OpPassManager lowering("builtin.module");
    mapOntoThreads(lowering);
    lowerToPtx(lowering, "sm_90", "", "");
    lowering.getDependentDialects(registry);
    NVVM::registerNVVMTargetInterfaceExternalModels(registry);
    registerBuiltinDialectTranslation(registry);
    registerGPUDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
    registerNVVMDialectTranslation(registry);
  }

  void runOnOperation() override {
    // One lowering at a time in the process (a second --recompute mode
    // compiles on another thread): LLVM's code generators share state.
    static std::mutex oneAtATime;
    std::lock_guard<std::mutex> lock(oneAtATime);
    static std::once_flag targets;
    std::call_once(targets, [] {
      LLVMInitializeNVPTXTargetInfo();
      LLVMInitializeNVPTXTarget();
      LLVMInitializeNVPTXTargetMC();
      LLVMInitializeNVPTXAsmPrinter();
    });
    ModuleOp module = getOperation();
    auto kernels = module.lookupSymbol<ModuleOp>(attr::kKernelModule);
    if (!kernels)
      return;
    MLIRContext *context = &getContext();
    std::string toolkit = cudaToolkit();
    std::string libdevice = toolkit + "/nvvm/libdevice/libdevice.10.bc";
    if (toolkit.empty() || !llvm::sys::fs::exists(libdevice)) {
      kernels.emitError("generating GPU kernels needs the CUDA toolkit's libdevice "
                        "(nvvm/libdevice/libdevice.10.bc): set CUDA_HOME to the toolkit");
      return signalPassFailure();
    }
    // chip -> kernel -> PTX
    std::map<std::string, std::map<std::string, std::string>> ptx;
    std::map<std::string, SmallVector<int64_t>> params; // kernel -> its parameters' buffers
    SmallVector<std::string> chipList;
    for (llvm::StringRef chip : llvm::split(llvm::StringRef(chips), ','))
      if (!chip.trim().empty())
        chipList.push_back(chip.trim().str());
    for (const std::string &chip : chipList)
      if (ptxVersion(chip) == 0) {
        kernels.emitError() << "chips=" << chips << ": '" << chip
                            << "' is not a chip the kernels can target (sm_80 to sm_90)";
        return signalPassFailure();
      }
    for (const std::string &chip : chipList) {
      OwningOpRef<ModuleOp> copy = cast<ModuleOp>(kernels->clone());
      (*copy)->removeAttr(SymbolTable::getSymbolAttrName()); // a top-level module
      PassManager pm(context);
      mapOntoThreads(pm);
      if (failed(pm.run(*copy))) {
        kernels.emitError() << "mapping the kernels onto GPU threads failed";
        return signalPassFailure();
      }
      // Each function launches one kernel, whose parameters are the
      // function's buffers in the order outlining found them used.
      for (auto func : copy->getOps<func::FuncOp>()) {
        SmallVector<gpu::LaunchFuncOp> launches;
        func.walk([&](gpu::LaunchFuncOp launch) { launches.push_back(launch); });
        if (launches.size() != 1) {
          func.emitError() << "a kernel function should launch one kernel, not "
                           << launches.size();
          return signalPassFailure();
        }
        SmallVector<int64_t> order;
        for (Value operand : launches[0].getKernelOperands()) {
          auto arg = dyn_cast<BlockArgument>(operand);
          if (!arg || arg.getOwner()->getParentOp() != func) {
            func.emitError() << "a kernel parameter is not one of the function's buffers";
            return signalPassFailure();
          }
          order.push_back(arg.getArgNumber());
        }
        params[func.getName().str()] = order;
      }
      // Math functions expanded inside each kernel (their constants stay
      // there too).
      bool expanded = true;
      copy->walk([&](gpu::GPUModuleOp kernel) {
        expanded &= succeeded(expandKernelMath(kernel));
        correctlyRoundedSqrt(kernel);
        // NVPTX's data layout from the start: LLVM's default aligns i64 to
        // 4 bytes, and loads translated under it stay so (an index read as
        // two 32-bit loads).
        kernel->setAttr(LLVM::LLVMDialect::getDataLayoutAttrName(),
                        StringAttr::get(context, kNvptxDataLayout));
      });
      if (!expanded) {
        kernels.emitError("expanding the kernels' math functions failed");
        return signalPassFailure();
      }
      pm.clear();
      lowerToPtx(pm, chip, toolkit, libdevice);
      if (failed(pm.run(*copy))) {
        kernels.emitError() << "lowering the kernels to PTX for " << chip << " failed";
        return signalPassFailure();
      }
      // Each outlined gpu.module is named after its function (@kernel_N
      // -> @kernel_N_kernel, entry point kernel_N_kernel).
      copy->walk([&](gpu::BinaryOp binary) {
        std::string name = binary.getSymName().str();
        if (llvm::StringRef(name).ends_with(kOutlinedSuffix))
          name.resize(name.size() - kOutlinedSuffix.size());
        for (Attribute object : binary.getObjects())
          if (auto o = dyn_cast<gpu::ObjectAttr>(object))
            ptx[chip][name] = o.getObject().getValue().rtrim('\0').str();
      });
    }
    int64_t count = 0, ptxBytes = 0, rowKernels = 0;
    for (auto func : kernels.getOps<func::FuncOp>()) {
      ++count;
      rowKernels += func->hasAttr(attr::kLanes);
      for (const std::string &chip : chipList)
        ptxBytes += int64_t(ptx[chip][func.getName().str()].size());
      SmallVector<NamedAttribute> perChip;
      for (const std::string &chip : chipList) {
        auto it = ptx[chip].find(func.getName().str());
        if (it == ptx[chip].end()) {
          func.emitError() << "no PTX for " << chip;
          return signalPassFailure();
        }
        perChip.push_back(NamedAttribute(StringAttr::get(context, chip),
                                         StringAttr::get(context, it->second)));
      }
      func->setAttr(attr::kPtx, DictionaryAttr::get(context, perChip));
      func->setAttr(attr::kPtxEntry, StringAttr::get(context, func.getName() + kOutlinedSuffix));
      func->setAttr(attr::kParams, DenseI64ArrayAttr::get(context, params[func.getName().str()]));
      // The launch: a block of threads per tile of the parallel loop (the
      // result's elements when the function does not say), or a block of
      // its lanes per row (dtc-rows-to-gpu).
      auto threads = func->getAttrOfType<IntegerAttr>(attr::kThreads);
      int64_t n = threads ? threads.getInt()
                          : cast<MemRefType>(func.getArgumentTypes().back()).getNumElements();
      auto lanes = func->getAttrOfType<IntegerAttr>(attr::kLanes);
      func->setAttr(attr::kLaunch,
                    DenseI64ArrayAttr::get(
                        context, lanes ? ArrayRef<int64_t>{n, lanes.getInt()}
                                       : ArrayRef<int64_t>{(n + kThreadsPerBlock - 1) /
                                                               kThreadsPerBlock,
                                                           kThreadsPerBlock}));
    }
    // Said once, on the first program (@main, or a pipeline's first stage).
    for (auto program : module.getOps<func::FuncOp>()) {
      addNote(program, "gpu kernels: " + std::to_string(count) + " lowered for " +
                           llvm::join(chipList, ", ") + " (PTX " + plan::formatBytes(ptxBytes) +
                           "; blocks of 256 threads" +
                           (rowKernels ? ", " + std::to_string(rowKernels) +
                                             " of them a block per row"
                                       : std::string()) +
                           "; dtc plan --ptx DIR writes them)");
      break;
    }
  }
};

} // namespace
} // namespace dtc
