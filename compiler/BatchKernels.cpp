//===- BatchKernels.cpp - independent kernels in one launch ---------------===//
//
// A training step ends with its optimizer: AdamW's update of each weight is
// one elementwise kernel, so GPT-2 small's step launched 197 of them, most
// of a few thousand elements, each costing a launch (a few microseconds)
// and a wave of blocks that barely fills the GPU. This pass gives a run of
// consecutive ops whose kernels do not depend on each other one kernel,
// as PyTorch's multi-tensor ("foreach") optimizers do: a parallel loop over
// the members' threads laid end to end, each member's taking a whole
// number of blocks (of kThreadsPerBlock), a thread finding its member by a
// binary search over the members' first threads (one comparison per level,
// the same in every thread of a block) and running that member's body for
// its thread: an elementwise op's on its element, a loop kernel's (a
// reduction's output, a copy's element) as its own loop would. The ops
// stay separate instructions in the plan; the last of a run names the
// kernel and `dtc.batch` (how many instructions it launches for), the
// others `dtc.batched` (launched by the last). The kernel's parameters are
// the members' buffers, each once (a learning rate read by every update is
// one parameter); `dtc.batch_operands` says, per parameter, which of the
// batch's operands it is: the members' inputs in order, then their
// outputs. A run stays within one part of the step (forward, backward,
// once per step; a virtual stage), touches no bytes one member writes and
// another reads or writes (buffer assignment may give a later member's
// output an earlier one's dead input), and has at most kMaxParameters
// parameters (a launch's parameters must fit in 4 KiB). Why:
// docs/gpu-kernels.md.
//
//===----------------------------------------------------------------------===//
#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/LoopKernels.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"

#include <functional>

namespace dtc {
#define GEN_PASS_DEF_BATCHKERNELS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// Parameters a batched kernel may take: 8-byte pointers within CUDA's
/// 4 KiB of kernel parameters, with room to spare.
constexpr int64_t kMaxParameters = 480;

/// The kernel of an op that can join a batch: an elementwise op's, one
/// 1-D linalg.generic over the function's arguments in order; or another
/// op's loop kernel, one scf.parallel over its threads from 0 by 1 after
/// pure ops (its constants), its arguments the op's operands then results
/// (not a row kernel's lanes, nor one that sets a status word). Outputs
/// that start as zeros (atomic sums) are a batch's all, so such kernels
/// batch with their own kind alone, none writing over its input.
struct MemberKernel {
  func::FuncOp func;
  linalg::GenericOp generic; // an elementwise op's
  scf::ParallelOp loop;      // a loop kernel's
  int64_t threads = 0;
  bool zeroOutputs = false;  // its outputs zeroed before it runs
};

std::optional<MemberKernel> batchableKernel(Operation *op, ModuleOp module) {
  auto name = op->getAttrOfType<SymbolRefAttr>(attr::kKernel);
  if (!name)
    return std::nullopt;
  auto func = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(module, name);
  if (!func || func.getBody().empty() ||
      func.getNumArguments() != op->getNumOperands() + op->getNumResults())
    return std::nullopt;
  Block &body = func.getBody().front();
  MemberKernel kernel{func, {}, {}, 0};
  if (isa<graph::FusedOp>(op)) {
    auto generic = dyn_cast<linalg::GenericOp>(body.front());
    if (body.getOperations().size() != 2 || !generic || generic.getNumLoops() != 1 ||
        generic->getNumResults() != 0)
      return std::nullopt;
    for (auto [k, operand] : llvm::enumerate(generic->getOperands())) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (!arg || arg.getOwner() != &body || arg.getArgNumber() != k)
        return std::nullopt;
    }
    kernel.generic = generic;
    kernel.threads = cast<RankedTensorType>(op->getResult(0).getType()).getNumElements();
    return kernel;
  }
  auto threads = func->getAttrOfType<IntegerAttr>(attr::kThreads);
  if (!threads || func->hasAttr(attr::kLanes) || func->hasAttr(attr::kStatus) ||
      body.getOperations().size() < 2)
    return std::nullopt;
  auto loop = dyn_cast<scf::ParallelOp>(*std::prev(body.end(), 2));
  auto constant = [](Value v, int64_t want) {
    auto c = v.getDefiningOp<arith::ConstantIndexOp>();
    return c && c.value() == want;
  };
  if (!loop || loop.getNumLoops() != 1 || loop.getNumResults() != 0 ||
      !constant(loop.getLowerBound()[0], 0) || !constant(loop.getStep()[0], 1) ||
      !constant(loop.getUpperBound()[0], threads.getInt()))
    return std::nullopt;
  for (Operation &before : body)
    if (&before != loop && !before.hasTrait<OpTrait::IsTerminator>() && !isPure(&before))
      return std::nullopt;
  kernel.loop = loop;
  kernel.threads = threads.getInt();
  kernel.zeroOutputs = func->hasAttr(attr::kZeroOutputs);
  return kernel;
}

