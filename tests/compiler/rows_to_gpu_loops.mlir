// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-rows-to-gpu))' | FileCheck %s

// A row kernel whose rows come in groups, each group's taken in turn by an
// scf.for: a reduction inside it reuses its shared memory every turn, so
// the turn ends with the block meeting (else a fast thread's next partial
// result lands before a slow one has read this turn's).
// CHECK-LABEL: func.func @fold_in_a_loop
// CHECK: gpu.launch
// CHECK: scf.for
// CHECK: gpu.all_reduce
// CHECK: memref.store
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: }
// CHECK-NEXT: gpu.terminator
func.func @fold_in_a_loop(%in: memref<256xf32>, %out: memref<4xf32>)
    attributes {dtc.lanes = 64 : i64, dtc.threads = 2 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%g) = (%c0) to (%c2) step (%c1) {
    scf.for %r = %c0 to %c2 step %c1 {
      %g2 = arith.muli %g, %c2 : index
      %row = arith.addi %g2, %r : index
      %base = arith.muli %row, %c64 : index
      %sum = scf.parallel (%l) = (%c0) to (%c64) step (%c1) init (%zero) -> f32 {
        %at = arith.addi %base, %l : index
        %v = memref.load %in[%at] : memref<256xf32>
        scf.reduce(%v : f32) {
        ^bb0(%a: f32, %b: f32):
          %s = arith.addf %a, %b : f32
          scf.reduce.return %s : f32
        }
      }
      memref.store %sum, %out[%row] : memref<4xf32>
    }
    scf.reduce
  }
  return
}

// A turn that ends with a write pass's barrier gets no second one.
// CHECK-LABEL: func.func @write_pass_ends_the_turn
// CHECK: scf.for
// CHECK: gpu.all_reduce
// CHECK: memref.store
// CHECK: gpu.barrier
// CHECK-NEXT: }
// CHECK-NEXT: gpu.terminator
func.func @write_pass_ends_the_turn(%in: memref<256xf32>, %out: memref<256xf32>)
    attributes {dtc.lanes = 64 : i64, dtc.threads = 2 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%g) = (%c0) to (%c2) step (%c1) {
    scf.for %r = %c0 to %c2 step %c1 {
      %g2 = arith.muli %g, %c2 : index
      %row = arith.addi %g2, %r : index
      %base = arith.muli %row, %c64 : index
      %sum = scf.parallel (%l) = (%c0) to (%c64) step (%c1) init (%zero) -> f32 {
        %at = arith.addi %base, %l : index
        %v = memref.load %in[%at] : memref<256xf32>
        scf.reduce(%v : f32) {
        ^bb0(%a: f32, %b: f32):
          %s = arith.addf %a, %b : f32
          scf.reduce.return %s : f32
        }
      }
      scf.parallel (%l) = (%c0) to (%c64) step (%c1) {
        %at = arith.addi %base, %l : index
        memref.store %sum, %out[%at] : memref<256xf32>
        scf.reduce
      }
    }
    scf.reduce
  }
  return
}
