//===- dtc-translate.cpp - mlir-translate for dtc's plan emission ---------===//
//
//   dtc-translate --graph-to-plan compiled.mlir -o model.dtcp
//   dtc-translate --graph-to-plan-text compiled.mlir
//
// The input is the compile pipeline's output (dtc-opt
// --dtc-compile-pipeline=...), so that plan emission has lit tests of its own.
//
//===----------------------------------------------------------------------===//
#include "compiler/PlanEmitter.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  dtc::registerPlanTranslations();
  return mlir::failed(mlir::mlirTranslateMain(argc, argv, "dtc translation driver\n"));
}