/// The bytes `value` occupies in the arena: [offset, offset + bytes).
std::pair<int64_t, int64_t> bytesOf(Value value) {
  Value storage = storageOf(value);
  int64_t offset = -1;
  if (auto arg = dyn_cast<BlockArgument>(storage)) {
    if (auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (auto at = func.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), attr::kOffset))
        offset = at.getInt();
  } else if (auto offsets =
                 storage.getDefiningOp()->getAttrOfType<DenseI64ArrayAttr>(attr::kOffsets)) {
    offset = offsets[cast<OpResult>(storage).getResultNumber()];
  }
  return {offset, offset + tensorBytes(storage)};
}

/// Which part of the step `op` runs in: ops of different parts are run at
/// different times (a pipeline stage's forward and backward, a
/// micro-batched step's once-per-step part, a virtual stage's).
std::tuple<bool, bool, int64_t> partOf(Operation *op) {
  auto chunk = op->getAttrOfType<IntegerAttr>(attr::kChunk);
  return {op->hasAttr(attr::kOncePerStep), op->hasAttr(attr::kPipelineForward),
          chunk ? chunk.getInt() : 0};
}

/// Whether `op` makes no instruction of its own, so a run may go past it.
bool makesNoInstruction(Operation *op) {
  return isa<graph::ParameterOp, graph::ConstantOp>(op) || isViewOp(op);
}

/// A run of ops being gathered into one launch.
struct Run {
  SmallVector<Operation *> members;
  SmallVector<MemberKernel> kernels;
  SmallVector<std::pair<int64_t, int64_t>> reads, writes; // byte ranges
  llvm::DenseSet<Value> buffers;                          // the kernel's parameters
  std::tuple<bool, bool, int64_t> part;

  static bool overlaps(std::pair<int64_t, int64_t> a, std::pair<int64_t, int64_t> b) {
    return a.first < b.second && b.first < a.second;
  }
  static bool anyOverlaps(ArrayRef<std::pair<int64_t, int64_t>> a,
                          ArrayRef<std::pair<int64_t, int64_t>> b) {
    return llvm::any_of(a, [&](auto x) { return llvm::any_of(b, [&](auto y) {
                                           return overlaps(x, y);
                                         }); });
  }

  /// Adds `op` if it may run beside the members; false when it may not.
  bool tryAdd(Operation *op, const MemberKernel &kernel) {
    SmallVector<std::pair<int64_t, int64_t>> in, out;
    llvm::DenseSet<Value> more;
    for (Value v : op->getOperands()) {
      if (llvm::is_contained(members, storageOf(v).getDefiningOp()))
        return false; // reads a member's result
      in.push_back(bytesOf(v));
      if (!buffers.contains(v))
        more.insert(v);
    }
    for (Value v : op->getResults()) {
      out.push_back(bytesOf(v));
      more.insert(v);
    }
    for (auto range : llvm::concat<std::pair<int64_t, int64_t>>(in, out))
      if (range.first < 0)
        return false; // no offset: not placed by buffer assignment
    // Zeroed outputs are the whole batch's: its kernels all of that kind,
    // none writing over what it reads.
    if ((kernel.zeroOutputs && anyOverlaps(in, out)) ||
        (!members.empty() && kernel.zeroOutputs != kernels.front().zeroOutputs))
      return false;
    if (!members.empty() &&
        (partOf(op) != part || anyOverlaps(in, writes) || anyOverlaps(out, reads) ||
         anyOverlaps(out, writes) ||
         int64_t(buffers.size() + more.size()) > kMaxParameters))
      return false;
    if (members.empty())
      part = partOf(op);
    members.push_back(op);
    kernels.push_back(kernel);
    reads.append(in);
    writes.append(out);
    buffers.insert(more.begin(), more.end());
    return true;
  }
};

