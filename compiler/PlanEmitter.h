//===- PlanEmitter.h - a scheduled, buffer-assigned graph as a plan -*- C++ -*-===//
#ifndef DTC_COMPILER_PLANEMITTER_H
#define DTC_COMPILER_PLANEMITTER_H

#include "plan.pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace dtc {

/// Writes the module's `main` function, after the compile pipeline
/// (compiler/Pipeline.h), as a plan: the mesh, the program every rank runs,
/// the training section (`dtc.training`), the decisions (the passes'
/// notes), the format version and the producer. Ops with no instruction
/// get an error at their location; the plan is validated as the runtime
/// will (plan/PlanLoader.h) before it is returned.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, plan::Plan &out);

/// The functions that become the plan's programs: @main, or a pipelined
/// step's stages (dtc.stage) in stage order.
llvm::SmallVector<mlir::func::FuncOp> programFunctions(mlir::ModuleOp module);

/// Registers plan emission as translations for dtc-translate:
/// --graph-to-plan writes the plan file (what dtc compile writes) and
/// --graph-to-plan-text the plan as `dtc plan` shows it.
void registerPlanTranslations();

} // namespace dtc

#endif // DTC_COMPILER_PLANEMITTER_H
