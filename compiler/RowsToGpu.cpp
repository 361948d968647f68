//===- RowsToGpu.cpp - a row kernel as a block per row ---------------------===//
//
// A row kernel (dtc.lanes: softmax and layer norm rows) is an scf.parallel
// over rows (or groups of rows, taken in turn by an scf.for) whose body
// holds scf.parallel loops over lanes, the lanes' parts of a fold combined
// by scf.reduce. Lowered for the host it runs as
// nested loops (the code generator's tests); here it becomes one
// gpu.launch: a block per row, a thread per lane, each lane loop's
// reduction a block-wide gpu.all_reduce (shuffles within warps, then
// shared memory across them, when NVVM lowers it). MLIR's own
// parallel-loop mapping leaves a nest with reductions alone, hence this
// pass. Why rows are a block's work: docs/gpu-kernels.md.
//
//===----------------------------------------------------------------------===//
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace dtc {
#define GEN_PASS_DEF_ROWSTOGPU
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// Whether `loop` runs one index from 0 to `extent` in steps of 1.
bool spans(scf::ParallelOp loop, int64_t extent) {
  auto constant = [](Value v) { return getConstantIntValue(v); };
  return loop.getNumLoops() == 1 && constant(loop.getLowerBound()[0]) == 0 &&
         constant(loop.getUpperBound()[0]) == extent && constant(loop.getStep()[0]) == 1;
}

/// Replaces lane loop `lanes` (in a launch's body) by its body run by
/// every thread, `thread` its lane, and its reductions by block-wide ones.
LogicalResult inlineLanes(scf::ParallelOp lanes, Value thread) {
  Block *body = lanes.getBody();
  auto reduce = cast<scf::ReduceOp>(body->getTerminator());
  body->getArgument(0).replaceAllUsesWith(thread);
  Block *outer = lanes->getBlock();
  outer->getOperations().splice(Block::iterator(lanes), body->getOperations(), body->begin(),
                                Block::iterator(reduce));
  OpBuilder b(lanes);
  for (auto [k, part] : llvm::enumerate(reduce.getOperands())) {
    auto all = b.create<gpu::AllReduceOp>(lanes.getLoc(), part.getType(), part,
                                          gpu::AllReduceOperationAttr(), /*uniform=*/true);
    IRMapping map;
    reduce.getReductions()[k].cloneInto(&all.getBody(), map);
    Block &combine = all.getBody().front();
    auto ret = cast<scf::ReduceReturnOp>(combine.getTerminator());
    OpBuilder at(ret);
    at.create<gpu::YieldOp>(ret.getLoc(), ret.getResult());
    ret.erase();
    lanes.getResult(k).replaceAllUsesWith(all.getResult());
  }
  // Writes of one pass read by another thread in the next: after a pass
  // without reductions (those synchronize the block themselves).
  if (reduce.getNumOperands() == 0)
    b.create<gpu::BarrierOp>(lanes.getLoc());
  reduce.erase();
  lanes.erase();
  return success();
}

LogicalResult rowsToGpu(func::FuncOp func, int64_t lanes) {
  SmallVector<scf::ParallelOp> top(func.getBody().front().getOps<scf::ParallelOp>());
  if (top.size() != 1 || top[0].getNumLoops() != 1 || top[0].getNumResults() != 0)
    return func.emitError() << "a row kernel should be one parallel loop over its rows";
  scf::ParallelOp rowsLoop = top[0];
  std::optional<int64_t> rows = getConstantIntValue(rowsLoop.getUpperBound()[0]);
  if (!rows || !spans(rowsLoop, *rows))
    return func.emitError() << "a row kernel's rows should run from 0 in steps of 1";
  Location loc = rowsLoop.getLoc();
  OpBuilder b(rowsLoop);
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  auto launch = b.create<gpu::LaunchOp>(loc, b.create<arith::ConstantIndexOp>(loc, *rows), one,
                                        one, b.create<arith::ConstantIndexOp>(loc, lanes), one,
                                        one);
  Block &launchBody = launch.getBody().front();
  Block *rowBody = rowsLoop.getBody();
  rowBody->getArgument(0).replaceAllUsesWith(launch.getBlockIds().x);
  rowBody->getTerminator()->erase();
  launchBody.getOperations().splice(launchBody.end(), rowBody->getOperations());
  b.setInsertionPointToEnd(&launchBody);
  b.create<gpu::TerminatorOp>(loc);
  rowsLoop.erase();
  // Lane loops are the row's own, or inside sequential loops that every
  // thread of the block runs alike (a group of rows taken in turn).
  SmallVector<scf::ParallelOp> laneLoops;
  bool nested = false;
  launch.getBody().walk([&](scf::ParallelOp loop) {
    Operation *parent = loop->getParentOp();
    while (isa<scf::ForOp>(parent))
      parent = parent->getParentOp();
    if (parent == launch.getOperation())
      laneLoops.push_back(loop);
    else
      nested = true;
  });
  if (nested)
    return func.emitError() << "a row kernel's lane loops should be its rows' own";
  for (scf::ParallelOp loop : laneLoops) {
    if (!spans(loop, lanes))
      return func.emitError() << "a lane loop should run its " << lanes << " lanes";
    if (failed(inlineLanes(loop, launch.getThreadIds().x)))
      return failure();
  }
  // A reduction in a loop over rows reuses its shared memory each turn:
  // the block meets at the turn's end, so no thread's next partial result
  // lands before every thread has read this turn's.
  launch.getBody().walk([&](scf::ForOp loop) {
    bool reduces = false;
    loop.getBody()->walk([&](gpu::AllReduceOp) { reduces = true; });
    Operation *end = loop.getBody()->getTerminator();
    Operation *last = end->getPrevNode();
    if (reduces && !(last && isa<gpu::BarrierOp>(last))) // a write pass's may end it already
      OpBuilder(end).create<gpu::BarrierOp>(loop.getLoc());
  });
  return success();
}

struct RowsToGpu : impl::RowsToGpuBase<RowsToGpu> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (auto lanes = func->getAttrOfType<IntegerAttr>(attr::kLanes))
      if (failed(rowsToGpu(func, lanes.getInt())))
        signalPassFailure();
  }
};

} // namespace
} // namespace dtc