/// The kernel launching `run`'s members: one parallel loop over their
/// threads, each member's rounded up to whole blocks.
func::FuncOp batchKernel(OpBuilder &b, const Run &run, StringRef name) {
  Location loc = run.members.front()->getLoc();
  // Parameters: each distinct value once, inputs in member order then
  // outputs; `operands` says which of the batch's operands each is.
  SmallVector<Value> values;
  SmallVector<int64_t> operands;
  llvm::DenseMap<Value, int64_t> parameterOf;
  int64_t inputs = 0;
  for (Operation *op : run.members)
    inputs += int64_t(op->getNumOperands());
  int64_t input = 0, output = inputs;
  for (Operation *op : run.members)
    for (Value v : op->getOperands()) {
      if (parameterOf.try_emplace(v, int64_t(values.size())).second) {
        values.push_back(v);
        operands.push_back(input);
      }
      ++input;
    }
  for (Operation *op : run.members)
    for (Value v : op->getResults()) {
      parameterOf[v] = int64_t(values.size());
      values.push_back(v);
      operands.push_back(output++);
    }
  SmallVector<Type> types;
  for (Value v : values) {
    auto type = cast<RankedTensorType>(v.getType());
    types.push_back(MemRefType::get({type.getNumElements()}, type.getElementType()));
  }
  // Each member's first thread and thread count.
  SmallVector<int64_t> starts, counts;
  int64_t threads = 0;
  for (const MemberKernel &kernel : run.kernels) {
    starts.push_back(threads);
    counts.push_back(kernel.threads);
    int64_t blocks = (kernel.threads + kThreadsPerBlock - 1) / kThreadsPerBlock;
    threads += blocks * kThreadsPerBlock;
  }
  auto func = b.create<func::FuncOp>(loc, name, b.getFunctionType(types, {}));
  func->setAttr(attr::kThreads, b.getI64IntegerAttr(threads));
  func->setAttr(attr::kBatchOperands, b.getDenseI64ArrayAttr(operands));
  Block *entry = func.addEntryBlock();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(entry);
  auto index = [&](OpBuilder &at, int64_t v) -> Value {
    return at.create<arith::ConstantIndexOp>(loc, v);
  };
  // Member m's body for its thread `i`: an elementwise op's on element i
  // of its result; a loop kernel's loop body with i its thread.
  auto member = [&](OpBuilder &at, size_t m, Value i) {
    Operation *op = run.members[m];
    MemberKernel kernel = run.kernels[m];
    IRMapping map;
    SmallVector<Value> buffers(op->getOperands());
    buffers.append(op->result_begin(), op->result_end());
    for (auto [k, v] : llvm::enumerate(buffers))
      map.map(kernel.func.getArgument(unsigned(k)),
              entry->getArgument(unsigned(parameterOf.lookup(v))));
    if (kernel.loop) {
      for (Operation &before : kernel.func.getBody().front()) {
        if (&before == kernel.loop)
          break;
        at.clone(before, map);
      }
      map.map(kernel.loop.getInductionVars()[0], i);
      for (Operation &inner : kernel.loop.getBody()->without_terminator())
        at.clone(inner, map);
      return;
    }
    linalg::GenericOp generic = kernel.generic;
    SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
    Block &body = generic.getRegion().front();
    const size_t ins = op->getNumOperands();
    for (auto [k, arg] : llvm::enumerate(body.getArguments())) {
      if (k >= ins && arg.use_empty())
        continue;
      Value at_ = at.create<affine::AffineApplyOp>(loc, maps[k], ValueRange{i});
      map.map(arg, at.create<memref::LoadOp>(loc, map.lookup(generic->getOperand(k)),
                                             ValueRange{at_}));
    }
    for (Operation &inner : body.without_terminator())
      at.clone(inner, map);
    for (auto [k, yielded] : llvm::enumerate(body.getTerminator()->getOperands())) {
      Value at_ = at.create<affine::AffineApplyOp>(loc, maps[ins + k], ValueRange{i});
      at.create<memref::StoreOp>(loc, map.lookupOrDefault(yielded),
                                 map.lookup(generic->getOperand(ins + k)), ValueRange{at_});
    }
  };
  b.create<scf::ParallelOp>(
      loc, ValueRange{index(b, 0)}, ValueRange{index(b, threads)}, ValueRange{index(b, 1)},
      [&](OpBuilder &nested, Location, ValueRange ivs) {
        Value t = ivs[0];
        // Members [lo, hi): halved until one is left.
        std::function<void(OpBuilder &, size_t, size_t)> pick = [&](OpBuilder &at, size_t lo,
                                                                    size_t hi) {
          if (hi - lo == 1) {
            Value i = at.create<arith::SubIOp>(loc, t, index(at, starts[lo]));
            Value inside = at.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, i,
                                                    index(at, counts[lo]));
            at.create<scf::IfOp>(loc, inside, [&](OpBuilder &then, Location) {
              member(then, lo, i);
              then.create<scf::YieldOp>(loc);
            });
            return;
          }
          size_t mid = (lo + hi) / 2;
          Value before = at.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, t,
                                                  index(at, starts[mid]));
          at.create<scf::IfOp>(
              loc, before,
              [&](OpBuilder &then, Location) {
                pick(then, lo, mid);
                then.create<scf::YieldOp>(loc);
              },
              [&](OpBuilder &otherwise, Location) {
                pick(otherwise, mid, hi);
                otherwise.create<scf::YieldOp>(loc);
              });
        };
        pick(nested, 0, run.members.size());
      });
  b.create<func::ReturnOp>(loc);
  return func;
}

