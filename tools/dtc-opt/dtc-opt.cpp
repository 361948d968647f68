//===- dtc-opt.cpp - mlir-opt for dtc's dialects and passes ---------------===//
#include "tools/Registration.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  dtc::registerAllDialects(registry);
  dtc::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "dtc optimizer driver\n", registry));
}