struct BatchKernels : impl::BatchKernelsBase<BatchKernels> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto kernels = module.lookupSymbol<ModuleOp>(attr::kKernelModule);
    if (!kernels)
      return;
    OpBuilder b(&getContext());
    int64_t count = 0, batched = 0;
    size_t largest = 0;
    auto flush = [&](Run &run) {
      if (run.members.size() >= 2) {
        b.setInsertionPointToEnd(kernels.getBody());
        func::FuncOp func = batchKernel(b, run, "batch_" + std::to_string(count++));
        if (run.kernels.front().zeroOutputs)
          func->setAttr(attr::kZeroOutputs, b.getUnitAttr());
        auto ref = SymbolRefAttr::get(b.getStringAttr(attr::kKernelModule),
                                      {FlatSymbolRefAttr::get(func)});
        for (Operation *op : run.members) {
          op->removeAttr(attr::kKernel);
          op->setAttr(attr::kBatched, b.getUnitAttr());
        }
        Operation *last = run.members.back();
        last->removeAttr(attr::kBatched);
        last->setAttr(attr::kKernel, ref);
        last->setAttr(attr::kBatch, b.getI64IntegerAttr(int64_t(run.members.size())));
        batched += int64_t(run.members.size());
        largest = std::max(largest, run.members.size());
      }
      run = Run();
    };
    for (auto program : module.getOps<func::FuncOp>())
      for (Block &block : program.getBody()) {
        Run run;
        for (Operation &op : block) {
          // The prologue's ops run once, at load, on the host: none of the
          // step's instructions, and none batched.
          if (makesNoInstruction(&op) || op.hasAttr(attr::kPrologue))
            continue;
          std::optional<MemberKernel> kernel = batchableKernel(&op, module);
          if (kernel && run.tryAdd(&op, *kernel))
            continue;
          flush(run);
          if (kernel)
            run.tryAdd(&op, *kernel);
        }
        flush(run);
      }
    // The members' own kernels that no op names any more.
    llvm::DenseSet<StringAttr> named;
    module.walk([&](Operation *op) {
      if (auto ref = op->getAttrOfType<SymbolRefAttr>(attr::kKernel))
        named.insert(ref.getLeafReference());
      if (auto list = op->getAttrOfType<ArrayAttr>(attr::kKernel))
        for (Attribute a : list)
          if (auto ref = dyn_cast<SymbolRefAttr>(a))
            named.insert(ref.getLeafReference());
    });
    for (auto func : llvm::make_early_inc_range(kernels.getOps<func::FuncOp>()))
      if (!named.contains(func.getSymNameAttr()))
        func.erase();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || count == 0)
      return;
    addNote(main, "kernels: " + std::to_string(batched) + " ops' kernels launched as " +
                      std::to_string(count) + " (independent ones side by side, up to " +
                      std::to_string(largest) + " a launch)");
  }
};

} // namespace
} // namespace dtc
